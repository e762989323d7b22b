//! The director's steps one at a time: `prepare` (400s, rewrite, labels), `decide` (shedding, filtering,
//! the dispatch record), `finish` (the answer), and `route` over all of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::*;
use crate::config;
use crate::datastore::{Endpoint, EndpointTelemetry};
use crate::error::ErrorCode;
use crate::scheduling::{
    Candidate, FactoryContext, NoopObserver, PendingLoad, PluginMetrics, Registry, SaturationDetector,
    SchedulingRequest,
};

const CHAT: &str = "/v1/chat/completions";

/// Saturated while `full` is set.
#[derive(Default)]
struct Switch {
    full: AtomicBool,
}

impl SaturationDetector for Switch {
    fn saturation(&self, _candidates: &[Candidate], _now: Instant) -> f64 {
        if self.full.load(Ordering::SeqCst) {
            1.0
        } else {
            0.0
        }
    }

    fn saturation_with_pending(&self, c: &[Candidate], now: Instant, _pending: PendingLoad) -> f64 {
        self.saturation(c, now)
    }
}

/// A director over `endpoints` with `yaml` (epp's default config when `None`), and the registry its
/// request and plugin metrics record in, and its datastore.
pub(super) fn director_over(
    yaml: Option<&str>,
    endpoints: Vec<Endpoint>,
    options: DirectorOptions,
) -> (Director, Arc<MetricsRegistry>, Arc<Datastore>) {
    let datastore = Arc::new(Datastore::new("test"));
    let registry = MetricsRegistry::new("test");
    let metrics = DirectorMetrics::register(&registry);
    let ctx = FactoryContext::new(datastore.clone(), PluginMetrics::register(&registry));
    let plugins = Registry::with_builtins();
    let loaded = match yaml {
        Some(yaml) => config::load(yaml, &plugins, &ctx),
        None => config::load_default(&plugins, &ctx),
    }
    .expect("config loads");
    datastore.set_endpoints(endpoints);
    let pipeline = Arc::new(loaded.pipeline);
    let d = Director::new(
        datastore.clone(),
        pipeline,
        Admission::default(),
        metrics,
        Arc::new(NoopObserver),
        options,
    );
    (d, registry, datastore)
}

fn director_with(yaml: Option<&str>, options: DirectorOptions) -> Director {
    let endpoints = vec![
        Endpoint::new("a", "10.0.0.1:8000".parse().unwrap()),
        Endpoint::new("b", "10.0.0.2:8000".parse().unwrap()),
    ];
    let (director, _, datastore) = director_over(yaml, endpoints, options);
    for (i, ep) in datastore.endpoints().iter().enumerate() {
        ep.update_telemetry(EndpointTelemetry {
            // Endpoint b is idle, a is busy: the default profile picks b.
            waiting_queue_size: if i == 0 { 9 } else { 0 },
            update_time: Some(Instant::now()),
            ..Default::default()
        });
    }
    director
}

fn director() -> Director {
    director_with(None, DirectorOptions { parse_bodies: true, ..Default::default() })
}

fn request(body: &str, headers: &[(&str, &str)]) -> IncomingRequest {
    IncomingRequest {
        request_id: "r1".into(),
        headers: headers.iter().copied().collect(),
        path: CHAT.into(),
        body: body.as_bytes().to_vec(),
        ..Default::default()
    }
}

const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#;

fn rng() -> SmallRng {
    SmallRng::seed_from_u64(7)
}

fn scheduling_request<'a>(req: &'a IncomingRequest, prepared: &'a Prepared) -> SchedulingRequest<'a> {
    prepared.scheduling_request(req, Instant::now())
}

