//! The route probe (`POST /debug/route` on the metrics port) on the real server over loopback: absent
//! without `--enable-route-probe`; with it, an explanation whose pick is where the ext_proc path routes the
//! same request (over gRPC, and through a real Envoy when one is installed), the ext_proc path's 400s for
//! bad requests, and nothing counted or booked.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::grpc_support::*;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use epp::app::Server;
use serde_json::Value;

const PROBE: &str = "/debug/route/v1/completions";
const COMPLETION: &str = r#"{"model":"m","prompt":"hello world","max_tokens":10}"#;
/// Deterministic (max-score over queue and KV cache), with the in-flight producer so that booking would
/// show in `llm_d_epp_inflight_requests`.
const CONFIG: &str = "--config-text=apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: inflight-load-producer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
";

async fn probe(epp: &Server, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut request = reqwest::Client::new().post(format!("http://{}{path}", epp.metrics_addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.body(body.to_string()).send().await.expect("the metrics port answers");
    (response.status().as_u16(), response.text().await.expect("a body"))
}

async fn explain(epp: &Server, headers: &[(&str, &str)]) -> Value {
    let (status, body) = probe(epp, PROBE, headers, COMPLETION).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

fn picked(answer: &Value) -> String {
    answer["pick"]["address"].as_str().unwrap_or_else(|| panic!("no pick: {answer}")).to_string()
}

/// What ext_proc answers for one completion: the routing destination, or the immediate response's status
/// and body. The stream comes back too: while it is open the request is in flight.
async fn ext_proc(
    epp: &Server,
    headers: &[(&str, &str)],
    body: &str,
) -> (Stream, Result<String, (i32, String)>) {
    use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;
    let mut stream = Stream::open(epp).await;
    let mut all: Vec<(&str, &str)> = vec![(":method", "POST"), (":path", "/v1/completions")];
    all.extend_from_slice(headers);
    stream.send(request_headers(&all, false, Some(BodySendMode::FullDuplexStreamed))).await;
    stream.send(crate::grpc_support::body(body.as_bytes(), true)).await;
    let answer = stream.recv_full().await;
    let outcome = match &answer.response {
        Some(immediate @ Resp::ImmediateResponse(_)) => Err(immediate_of(immediate)),
        _ => {
            Ok(routing_of(&answer).set.get("x-gateway-destination-endpoint").cloned().expect("a destination"))
        }
    };
    (stream, outcome)
}

/// The candidate at `addr` in a probe's answer.
fn candidate<'a>(answer: &'a Value, addr: &SocketAddr) -> &'a Value {
    let addr = addr.to_string();
    let candidates = answer["candidates"].as_array().map(Vec::as_slice).unwrap_or_default();
    candidates
        .iter()
        .find(|c| c["address"].as_str() == Some(&addr))
        .unwrap_or_else(|| panic!("{addr} in {answer}"))
}

/// The lines of the families that count requests, schedule them or book them.
async fn request_series(epp: &Server) -> Vec<String> {
    const COUNTING: [&str; 7] = [
        "inference_objective_",
        "llm_d_epp_request",
        "llm_d_epp_inflight",
        "llm_d_epp_scheduler",
        "inference_extension_scheduler",
        "inference_extension_plugin_duration",
        "llm_d_epp_plugin_duration",
    ];
    let page = reqwest::get(format!("http://{}/metrics", epp.metrics_addr)).await.expect("metrics");
    let page = page.text().await.expect("metrics text");
    page.lines().filter(|l| COUNTING.iter().any(|family| l.starts_with(family))).map(str::to_string).collect()
}

#[tokio::test]
async fn without_the_flag_there_is_no_probe() {
    let server = FakeModelServer::start(0, 0.1).await;
    let epp = start_epp(&[server.addr], &[CONFIG]).await;
    assert_eq!(probe(&epp, PROBE, &[], COMPLETION).await.0, 404);
    assert_eq!(probe(&epp, "/debug/route", &[], COMPLETION).await.0, 404);
    epp.shutdown().await;
}

#[tokio::test]
async fn the_probe_explains_the_pick_and_answers_bad_requests_as_ext_proc_does() {
    let (idle, busy) = (FakeModelServer::start(0, 0.1).await, FakeModelServer::start(8, 0.9).await);
    let epp = start_epp(&[busy.addr, idle.addr], &[CONFIG, "--enable-route-probe"]).await;
    let answer = explain(&epp, &[("x-request-id", "probe-1"), ("x-slo-ttft-ms", "250")]).await;
    assert_eq!(picked(&answer), idle.addr.to_string());
    assert_eq!((answer["request_id"].as_str(), answer["model"].as_str()), (Some("probe-1"), Some("m")));
    assert_eq!(answer["slo"]["ttft_ms"].as_f64(), Some(250.0));
    assert_eq!(answer["candidates"].as_array().map(Vec::len), Some(2));
    assert_eq!(candidate(&answer, &busy.addr)["waiting_queue_size"].as_u64(), Some(8));
    let scored = &answer["profiles"][0]["candidates"][0];
    assert_eq!(scored["scores"].as_array().map(Vec::len), Some(2), "{scored}");
    assert!(answer["refusal"].is_null() && answer["seed"].is_u64());

    // Bad requests: the same status and body as the ext_proc path gives them.
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[], "{not json"),
        (&[("x-slo-ttft-ms", "soon")], COMPLETION),
        (&[("x-llm-d-slo-tpot-ms", "-1")], COMPLETION),
    ];
    for (headers, body) in cases {
        let (status, text) = probe(&epp, PROBE, headers, body).await;
        let (code, expected) = ext_proc(&epp, headers, body).await.1.expect_err("ext_proc rejects it");
        assert_eq!((status, text.as_str()), (400, expected.as_str()));
        assert_eq!(code, 400);
        assert!(text.starts_with("inference error: BadRequest - "), "{text}");
    }
    let (status, text) = probe(&epp, &format!("{PROBE}?seed=soon"), &[], COMPLETION).await;
    assert_eq!(status, 400, "{text}");
    epp.shutdown().await;
}

