//! Flow control over the real server and loopback gRPC, one test per outcome: dispatched, 429 capacity,
//! 503 TTL, client gone while queued, priority order, round-robin fairness, scale from zero, and the
//! legacy (gate off) shedding rule with the configured detector.
//!
//! Saturation is steered with a concurrency-style test detector (installed through `ServerHooks`): the
//! pool is full while the requests epp counts as running, plus those released but not yet running,
//! reach a limit the test sets. Requests are "running" from their routing answer until the test drops
//! their stream, so each release frees exactly one slot. Nothing here asserts timing: every wait polls
//! with a generous deadline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::grpc_support::*;
use clap::Parser;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;
use epp::app::{Server, ServerHooks};
use epp::cli::Cli;
use epp::datastore::Endpoint;
use epp::director::RequestMetrics;
use epp::flowcontrol::{PendingLoad, SaturationDetector};
use epp::scheduling::Candidate;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

const COMPLETION: &[u8] = br#"{"model":"m","prompt":"hello world","max_tokens":10}"#;
const HEADER: &str = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n";
const OBJECTIVES: &str = "objectives:\n- {name: low, priority: -1}\n- {name: high, priority: 10}\n";

/// Saturation = (running + pending) / limit; a limit of 0 is always saturated.
#[derive(Default)]
struct ConcurrencyLimit {
    limit: AtomicI64,
    metrics: OnceLock<Arc<RequestMetrics>>,
}

impl SaturationDetector for ConcurrencyLimit {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64 {
        self.saturation_with_pending(candidates, now, PendingLoad::default())
    }

    fn saturation_with_pending(&self, _c: &[Candidate], _now: Instant, pending: PendingLoad) -> f64 {
        let limit = self.limit.load(Ordering::SeqCst);
        if limit <= 0 {
            return 1.0;
        }
        let running = self.metrics.get().map_or(0, |m| m.running_requests());
        (running + pending.requests as i64) as f64 / limit as f64
    }
}

struct Epp {
    server: Server,
    detector: Arc<ConcurrencyLimit>,
}

impl Epp {
    /// Starts epp with `config` (YAML), the test detector at `limit` unless `own_detector` is false, and
    /// the given endpoints; waits for their first scrape.
    async fn start(config: &str, endpoints: &[SocketAddr], limit: i64, own_detector: bool) -> Self {
        let detector = Arc::new(ConcurrencyLimit::default());
        detector.limit.store(limit, Ordering::SeqCst);
        let mut args = vec![
            "epp".to_string(),
            "--bind-address=127.0.0.1".into(),
            "--grpc-port=0".into(),
            "--grpc-health-port=0".into(),
            "--metrics-port=0".into(),
            "--secure-serving=false".into(),
            "--refresh-metrics-interval=20ms".into(),
            "--shutdown-grace-period=200ms".into(),
            format!("--config-text={config}"),
        ];
        if !endpoints.is_empty() {
            let list: Vec<String> = endpoints.iter().map(std::string::ToString::to_string).collect();
            args.push(format!("--endpoints={}", list.join(",")));
        }
        let hooks = ServerHooks {
            saturation_detector: own_detector
                .then(|| ("test-limit".to_string(), detector.clone() as Arc<dyn SaturationDetector>)),
        };
        let server = Server::start_with(Cli::parse_from(args), hooks).await.expect("epp starts");
        let _ = detector.metrics.set(server.request_metrics.clone());
        wait_until(|| server.datastore.endpoints().iter().all(|e| e.telemetry().update_time.is_some())).await;
        Self { server, detector }
    }

    fn set_limit(&self, limit: i64) {
        self.detector.limit.store(limit, Ordering::SeqCst);
        // The detector changed outside any event epp sees; the safety tick would also notice.
        if let Some(fc) = &self.server.flow_controller {
            fc.waker().wake();
        }
    }

    fn queued(&self) -> u64 {
        self.server.flow_controller.as_ref().map_or(0, |fc| fc.queued().0)
    }

    async fn wait_queued(&self, n: u64) {
        wait_until(|| self.queued() == n).await;
    }

    fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        sample(&self.server.metrics.encode(), name, labels)
    }

    /// Sends a complete request on a new stream; the handle finishes with the first answer (routing or
    /// immediate response) and the still-open stream.
    fn send(&self, headers: &[(&str, &str)]) -> JoinHandle<(Answer, Stream)> {
        send(self.server.grpc_addr, headers)
    }
}

fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, rest) = series.split_once('{').unwrap_or((series, ""));
        (series_name == name && wanted.iter().all(|w| rest.contains(w.as_str())))
            .then(|| value.parse().ok())?
    })
}

#[derive(Debug, PartialEq)]
enum Answer {
    /// Routed to this destination.
    Routed(String),
    /// An immediate response: HTTP status and body.
    Immediate(i32, String),
}