#[test]
fn prepare_reads_labels_rewrite_and_tokens() {
    let mut options = DirectorOptions { parse_bodies: true, ..Default::default() };
    let policies = crate::request::Policies {
        objectives: std::collections::HashMap::from([("batch".into(), -1)]),
        ..Default::default()
    };
    options.policies = std::sync::Arc::new(crate::request::PolicyStore::new(policies));
    let d = director_with(None, options);
    let req = request(
        BODY,
        &[("x-gateway-inference-objective", "batch"), ("x-gateway-model-name-rewrite", "m-v2")],
    );
    let p = d.prepare(&req, &mut rng()).expect("prepared");
    assert_eq!((p.incoming_model(), p.target_model()), ("m", "m-v2"));
    assert_eq!(p.labels.priority, -1);
    assert_eq!(p.labels.fairness_id, crate::wire::DEFAULT_FAIRNESS_ID);
    assert!(p.input_tokens > 0 && p.estimated_tokens >= p.input_tokens);
    assert_eq!(p.parsed.as_ref().map(|p| p.model.as_str()), Some("m"));
}

#[test]
fn prepare_rejects_a_bad_body_and_a_malformed_subset_with_400() {
    let d = director();
    let (err, labels) = d
        .prepare(&request("{not json", &[("x-gateway-inference-fairness-id", "t")]), &mut rng())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert_eq!(labels.fairness_id, "t");
    let mut req = request(BODY, &[]);
    req.invalid_subset = SubsetHint::parse(["pod-a"]).err();
    let (err, _) = d.prepare(&req, &mut rng()).unwrap_err();
    assert_eq!(err.code.http_status(), 400);
    assert!(err.message.contains("\"pod-a\""), "{}", err.message);
    // With --disable-endpoint-subset-filter the hint is ignored, malformed or not.
    let ignoring = director_with(
        None,
        DirectorOptions { parse_bodies: true, subset_match: SubsetMatch::Disabled, ..Default::default() },
    );
    assert!(ignoring.prepare(&req, &mut rng()).is_ok());
}

#[test]
fn prepare_rejects_a_post_without_a_body_but_routes_headers_only_modes() {
    let d = director();
    let mut req = request("", &[(":method", "POST")]);
    (req.header_only, req.no_body) = (true, true);
    let (err, _) = d.prepare(&req, &mut rng()).unwrap_err();
    assert_eq!(err.code.http_status(), 400);
    assert_eq!(err.message, "empty request body: a POST to /v1/chat/completions needs a JSON body");
    // `request_body_mode: NONE`: the body exists, Envoy just does not send it.
    req.no_body = false;
    assert!(d.prepare(&req, &mut rng()).is_ok());
    let mut cancel = request("", &[(":method", "POST")]);
    (cancel.header_only, cancel.no_body, cancel.path) = (true, true, "/v1/responses/r1/cancel".into());
    assert!(d.prepare(&cancel, &mut rng()).is_ok(), "an empty POST outside the inference APIs is routed");
    let mut get = request("", &[(":method", "GET")]);
    (get.header_only, get.no_body) = (true, true);
    assert!(d.prepare(&get, &mut rng()).is_ok());
}

#[test]
fn the_client_rewrite_header_can_be_ignored() {
    let rewrite = [("x-gateway-model-name-rewrite", "other")];
    let honouring = director();
    assert_eq!(honouring.prepare(&request(BODY, &rewrite), &mut rng()).unwrap().target_model(), "other");
    let ignoring = director_with(
        None,
        DirectorOptions { parse_bodies: true, ignore_model_rewrite_header: true, ..Default::default() },
    );
    assert_eq!(ignoring.prepare(&request(BODY, &rewrite), &mut rng()).unwrap().target_model(), "m");
}

#[test]
fn prepare_skips_parsing_for_header_only_requests() {
    let d = director();
    let mut req = request("", &[]);
    req.header_only = true;
    let p = d.prepare(&req, &mut rng()).expect("prepared");
    assert!(p.parsed.is_none());
    assert_eq!(p.incoming_model(), "");
}

#[test]
fn decide_picks_the_idle_endpoint_and_records_the_dispatch() {
    let d = director();
    let req = request(BODY, &[]);
    let prepared = d.prepare(&req, &mut rng()).unwrap();
    let sreq = scheduling_request(&req, &prepared);
    let mut candidates = d.candidates(&req).unwrap();
    let mut picked = Vec::new();
    let mut scheduled = |p: Option<&Arc<Endpoint>>| picked.push(p.map(|e| e.name.clone()));
    let decision =
        decide(d.pipeline(), None, &sreq, &mut candidates, &mut rng(), &NoopObserver, &mut scheduled)
            .unwrap();
    assert_eq!(decision.primary().name, "b");
    assert_eq!(picked, vec![Some("b".to_string())], "told of the pick once, before the pre-request hooks");
    assert_eq!(decision.dispatch.request_id, "r1");
    assert_eq!(decision.dispatch.dispatched_at, sreq.now);
    assert_eq!(decision.dispatch.estimated_tokens, prepared.estimated_tokens);
}

