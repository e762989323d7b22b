//! The controller end to end without gRPC: a real dispatcher task, a datastore, the metrics registry and
//! a detector the tests steer. Nothing here asserts timing: tests wait for states with generous deadlines.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::*;
use crate::datastore::{Datastore, Endpoint};
use crate::datastore::{SubsetHint, SubsetMatch};
use crate::flowcontrol::settings::{FairnessPolicy, FlowControlConfig, OrderingPolicy, PriorityBand};
use crate::metrics::{MetricsRegistry, RequestLabels};
use crate::scheduling::Candidate;

/// Saturated while `pending.requests >= limit`; candidate sets containing a "hot" endpoint are always
/// saturated.
#[derive(Default)]
struct SteeredDetector {
    limit: AtomicU64,
    hot: Mutex<Vec<SocketAddr>>,
}

impl SaturationDetector for SteeredDetector {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64 {
        self.saturation_with_pending(candidates, now, PendingLoad::default())
    }

    fn saturation_with_pending(&self, candidates: &[Candidate], _now: Instant, pending: PendingLoad) -> f64 {
        let hot = self.hot.lock().unwrap();
        if candidates.iter().any(|c| hot.contains(&c.endpoint.addr)) {
            return 2.0;
        }
        if pending.requests >= self.limit.load(Ordering::SeqCst) {
            1.0
        } else {
            0.0
        }
    }

    fn stale_endpoints(&self, _candidates: &[Candidate], _now: Instant) -> usize {
        3
    }
}

struct Harness {
    fc: FlowController,
    detector: Arc<SteeredDetector>,
    metrics: Arc<MetricsRegistry>,
    datastore: Arc<Datastore>,
    dispatcher: JoinHandle<()>,
}

const EP_A: &str = "10.0.0.1:8000";
const EP_B: &str = "10.0.0.2:8000";

impl Harness {
    fn new(config: FlowControlConfig) -> Self {
        let detector = Arc::new(SteeredDetector::default());
        let metrics = MetricsRegistry::new("pool");
        let datastore = Arc::new(Datastore::new("pool"));
        datastore.set_endpoints(vec![
            Endpoint::new("a", EP_A.parse().unwrap()),
            Endpoint::new("b", EP_B.parse().unwrap()),
        ]);
        let fc = FlowController::new(
            &config,
            FlowControllerParts {
                detector: detector.clone(),
                detector_name: "steered".into(),
                datastore: datastore.clone(),
                metrics: FlowControlMetrics::register(&metrics),
                subset_match: SubsetMatch::Exact,
            },
        );
        let dispatcher = fc.spawn_dispatcher();
        Self { fc, detector, metrics, datastore, dispatcher }
    }

    /// Lets `n` more requests be dispatched (while the earlier tickets are held) and wakes the dispatcher.
    fn allow(&self, n: u64) {
        self.detector.limit.store(n, Ordering::SeqCst);
        self.fc.waker().wake();
    }

    fn request(
        &self,
        fairness: &'static str,
        priority: i32,
    ) -> JoinHandle<Result<DispatchTicket, FlowError>> {
        self.request_with(fairness, priority, SubsetHint::Absent, None)
    }

    fn request_with(
        &self,
        fairness: &'static str,
        priority: i32,
        subset: SubsetHint,
        slo_ttft: Option<Duration>,
    ) -> JoinHandle<Result<DispatchTicket, FlowError>> {
        let fc = self.fc.clone();
        tokio::spawn(async move {
            let labels =
                RequestLabels { model_name: "m", target_model_name: "m", priority, fairness_id: fairness };
            let req = FlowRequest {
                labels,
                byte_size: 100,
                tokens: 7,
                subset: &subset,
                received_at: Instant::now(),
                slo_ttft,
            };
            fc.enqueue_and_wait(req).await
        })
    }

    async fn wait_queued(&self, n: u64) {
        wait_for(|| self.fc.queued().0 == n).await;
    }

    fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        sample(&self.metrics.encode(), name, labels)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.dispatcher.abort();
    }
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached within 10s");
}

/// The value of the one sample of `name` whose labels include all of `labels`.
pub(super) fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, rest) = series.split_once('{').unwrap_or((series, ""));
        (series_name == name && wanted.iter().all(|w| rest.contains(w.as_str())))
            .then(|| value.parse().ok())?
    })
}

impl Harness {
    fn cycles(&self) -> f64 {
        self.sample("llm_d_epp_flow_control_dispatch_cycle_duration_seconds_count", &[]).unwrap_or(0.0)
    }

