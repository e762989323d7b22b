//! epp's route probe (`POST /debug/route<path>` on the metrics port, with `--enable-route-probe`) from
//! tests: where epp would send a request now, and what it read about each candidate.

use std::time::Duration;

use serde_json::Value;

use super::{post_json, read_json, PROPAGATION_DEADLINE};

/// The probe's answer for `body` sent through epp's metrics port to `/v1/chat/completions` when it has
/// `messages`, else to `/v1/completions`.
pub async fn route_probe(client: &reqwest::Client, metrics_port: u16, body: &Value) -> Value {
    let api = if body.get("messages").is_some() { "/v1/chat/completions" } else { "/v1/completions" };
    let url = format!("http://127.0.0.1:{metrics_port}/debug/route{api}");
    read_json(post_json(client, &url, body).await).await
}

/// Polls the probe until `ready` holds for its answer or [`PROPAGATION_DEADLINE`] passes; returns the last
/// answer (the caller asserts on it, so a failure shows what epp saw).
pub async fn wait_for_probe(
    client: &reqwest::Client,
    metrics_port: u16,
    body: &Value,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + PROPAGATION_DEADLINE;
    loop {
        let probe = route_probe(client, metrics_port, body).await;
        if ready(&probe) || tokio::time::Instant::now() > deadline {
            return probe;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The probe's candidate at `address` (`ip:port`), as epp scraped it.
pub fn probe_candidate<'a>(probe: &'a Value, address: &str) -> Option<&'a Value> {
    probe["candidates"].as_array()?.iter().find(|c| c["address"] == address)
}
