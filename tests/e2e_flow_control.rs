//! End-to-end proof of admission, flow control and the autoscaling signals, through real processes on
//! loopback: client → Envoy (ext_proc, full duplex) → epp → held backends, with a real Prometheus for the
//! KEDA queries.
//!
//! Why held backends (crates/testkit/src/held_backend.rs): saturation here is deterministic. epp's
//! `concurrency-detector` counts the requests epp itself has in flight, and the backends hold every
//! request carrying `x-test-hold` until the test releases it, so "the pool is full" lasts exactly as long
//! as the test needs and each release frees exactly one slot. Nothing asserts timing: every wait polls
//! with a generous deadline.
//!
//! Layout: this file holds the shared fixtures (configs, sending, waiting on epp's /metrics);
//! `e2e_flow_control/legacy.rs` shedding without the gate; `e2e_flow_control/queueing.rs` the queue
//! draining as capacity frees, the capacity (429) and TTL (503) outcomes, the deprecated env var and
//! scale from zero; `e2e_flow_control/keda.rs` the four KEDA signals of deploy/keda/ evaluated by
//! Prometheus during and after the load. Without Envoy (or Prometheus, for the KEDA test) the tests fail
//! (`EPP_SKIP_MISSING_TOOLS=1` skips them, printing SKIP, outside CI).

#[path = "e2e_flow_control/keda.rs"]
mod keda;
#[path = "e2e_flow_control/legacy.rs"]
mod legacy;
#[path = "e2e_flow_control/queueing.rs"]
mod queueing;

use epp_testkit::held_backend::{HeldBackends, HOLD_HEADER};
use epp_testkit::*;
use serde_json::json;
use tokio::task::JoinHandle;

pub const FULL_DUPLEX: &str = "envoy-full-duplex.yaml";
/// The model every request names.
pub const MODEL: &str = "food-review";
/// epp's `--pool-name`: the `inference_pool` label of the saturation gauge.
pub const POOL: &str = "keda-e2e-pool";
pub const OBJECTIVE_HEADER: &str = "x-gateway-inference-objective";
/// The two InferenceObjectives (epp's `objectives` extension): `batch` is sheddable.
const OBJECTIVES: &str = "objectives:\n- {name: batch, priority: -1}\n- {name: interactive, priority: 10}\n";
const TYPE_META: &str = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n";

/// How the concurrency detector is used by a test config.
#[derive(Debug, Clone, Copy)]
pub struct Detector {
    /// `maxConcurrency` per endpoint (requests mode).
    pub max_concurrency: u32,
    /// Also list it in the scheduling profile, so its filter spreads requests (at most
    /// `max_concurrency` per endpoint). Off in the legacy test: there a full endpoint must still take the
    /// requests that are not shed.
    pub in_profile: bool,
}

/// An EndpointPickerConfig with the concurrency detector as `saturationDetector`, the
/// `inflight-load-producer` (the token-backlog signal), the two objectives, the `flowControl` gate when
/// `gate`, and `extra` YAML appended (e.g. a `flowControl` block).
pub fn detector_config(detector: Detector, gate: bool, extra: &str) -> String {
    let gates = if gate { "featureGates: [flowControl]\n" } else { "" };
    // Without profiles epp builds one with every filter, the detector's included: name it explicitly.
    let profile = if detector.in_profile {
        "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: detector\n"
    } else {
        "schedulingProfiles:\n- name: default\n  plugins: []\n"
    };
    format!(
        "{TYPE_META}{gates}plugins:\n\
         - name: detector\n  type: concurrency-detector\n  parameters:\n    concurrencyMode: requests\n    \
         maxConcurrency: {}\n\
         - type: inflight-load-producer\n\
         {profile}saturationDetector:\n  pluginRef: detector\n{OBJECTIVES}{extra}",
        detector.max_concurrency
    )
}

/// Starts epp with `config` for `backends` (fast pool gauges, pool [`POOL`]) behind a full-duplex Envoy.
pub fn start_front(test_name: &str, backends: &HeldBackends, config: &str) -> Option<EppBehindEnvoy> {
    start_front_for(test_name, &backends.endpoints(), config, &[])
}