    /// Waits until at least one more dispatch cycle that saw queued work has completed.
    async fn another_cycle(&self) {
        let before = self.cycles();
        self.fc.waker().wake();
        wait_for(|| self.cycles() > before).await;
    }
}

#[tokio::test]
async fn dispatches_when_there_is_room_and_counts_pending_until_the_ticket_drops() {
    let h = Harness::new(FlowControlConfig::default());
    h.allow(1);
    let ticket = h.request("t", 0).await.unwrap().expect("dispatched");
    assert_eq!(h.fc.pending(), PendingLoad { requests: 1, tokens: 7 });
    assert_eq!(h.fc.queued(), (0, 0));
    let queued = h.request("t", 0);
    h.wait_queued(1).await;
    assert!(!queued.is_finished(), "the pending request fills the only slot");
    drop(ticket);
    let second = queued.await.unwrap().expect("dispatched once the first ticket is dropped");
    assert_eq!(h.fc.pending().requests, 1);
    drop(second);
    assert_eq!(h.fc.pending(), PendingLoad::default());
    let size = [("fairness_id", "t"), ("priority", "0"), ("inference_pool", "pool"), ("model_name", "m")];
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_size", &size), Some(0.0));
    assert_eq!(h.sample("inference_extension_flow_control_queue_bytes", &size), Some(0.0));
    let dispatched = [("outcome", "Dispatched"), ("priority", "0"), ("inference_pool", "pool")];
    assert_eq!(h.sample("llm_d_epp_flow_control_requests_total", &dispatched), Some(2.0));
    let duration = [("outcome", "Dispatched"), ("fairness_id", "t"), ("target_model_name", "m")];
    assert_eq!(h.sample("llm_d_epp_flow_control_request_queue_duration_seconds_count", &duration), Some(2.0));
    let enqueue = [("outcome", "NotYetFinalized"), ("fairness_id", "t")];
    assert_eq!(
        h.sample("inference_extension_flow_control_request_enqueue_duration_seconds_count", &enqueue),
        Some(2.0)
    );
    assert!(h.sample("llm_d_epp_flow_control_dispatch_cycle_duration_seconds_count", &[]).unwrap() >= 1.0);
    assert_eq!(h.sample("llm_d_epp_flow_control_stale_endpoints", &[("detector", "steered")]), Some(3.0));
}

/// A P/D pool: the prefill pod is full and the decode pod idle, so the effective saturation (which gates)
/// is the prefill stage's, and the gauge reports each stage.
#[tokio::test]
async fn a_full_prefill_stage_holds_requests_and_each_stage_has_its_gauge() {
    let h = Harness::new(FlowControlConfig::default());
    let role = |r: &str| [("llm-d.ai/role".to_string(), r.to_string())].into_iter().collect();
    h.datastore.set_endpoints(vec![
        Endpoint::new("p", EP_A.parse().unwrap()).with_labels(role("prefill")),
        Endpoint::new("d", EP_B.parse().unwrap()).with_labels(role("decode")),
    ]);
    h.detector.hot.lock().unwrap().push(EP_A.parse().unwrap());
    h.allow(5);
    let queued = h.request("f", 0);
    h.wait_queued(1).await;
    let stage = |s| [("inference_pool", "pool"), ("stage", s)];
    wait_for(|| h.sample("llm_d_epp_flow_control_pool_saturation", &stage("effective")) == Some(2.0)).await;
    assert_eq!(h.sample("llm_d_epp_flow_control_pool_saturation", &stage("prefill")), Some(2.0));
    assert_eq!(h.sample("llm_d_epp_flow_control_pool_saturation", &stage("decode")), Some(0.0));
    h.detector.hot.lock().unwrap().clear();
    h.fc.waker().wake();
    assert!(queued.await.unwrap().is_ok(), "dispatched once the prefill stage has room");
}

#[tokio::test]
async fn pool_saturation_gauges_follow_the_detector_and_an_empty_pool_reads_one() {
    let h = Harness::new(FlowControlConfig::default());
    h.allow(5);
    let effective = [("inference_pool", "pool"), ("stage", "effective")];
    wait_for(|| h.sample("llm_d_epp_flow_control_pool_saturation", &effective) == Some(0.0)).await;
    h.datastore.set_endpoints(vec![]);
    wait_for(|| h.sample("llm_d_epp_flow_control_pool_saturation", &effective) == Some(1.0)).await;
    let decode = [("inference_pool", "pool"), ("stage", "decode")];
    assert_eq!(h.sample("llm_d_epp_flow_control_pool_saturation", &decode), Some(1.0));
    assert_eq!(
        h.sample("inference_extension_flow_control_pool_saturation", &[("inference_pool", "pool")]),
        Some(1.0)
    );
}