#[tokio::test]
async fn probing_counts_and_books_nothing() {
    let (idle, busy) = (FakeModelServer::start(0, 0.1).await, FakeModelServer::start(8, 0.9).await);
    let epp = start_epp(&[busy.addr, idle.addr], &[CONFIG, "--enable-route-probe"]).await;
    let before = request_series(&epp).await;
    for _ in 0..5 {
        let answer = explain(&epp, &[]).await;
        for addr in [idle.addr, busy.addr] {
            assert_eq!(candidate(&answer, &addr)["inflight_requests"].as_i64(), Some(0));
        }
    }
    assert_eq!(probe(&epp, PROBE, &[], "{not json").await.0, 400);
    assert_eq!(request_series(&epp).await, before);
    assert_eq!(epp.request_metrics.running_requests(), 0);

    // A real request moves those series (so the comparison above could fail), and the probe sees it in
    // flight.
    let (_in_flight, routed) = ext_proc(&epp, &[], COMPLETION).await;
    assert_eq!(routed, Ok(idle.addr.to_string()));
    assert_ne!(request_series(&epp).await, before);
    let answer = explain(&epp, &[]).await;
    assert_eq!(candidate(&answer, &idle.addr)["inflight_requests"].as_i64(), Some(1), "{answer}");
    epp.shutdown().await;
}

#[tokio::test]
async fn the_probe_picks_what_ext_proc_routes_as_the_load_moves() {
    let (a, b) = (FakeModelServer::start(0, 0.1).await, FakeModelServer::start(8, 0.9).await);
    let epp = start_epp(&[a.addr, b.addr], &[CONFIG, "--enable-route-probe"]).await;
    for round in 0..4u64 {
        let (idle, busy) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        idle.set(round, 0.1);
        busy.set(8 + round, 0.9);
        wait_for_telemetry(&epp, &[(idle.addr, round), (busy.addr, 8 + round)]).await;
        let probed = picked(&explain(&epp, &[]).await);
        assert_eq!(ext_proc(&epp, &[], COMPLETION).await.1, Ok(probed.clone()), "round {round}");
        assert_eq!(probed, idle.addr.to_string(), "round {round}");
    }
    epp.shutdown().await;
}