fn send(addr: SocketAddr, extra: &[(&str, &str)]) -> JoinHandle<(Answer, Stream)> {
    let mut headers: Vec<(String, String)> =
        post_headers("/v1/completions").into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    tokio::spawn(async move {
        let mut client = ExternalProcessorClient::connect(format!("http://{addr}")).await.expect("connect");
        let (tx, rx) = mpsc::channel(16);
        let rx = client.process(ReceiverStream::new(rx)).await.expect("process").into_inner();
        let mut stream = Stream { tx, rx };
        let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        stream.send(request_headers(&refs, false, Some(BodySendMode::FullDuplexStreamed))).await;
        stream.send(body(COMPLETION, true)).await;
        let first = stream.rx.message().await.expect("stream ok").expect("an answer");
        let answer = match &first.response {
            Some(Resp::ImmediateResponse(_)) => {
                let (code, body) = immediate_of(first.response.as_ref().unwrap());
                Answer::Immediate(code, body)
            }
            _ => Answer::Routed(
                routing_of(&first).set.get("x-gateway-destination-endpoint").cloned().unwrap_or_default(),
            ),
        };
        (answer, stream)
    })
}

fn flow_config(extra: &str) -> String {
    format!("{HEADER}featureGates: [flowControl]\n{OBJECTIVES}{extra}")
}

#[tokio::test]
async fn a_request_with_room_is_dispatched() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp = Epp::start(&flow_config(""), &[ms.addr], 10, true).await;
    let (answer, _stream) = epp.send(&[]).await.unwrap();
    assert_eq!(answer, Answer::Routed(ms.addr.to_string()));
    let dispatched = [("outcome", "Dispatched"), ("priority", "0"), ("inference_pool", "default-pool")];
    assert_eq!(epp.sample("llm_d_epp_flow_control_requests_total", &dispatched), Some(1.0));
    let queue = [("fairness_id", "default-flow"), ("model_name", "m")];
    assert_eq!(epp.sample("llm_d_epp_flow_control_queue_size", &queue), Some(0.0));
    assert_eq!(epp.server.flow_controller.as_ref().unwrap().pending(), PendingLoad::default());
    epp.server.shutdown().await;
}

#[tokio::test]
async fn a_full_queue_rejects_with_429() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp = Epp::start(&flow_config("flowControl: {maxRequests: 1}\n"), &[ms.addr], 0, true).await;
    let queued = epp.send(&[]);
    epp.wait_queued(1).await;
    let (answer, _) = epp.send(&[]).await.unwrap();
    assert!(
        matches!(answer, Answer::Immediate(429, ref b) if b.contains("request rejected by flow control")),
        "{answer:?}"
    );
    let rejected = [("outcome", "RejectedCapacity"), ("priority", "0")];
    assert_eq!(epp.sample("llm_d_epp_flow_control_requests_total", &rejected), Some(1.0));
    epp.set_limit(10);
    assert_eq!(queued.await.unwrap().0, Answer::Routed(ms.addr.to_string()));
    epp.server.shutdown().await;
}

#[tokio::test]
async fn a_request_past_its_ttl_gets_503() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp =
        Epp::start(&flow_config("flowControl: {defaultRequestTTL: 200ms}\n"), &[ms.addr], 0, true).await;
    let (answer, _) = epp.send(&[("x-gateway-inference-fairness-id", "tenant")]).await.unwrap();
    assert!(
        matches!(answer, Answer::Immediate(503, ref b) if b.contains("request timed out in queue")),
        "{answer:?}"
    );
    assert_eq!(epp.sample("llm_d_epp_flow_control_requests_total", &[("outcome", "EvictedTTL")]), Some(1.0));
    let queue = [("fairness_id", "tenant")];
    assert_eq!(epp.sample("llm_d_epp_flow_control_queue_size", &queue), Some(0.0));
    assert_eq!(epp.sample("inference_extension_flow_control_queue_bytes", &queue), Some(0.0));
    epp.server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_leaves_the_queue() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp = Epp::start(&flow_config(""), &[ms.addr], 0, true).await;
    let queue = [("fairness_id", "gone"), ("priority", "0")];
    let waiting = epp.send(&[("x-gateway-inference-fairness-id", "gone")]);
    wait_until(|| epp.sample("llm_d_epp_flow_control_queue_size", &queue) == Some(1.0)).await;
    // Dropping the task drops the client stream: Envoy going away.
    waiting.abort();
    let _ = waiting.await;
    wait_until(|| epp.sample("llm_d_epp_flow_control_queue_size", &queue) == Some(0.0)).await;
    assert_eq!(epp.sample("llm_d_epp_flow_control_queue_bytes", &queue), Some(0.0));
    let cancelled = [("outcome", "EvictedContextCancelled"), ("priority", "0")];
    assert_eq!(epp.sample("llm_d_epp_flow_control_requests_total", &cancelled), Some(1.0));
    assert_eq!(epp.queued(), 0);
    epp.server.shutdown().await;
}

