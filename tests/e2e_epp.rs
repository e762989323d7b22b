//! End-to-end tests of epp through a real Envoy: client → Envoy (ext_proc) → epp → Envoy's ORIGINAL_DST
//! cluster → epp-test-backend. Each test starts its own stack on free ports (see crates/testkit).
//!
//! Why through Envoy and not only over loopback gRPC: Envoy decides what epp's answers mean (which header
//! mutations it accepts in which body mode, what it does to Content-Length, whether it streams), and those
//! rules are only checked here. Tests steer the scheduler through the load the backends report, wait until
//! epp's own /metrics shows it has scraped that load, and never assert timing.
//!
//! Layout: this file holds the shared fixtures; `e2e_epp/routing.rs` the load-following, control-header and
//! header-only routing tests; `e2e_epp/body.rs` body forwarding, rewrites, errors and SSE streaming;
//! `e2e_epp/lifecycle.rs` epp's request metrics after completed, abandoned and failed requests;
//! `e2e_epp/standby.rs` a hot standby taking over from a killed or stopped primary; `e2e_epp/tracing.rs`
//! OpenTelemetry spans at a real OTLP receiver and the trace handed upstream; `e2e_epp/tls.rs` mutual TLS
//! and certificate rotation on the ext_proc port. Without Envoy
//! the tests fail (`EPP_SKIP_MISSING_TOOLS=1` skips them, printing SKIP, outside CI).

#[path = "e2e_epp/body.rs"]
mod body;
#[path = "e2e_epp/lifecycle.rs"]
mod lifecycle;
#[path = "e2e_epp/routing.rs"]
mod routing;
#[path = "e2e_epp/standby.rs"]
mod standby;
#[path = "e2e_epp/tls.rs"]
mod tls;
#[path = "e2e_epp/tracing.rs"]
mod tracing;

use epp_testkit::*;
use serde_json::{json, Value};

pub const FULL_DUPLEX: &str = "envoy-full-duplex.yaml";
pub const BUFFERED: &str = "envoy-buffered.yaml";
/// The model every test requests (the backends echo whatever model they are asked for).
pub const MODEL: &str = "food-review";

/// What an idle backend reports: empty queue, almost empty KV cache.
pub fn idle_load() -> Value {
    json!({"waiting": 0, "running": 0, "kv": 0.05})
}

/// What a busy backend reports: a long queue and a nearly full KV cache.
pub fn busy_load() -> Value {
    json!({"waiting": 12, "running": 6, "kv": 0.95})
}

/// Starts a stack of `backend_count` backends with fast pool gauges (so loads can be waited for).
pub fn stack_with(
    test_name: &str,
    template: &str,
    backend_count: usize,
    backend_args: &[&str],
) -> Option<Stack> {
    start_stack(test_name, template, backend_count, backend_args, &[FAST_POOL_GAUGES])
}

/// Makes backend `idle` idle and every other backend busy, then waits until epp has scraped all of it.
pub async fn make_only_idle(client: &reqwest::Client, stack: &Stack, idle: usize) {
    let mut queues = Vec::new();
    for (index, &port) in stack.backends.ports.iter().enumerate() {
        let load = if index == idle { idle_load() } else { busy_load() };
        set_backend_load(client, port, &load).await;
        queues.push((port, load["waiting"].as_f64().unwrap_or_default()));
    }
    wait_for_scraped_queues(&stack.epp, &queues).await;
}

/// A prompt no other request shares, so the prefix-cache scorer has no affinity to follow and load alone
/// decides.
pub fn unique_prompt(tag: &str, n: usize) -> String {
    format!("{tag} {n} {}: tell me about endpoint pickers", rand::random::<u64>())
}

/// Sends one completion through Envoy; returns the status and the `x-backend-id` that served it.
pub async fn send_completion(client: &reqwest::Client, stack: &Stack, prompt: &str) -> (u16, Option<String>) {
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 5});
    let response = post_json(client, &stack.url("/v1/completions"), &body).await;
    let status = response.status().as_u16();
    let backend = header(&response, "x-backend-id");
    let text = read_text(response).await;
    assert_eq!(status, 200, "completion failed: {text}");
    (status, backend)
}

/// Sends `count` completions with unique prompts and asserts every one was served by backend `expected`.
pub async fn assert_all_served_by(client: &reqwest::Client, stack: &Stack, expected: usize, count: usize) {
    let expected_id = stack.backends.id(expected);
    for n in 0..count {
        let (_, backend) = send_completion(client, stack, &unique_prompt("route", n)).await;
        assert_eq!(backend.as_deref(), Some(expected_id.as_str()), "request {n} went elsewhere");
    }
}