#[test]
fn decide_sheds_only_sheddable_requests_while_saturated() {
    let d = director();
    let detector = Switch::default();
    let req = request(BODY, &[]);
    let prepared = d.prepare(&req, &mut rng()).unwrap();
    let mut sreq = scheduling_request(&req, &prepared);
    sreq.priority = -1;
    let mut candidates = d.candidates(&req).unwrap();
    detector.full.store(true, Ordering::SeqCst);
    let refusal =
        decide(d.pipeline(), Some(&detector), &sreq, &mut candidates, &mut rng(), &NoopObserver, &mut |_| {})
            .unwrap_err();
    assert_eq!(refusal, Refusal::Shed);
    let err = refusal.into_request_error();
    assert_eq!(
        (err.code.http_status(), err.message.as_str()),
        (429, "system saturated, sheddable request dropped")
    );
    sreq.priority = 0;
    assert!(decide(
        d.pipeline(),
        Some(&detector),
        &sreq,
        &mut candidates,
        &mut rng(),
        &NoopObserver,
        &mut |_| {}
    )
    .is_ok());
    sreq.priority = -1;
    detector.full.store(false, Ordering::SeqCst);
    assert!(decide(
        d.pipeline(),
        Some(&detector),
        &sreq,
        &mut candidates,
        &mut rng(),
        &NoopObserver,
        &mut |_| {}
    )
    .is_ok());
    detector.full.store(true, Ordering::SeqCst);
    assert!(
        decide(d.pipeline(), None, &sreq, &mut candidates, &mut rng(), &NoopObserver, &mut |_| {}).is_ok()
    );
}

#[test]
fn decide_refuses_with_429_when_every_endpoint_is_filtered() {
    let yaml = r#"
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-based-testing-filter
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: header-based-testing-filter
  - pluginRef: max-score-picker
"#;
    let d = director_with(Some(yaml), DirectorOptions { parse_bodies: true, ..Default::default() });
    let req = request(BODY, &[("test-epp-endpoint-selection", "10.9.9.9:8000")]);
    let prepared = d.prepare(&req, &mut rng()).unwrap();
    let sreq = scheduling_request(&req, &prepared);
    let mut candidates = d.candidates(&req).unwrap();
    let mut failed = 0;
    let refusal = decide(d.pipeline(), None, &sreq, &mut candidates, &mut rng(), &NoopObserver, &mut |p| {
        failed += usize::from(p.is_none());
    })
    .unwrap_err();
    assert_eq!(failed, 1, "a failed scheduling cycle is reported (a failed scheduler attempt)");
    assert!(matches!(refusal, Refusal::NoEndpoint(_)), "{refusal:?}");
    assert_eq!(refusal.into_request_error().code.http_status(), 429);
}

/// The director's steps for `req` without flow control: prepare, locate, decide, finish.
fn route_synchronously(d: &Director, req: &IncomingRequest) -> Routed {
    let prepared = d.prepare(req, &mut rng()).unwrap();
    let sreq = scheduling_request(req, &prepared);
    let mut candidates = d.candidates(req).unwrap();
    let decision =
        decide(d.pipeline(), None, &sreq, &mut candidates, &mut rng(), &NoopObserver, &mut |_| {}).unwrap();
    d.finish(req, prepared, decision, &candidates, None, Instant::now())
}