#[tokio::test]
async fn when_capacity_frees_the_higher_priority_goes_first() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp = Epp::start(&flow_config(""), &[ms.addr], 1, true).await;
    let (answer, occupier) = epp.send(&[]).await.unwrap();
    assert!(matches!(answer, Answer::Routed(_)));
    let low = epp.send(&[("x-gateway-inference-objective", "low")]);
    epp.wait_queued(1).await;
    let high = epp.send(&[("x-gateway-inference-objective", "high")]);
    epp.wait_queued(2).await;
    assert_eq!(
        epp.sample("llm_d_epp_flow_control_queue_size", &[("priority", "-1")]),
        Some(1.0),
        "queued, not shed"
    );
    drop(occupier);
    wait_until(|| high.is_finished()).await;
    assert_eq!(epp.queued(), 1);
    assert!(!low.is_finished());
    let (_, high_stream) = high.await.unwrap();
    drop(high_stream);
    assert!(matches!(low.await.unwrap().0, Answer::Routed(_)));
    epp.server.shutdown().await;
}

#[tokio::test]
async fn round_robin_alternates_between_fairness_ids() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let config = flow_config(
        "plugins:\n- type: round-robin-fairness-policy\n\
         flowControl:\n  defaultPriorityBand: {fairnessPolicyRef: round-robin-fairness-policy}\n",
    );
    let epp = Epp::start(&config, &[ms.addr], 1, true).await;
    let (_, mut running) = epp.send(&[]).await.unwrap();
    let mut waiting = Vec::new();
    for (name, flow) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        waiting.push((name, epp.send(&[("x-gateway-inference-fairness-id", flow)])));
        epp.wait_queued(waiting.len() as u64).await;
    }
    let mut order = Vec::new();
    while !waiting.is_empty() {
        let before = epp.queued();
        drop(running);
        wait_until(|| waiting.iter().any(|(_, h)| h.is_finished())).await;
        assert_eq!(epp.queued(), before - 1, "exactly one released per freed slot");
        let i = waiting.iter().position(|(_, h)| h.is_finished()).unwrap();
        let (name, handle) = waiting.remove(i);
        running = handle.await.unwrap().1;
        order.push(name);
    }
    assert_eq!(order, ["a1", "b1", "a2"]);
    epp.server.shutdown().await;
}

#[tokio::test]
async fn requests_wait_for_the_first_endpoint_when_scaling_from_zero() {
    // No test detector: the configured (or fallback) detector must hold requests until an endpoint is up
    // and has reported telemetry.
    let epp = Epp::start(&flow_config(""), &[], 0, false).await;
    let waiting = epp.send(&[]);
    epp.wait_queued(1).await;
    assert_eq!(epp.sample("llm_d_epp_flow_control_queue_size", &[("model_name", "m")]), Some(1.0));
    let effective = [("inference_pool", "default-pool"), ("stage", "effective")];
    assert_eq!(epp.sample("llm_d_epp_flow_control_pool_saturation", &effective), Some(1.0));
    let ms = FakeModelServer::start(0, 0.1).await;
    let endpoint =
        Endpoint::new(ms.addr.to_string(), ms.addr).with_metrics_url(format!("http://{}/metrics", ms.addr));
    epp.server.datastore.set_endpoints(vec![endpoint]);
    let (answer, _stream) = waiting.await.unwrap();
    assert_eq!(answer, Answer::Routed(ms.addr.to_string()));
    assert_eq!(epp.sample("llm_d_epp_flow_control_queue_size", &[("model_name", "m")]), Some(0.0));
    epp.server.shutdown().await;
}

#[tokio::test]
async fn an_explicitly_empty_subset_fails_at_once_even_with_flow_control() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp = Epp::start(&flow_config(""), &[ms.addr], 10, true).await;
    let mut client =
        ExternalProcessorClient::connect(format!("http://{}", epp.server.grpc_addr)).await.unwrap();
    let (tx, rx) = mpsc::channel(4);
    let rx = client.process(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut s = Stream { tx, rx };
    let h = post_headers("/v1/completions");
    let refs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.send(with_subset(request_headers(&refs, false, Some(BodySendMode::FullDuplexStreamed)), &[])).await;
    s.send(body(COMPLETION, true)).await;
    let (code, _) = immediate_of(&s.recv().await);
    assert_eq!(code, 503);
    assert_eq!(epp.sample("llm_d_epp_flow_control_requests_total", &[]), None, "never queued");
    epp.server.shutdown().await;
}

#[tokio::test]
async fn without_the_gate_the_configured_detector_sheds_sheddable_requests() {
    let ms = FakeModelServer::start(0, 0.1).await;
    let epp = Epp::start(&format!("{HEADER}{OBJECTIVES}"), &[ms.addr], 0, true).await;
    assert!(epp.server.flow_controller.is_none());
    let (answer, _) = epp.send(&[("x-gateway-inference-objective", "low")]).await.unwrap();
    assert!(
        matches!(answer, Answer::Immediate(429, ref b) if b.contains("system saturated, sheddable request dropped")),
        "{answer:?}"
    );
    let (answer, _stream) = epp.send(&[]).await.unwrap();
    assert_eq!(answer, Answer::Routed(ms.addr.to_string()), "priority 0 is never shed");
    epp.server.shutdown().await;
}