#[tokio::test]
async fn capacity_limits_reject_with_429_and_leave_the_gauges_alone() {
    let config = FlowControlConfig { max_requests: 1, ..Default::default() };
    let h = Harness::new(config);
    let first = h.request("t", 0);
    h.wait_queued(1).await;
    let err = h.request("t", 0).await.unwrap().unwrap_err();
    assert_eq!(err.outcome(), Outcome::RejectedCapacity);
    assert_eq!(crate::error::RequestError::from(err).code.http_status(), 429);
    let size = [("fairness_id", "t"), ("priority", "0")];
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_size", &size), Some(1.0));
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_bytes", &size), Some(100.0));
    let rejected = [("outcome", "RejectedCapacity"), ("priority", "0")];
    assert_eq!(h.sample("llm_d_epp_flow_control_requests_total", &rejected), Some(1.0));
    let enqueue = [("outcome", "RejectedCapacity")];
    assert_eq!(
        h.sample("llm_d_epp_flow_control_request_enqueue_duration_seconds_count", &enqueue),
        Some(1.0)
    );
    h.allow(1);
    first.await.unwrap().expect("the queued request still dispatches");
}

#[tokio::test]
async fn band_limits_apply_per_priority() {
    let mut config = FlowControlConfig::default();
    config.priority_bands.insert(1, PriorityBand { max_bytes: 150, ..Default::default() });
    let h = Harness::new(config);
    let _a = h.request("t", 1);
    h.wait_queued(1).await;
    let err = h.request("t", 1).await.unwrap().unwrap_err();
    assert!(err.to_string().contains("priority band 1 byte limit"), "{err}");
    let _other_band = h.request("t", 0);
    h.wait_queued(2).await;
}

#[tokio::test]
async fn ttl_expiry_evicts_with_503_and_restores_the_gauges() {
    let config =
        FlowControlConfig { default_request_ttl: Some(Duration::from_millis(30)), ..Default::default() };
    let h = Harness::new(config);
    let err = h.request("t", 0).await.unwrap().unwrap_err();
    assert_eq!(err, FlowError::EvictedTtl);
    let e = crate::error::RequestError::from(err);
    assert_eq!((e.code.http_status(), e.message.as_str()), (503, "request timed out in queue"));
    assert_eq!(h.fc.queued(), (0, 0));
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_size", &[("fairness_id", "t")]), Some(0.0));
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_bytes", &[("fairness_id", "t")]), Some(0.0));
    let ttl = [("outcome", "EvictedTTL"), ("priority", "0")];
    assert_eq!(h.sample("llm_d_epp_flow_control_requests_total", &ttl), Some(1.0));
}

#[tokio::test]
async fn dropping_the_waiting_future_removes_the_request_at_once() {
    let h = Harness::new(FlowControlConfig::default());
    let waiting = h.request("t", -3);
    h.wait_queued(1).await;
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_size", &[("priority", "-3")]), Some(1.0));
    waiting.abort();
    let _ = waiting.await;
    assert_eq!(h.fc.queued(), (0, 0), "removed by the guard, before any dispatch cycle");
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_size", &[("priority", "-3")]), Some(0.0));
    assert_eq!(h.sample("inference_extension_flow_control_queue_bytes", &[("priority", "-3")]), Some(0.0));
    let cancelled = [("outcome", "EvictedContextCancelled"), ("priority", "-3")];
    assert_eq!(h.sample("llm_d_epp_flow_control_requests_total", &cancelled), Some(1.0));
    h.allow(1);
    let next = h.request("t", 0).await.unwrap().expect("the slot is free");
    assert_eq!(h.fc.pending().requests, 1, "the cancelled request left no pending load");
    drop(next);
}

#[tokio::test]
async fn higher_priority_dispatches_first_and_negative_priorities_queue() {
    let h = Harness::new(FlowControlConfig::default());
    let low = h.request("t", -1);
    h.wait_queued(1).await;
    let high = h.request("t", 5);
    h.wait_queued(2).await;
    h.allow(1);
    wait_for(|| high.is_finished()).await;
    assert_eq!(h.fc.queued().0, 1);
    assert!(!low.is_finished());
    let _high = high.await.unwrap().unwrap();
    h.allow(2);
    let _low = low.await.unwrap().expect("low dispatches after high");
}