#[test]
fn finish_builds_the_answer_and_splices_a_rewritten_model() {
    let d = director();
    let mut req = request(
        BODY,
        &[
            ("x-gateway-model-name-rewrite", "m-v2"),
            ("x-gateway-destination-endpoint-subset", "x"),
            ("x-gateway-destination-endpoint-fallback", "6.6.6.6:80"),
        ],
    );
    req.generated_id = true;
    let routed = route_synchronously(&d, &req);
    let body = routed.new_body.as_deref().expect("rewritten body");
    assert_eq!(std::str::from_utf8(body).unwrap(), BODY.replace("\"m\"", "\"m-v2\""));
    assert_eq!(routed.mutation.destination, "10.0.0.2:8000");
    assert_eq!(routed.mutation.content_length, body.len());
    assert_eq!(routed.mutation.set_headers, vec![("x-request-id".to_string(), "r1".to_string())]);
    assert_eq!(
        routed.mutation.remove_headers,
        vec![
            "x-gateway-destination-endpoint-subset".to_string(),
            "x-gateway-destination-endpoint-fallback".to_string()
        ]
    );
    assert_eq!(
        (routed.active.labels.model_name.as_str(), routed.active.labels.target_model_name.as_str()),
        ("m", "m-v2")
    );
    assert_eq!(d.metrics().running_requests(), 1);
    drop(routed);
    assert_eq!(d.metrics().running_requests(), 0, "the active request completes on drop");
}

#[tokio::test]
async fn route_runs_the_steps_and_answers_errors_with_their_labels() {
    let d = director();
    let routed = d.route(&request(BODY, &[])).await.expect("routed");
    assert_eq!(routed.mutation.destination, "10.0.0.2:8000");
    assert!(routed.new_body.is_none(), "an unchanged body is forwarded as received");
    let mut req = request(BODY, &[]);
    req.subset = SubsetHint::parse(["10.7.7.7:8000"]).unwrap();
    let (err, labels) = d.route(&req).await.unwrap_err();
    assert_eq!((err.code.http_status(), labels.model_name.as_str()), (503, "m"));
    assert_eq!(err.dropped, Some(crate::error::DropReason::NoEndpoints), "llm-d's reason on the 503");
}

#[test]
fn emitted_scores_name_every_scored_endpoint_with_its_total() {
    let d =
        director_with(None, DirectorOptions { parse_bodies: true, emit_scores: true, ..Default::default() });
    let req = request(BODY, &[]);
    let routed = route_synchronously(&d, &req);
    let scores: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(routed.mutation.scores.as_deref().expect("scores emitted")).unwrap();
    let total = |ep: &str| scores.get(ep).and_then(serde_json::Value::as_f64).expect("scored");
    assert_eq!(scores.len(), 2, "{scores:?}");
    // b is idle and a is busy (director_with): b scores higher, and b is the destination.
    assert!(total("10.0.0.2:8000") > total("10.0.0.1:8000"), "{scores:?}");
    assert_eq!(routed.mutation.destination, "10.0.0.2:8000");
}

/// A worker keeps its candidates between decisions (`director/candidates.rs`): a later decision on the
/// same thread still sees the telemetry a scrape replaced, and a new pool.
#[tokio::test(flavor = "current_thread")]
async fn kept_candidates_see_new_telemetry_and_a_new_pool() {
    let endpoints = vec![
        Endpoint::new("a", "10.0.0.1:8000".parse().unwrap()),
        Endpoint::new("b", "10.0.0.2:8000".parse().unwrap()),
    ];
    let options = DirectorOptions { parse_bodies: true, ..Default::default() };
    let (d, _, datastore) = director_over(None, endpoints, options);
    let queues = |waiting: [u64; 2]| {
        for (ep, waiting_queue_size) in datastore.endpoints().iter().zip(waiting) {
            ep.update_telemetry(EndpointTelemetry {
                waiting_queue_size,
                update_time: Some(Instant::now()),
                ..Default::default()
            });
        }
    };
    let destination =
        |routed: Result<Routed, Rejection>| routed.expect("routed").mutation.destination.clone();

    queues([9, 0]);
    assert_eq!(destination(d.route(&request(BODY, &[])).await), "10.0.0.2:8000");
    queues([0, 9]);
    assert_eq!(destination(d.route(&request(BODY, &[])).await), "10.0.0.1:8000", "the replaced telemetry");
    datastore.set_endpoints(vec![Endpoint::new("c", "10.0.0.3:8000".parse().unwrap())]);
    assert_eq!(destination(d.route(&request(BODY, &[])).await), "10.0.0.3:8000", "the new pool");
}