/// [`start_front`] for explicit endpoints, with extra environment variables for epp.
pub fn start_front_for(
    test_name: &str,
    endpoints: &str,
    config: &str,
    epp_env: &[(&str, &str)],
) -> Option<EppBehindEnvoy> {
    envoy_or_skip(test_name)?;
    let config_arg = format!("--config-text={config}");
    let pool_arg = format!("--pool-name={POOL}");
    let epp = start_epp_for_with_env(endpoints, &[FAST_POOL_GAUGES, &pool_arg, &config_arg], epp_env);
    // The routing answer waits for admission: Envoy's ext_proc message_timeout must outlast any queue wait.
    let vars = [
        ("EXTPROC_PORT", epp.grpc_port.to_string()),
        ("HEALTH_PORT", epp.health_port.to_string()),
        ("MESSAGE_TIMEOUT", "600s".to_string()),
    ];
    let envoy = start_envoy_on_free_ports(FULL_DUPLEX, &vars);
    Some(EppBehindEnvoy { envoy, epp })
}

/// What came back for one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    /// The `x-backend-id` of the backend that served it (none for epp's own answers).
    pub backend: Option<String>,
    /// `x-llm-d-request-dropped-reason`: why epp refused it.
    pub dropped: Option<String>,
}

/// Sends one completion through Envoy, with the objective header if given and held at the backend if
/// `hold`.
pub async fn send(
    client: &reqwest::Client,
    front: &EppBehindEnvoy,
    objective: Option<&str>,
    hold: bool,
) -> Reply {
    spawn_send(client, front, objective, hold).await.expect("send task")
}

/// [`send`] on a task of its own, for requests that wait (held, or queued in epp).
pub fn spawn_send(
    client: &reqwest::Client,
    front: &EppBehindEnvoy,
    objective: Option<&str>,
    hold: bool,
) -> JoinHandle<Reply> {
    let client = client.clone();
    let url = front.url("/v1/completions");
    let prompt = format!("request {} about endpoint pickers and their queues", rand::random::<u64>());
    let body = serde_json::to_vec(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 5})).unwrap();
    let mut headers: Vec<(&'static str, String)> = Vec::new();
    if let Some(objective) = objective {
        headers.push((OBJECTIVE_HEADER, objective.to_string()));
    }
    if hold {
        headers.push((HOLD_HEADER, "1".to_string()));
    }
    tokio::spawn(async move {
        let headers: Vec<(&str, &str)> =
            headers.iter().map(|(name, value)| (*name, value.as_str())).collect();
        let response = post_raw(&client, &url, body, &headers).await;
        let status = response.status().as_u16();
        let backend = header(&response, "x-backend-id");
        let dropped = header(&response, "x-llm-d-request-dropped-reason");
        let body = read_text(response).await;
        Reply { status, body, backend, dropped }
    })
}

/// Starts `count` held requests at once (no objective).
pub fn spawn_held(client: &reqwest::Client, front: &EppBehindEnvoy, count: usize) -> Vec<JoinHandle<Reply>> {
    (0..count).map(|_| spawn_send(client, front, None, true)).collect()
}

/// Waits for every request and returns the replies.
pub async fn replies(handles: Vec<JoinHandle<Reply>>) -> Vec<Reply> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("send task"));
    }
    out
}

/// Waits until the backends hold exactly `count` requests.
pub async fn wait_held(backends: &HeldBackends, count: i64) {
    let ok = wait_until_async(PROPAGATION_DEADLINE, || {
        let held = backends.held();
        async move { held == count }
    })
    .await;
    assert!(ok, "backends hold {} requests, expected {count}", backends.held());
}

/// Polls epp's /metrics until `ready` holds; returns that text. Panics with the metrics otherwise.
pub async fn wait_for_metrics(epp: &Epp, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    let ok = wait_until_async(PROPAGATION_DEADLINE, || {
        text = epp.metrics_text();
        let ok = ready(&text);
        async move { ok }
    })
    .await;
    assert!(ok, "{what}: epp /metrics never got there:\n{text}");
    text
}

/// Requests in epp's flow-control queues, over every flow and band.
pub fn queued(text: &str) -> f64 {
    metric_sum(text, "llm_d_epp_flow_control_queue_size", &[("model_name", MODEL)]).unwrap_or(0.0)
}

/// The gating saturation epp last published for [`POOL`].
pub fn pool_saturation(text: &str) -> Option<f64> {
    metric_sample(
        text,
        "llm_d_epp_flow_control_pool_saturation",
        &[("inference_pool", POOL), ("stage", "effective")],
    )
}

/// `llm_d_epp_flow_control_requests_total` for `outcome`, over priorities.
pub fn outcomes(text: &str, outcome: &str) -> f64 {
    metric_sum(text, "llm_d_epp_flow_control_requests_total", &[("outcome", outcome)]).unwrap_or(0.0)
}