#[tokio::test]
async fn round_robin_alternates_flows_and_global_strict_does_not() {
    for (fairness, expected) in
        [(FairnessPolicy::RoundRobin, ["a1", "b1", "a2"]), (FairnessPolicy::GlobalStrict, ["a1", "a2", "b1"])]
    {
        let mut config = FlowControlConfig::default();
        config.default_priority_band.fairness = fairness;
        let h = Harness::new(config);
        let mut handles = vec![("a1", h.request("a", 0))];
        h.wait_queued(1).await;
        handles.push(("a2", h.request("a", 0)));
        h.wait_queued(2).await;
        handles.push(("b1", h.request("b", 0)));
        h.wait_queued(3).await;
        let mut order = Vec::new();
        let mut tickets = Vec::new();
        for allowed in 1..=3u64 {
            h.allow(allowed);
            wait_for(|| handles.iter().any(|(_, j)| j.is_finished())).await;
            assert_eq!(h.fc.queued().0, 3 - allowed, "exactly one more dispatched");
            let i = handles.iter().position(|(_, j)| j.is_finished()).expect("one finished");
            let (name, handle) = handles.remove(i);
            tickets.push(handle.await.unwrap().unwrap());
            order.push(name);
        }
        assert_eq!(order, expected, "{fairness:?}");
    }
}

#[tokio::test]
async fn slo_deadline_orders_by_the_ttft_objective() {
    let mut config = FlowControlConfig::default();
    config.default_priority_band.ordering = OrderingPolicy::SloDeadline;
    let h = Harness::new(config);
    let relaxed = h.request_with("t", 0, SubsetHint::Absent, Some(Duration::from_secs(60)));
    h.wait_queued(1).await;
    let urgent = h.request_with("t", 0, SubsetHint::Absent, Some(Duration::from_millis(10)));
    h.wait_queued(2).await;
    h.allow(1);
    wait_for(|| urgent.is_finished()).await;
    assert_eq!(h.fc.queued().0, 1);
    assert!(!relaxed.is_finished());
}

#[tokio::test]
async fn dispatch_gates_on_the_requests_own_subset() {
    let h = Harness::new(FlowControlConfig::default());
    h.detector.hot.lock().unwrap().push(EP_A.parse().unwrap());
    h.allow(10);
    // The whole pool contains the hot endpoint; a request pinned to B does not.
    let pinned = h.request_with("t", 0, SubsetHint::parse([EP_B]).unwrap(), None);
    let _pinned = pinned.await.unwrap().expect("its own candidates have room");
    let unpinned = h.request("t", 0);
    h.wait_queued(1).await;
    // Head of line: the blocked request stops a later one that would fit.
    let behind = h.request_with("t", 0, SubsetHint::parse([EP_B]).unwrap(), None);
    h.wait_queued(2).await;
    h.another_cycle().await;
    assert_eq!(h.fc.queued().0, 2, "both still queued after a full cycle");
    h.detector.hot.lock().unwrap().clear();
    h.fc.waker().wake();
    unpinned.await.unwrap().unwrap();
    behind.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_empty_pool_holds_requests_until_an_endpoint_appears() {
    let h = Harness::new(FlowControlConfig::default());
    h.datastore.set_endpoints(vec![]);
    h.allow(10);
    let waiting = h.request("t", 0);
    h.wait_queued(1).await;
    assert!(!waiting.is_finished());
    h.datastore.set_endpoints(vec![Endpoint::new("a", EP_A.parse().unwrap())]);
    waiting.await.unwrap().expect("dispatched on the endpoint change");
}

#[tokio::test]
async fn close_fails_queued_requests_and_rejects_new_ones() {
    let h = Harness::new(FlowControlConfig::default());
    let waiting = h.request("t", 0);
    h.wait_queued(1).await;
    h.fc.close();
    assert_eq!(waiting.await.unwrap().unwrap_err().outcome(), Outcome::EvictedOther);
    assert_eq!(h.request("t", 0).await.unwrap().unwrap_err().outcome(), Outcome::RejectedOther);
    assert_eq!(h.sample("llm_d_epp_flow_control_queue_size", &[("fairness_id", "t")]), Some(0.0));
}

#[test]
fn only_legacy_admission_has_a_shedding_detector() {
    let detector: Arc<dyn SaturationDetector> = Arc::new(SteeredDetector::default());
    assert!(Admission::legacy(Some(detector)).shedding_detector().is_some());
    assert!(Admission::legacy(None).shedding_detector().is_none());
    assert!(Admission::default().shedding_detector().is_none());
}