/// Polls the probe until its snapshot shows each endpoint's `waiting` queue (the fakes were just changed).
async fn wait_for_telemetry(epp: &Server, waiting: &[(SocketAddr, u64)]) {
    for _ in 0..500 {
        let answer = explain(epp, &[]).await;
        let candidates = answer["candidates"].as_array().cloned().unwrap_or_default();
        let seen = |addr: &SocketAddr, w: u64| {
            candidates.iter().any(|c| {
                c["address"].as_str() == Some(&addr.to_string())
                    && c["waiting_queue_size"].as_u64() == Some(w)
            })
        };
        if waiting.iter().all(|(addr, w)| seen(addr, *w)) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("telemetry {waiting:?} not scraped within 10s");
}

/// A model server for the Envoy test: vLLM `/metrics` with a settable queue, and completions answered
/// with its own address, so the test sees where Envoy sent the request.
struct Backend {
    addr: SocketAddr,
    waiting: Arc<Mutex<u64>>,
}

impl Backend {
    async fn start(waiting: u64) -> Self {
        use axum::{routing::get, routing::post, Router};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(Mutex::new(waiting));
        let queue = state.clone();
        let app = Router::new()
            .route(
                "/metrics",
                get(move || {
                    let waiting = *queue.lock().expect("queue");
                    async move {
                        let mut page = epp_sim::VllmPage::new("m");
                        (page.waiting, page.running, page.kv_usage) = (waiting as f64, 1.0, 0.2);
                        page.render()
                    }
                }),
            )
            .route("/v1/completions", post(move || async move { addr.to_string() }));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, waiting: state }
    }

    fn set(&self, waiting: u64) {
        *self.waiting.lock().expect("queue") = waiting;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_envoy_the_request_lands_where_the_probe_said() {
    const NAME: &str = "through_envoy_the_request_lands_where_the_probe_said";
    if epp_testkit::envoy::envoy_or_skip(NAME).is_none() {
        return;
    }
    let (a, b) = (Backend::start(0).await, Backend::start(6).await);
    let epp = start_epp(&[a.addr, b.addr], &[CONFIG, "--enable-route-probe"]).await;
    let vars = [
        ("EXTPROC_PORT", epp.grpc_addr.port().to_string()),
        ("HEALTH_PORT", epp.health_addr.port().to_string()),
        (epp_testkit::PLAINTEXT_EXTPROC.0, epp_testkit::PLAINTEXT_EXTPROC.1.to_string()),
    ];
    let envoy = tokio::task::spawn_blocking(move || {
        epp_testkit::envoy::start_envoy_on_free_ports("envoy-full-duplex.yaml", &vars)
    })
    .await
    .expect("envoy starts");
    let client = reqwest::Client::new();
    for round in 0..4u64 {
        let (idle, busy) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        idle.set(round);
        busy.set(6 + round);
        wait_for_telemetry(&epp, &[(idle.addr, round), (busy.addr, 6 + round)]).await;
        let probed = picked(&explain(&epp, &[]).await);
        let served = client
            .post(envoy.url("/v1/completions"))
            .header("content-type", "application/json")
            .body(COMPLETION)
            .send()
            .await
            .expect("Envoy answers");
        assert_eq!(served.status().as_u16(), 200, "round {round}");
        let served = served.text().await.expect("body");
        assert_eq!(served, probed, "round {round}: Envoy sent it elsewhere");
        assert_eq!(probed, idle.addr.to_string(), "round {round}");
    }
    tokio::task::spawn_blocking(move || drop(envoy)).await.expect("envoy stops");
    epp.shutdown().await;
}
