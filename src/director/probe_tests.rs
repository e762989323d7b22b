//! The route probe over real configured pipelines: what the trace says about filters, scores and the
//! pick; that the pick is `decide`'s for the same seed; that bad requests get `prepare`'s 400s; and that
//! probing books nothing.

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::*;
use crate::config;
use crate::datastore::{Datastore, Endpoint, EndpointTelemetry};
use crate::director::{decide, Director, DirectorMetrics, DirectorOptions};
use crate::error::ErrorCode;
use crate::flowcontrol::Admission;
use crate::metrics::MetricsRegistry;
use crate::scheduling::profile::ProfileTrace;
use crate::scheduling::{FactoryContext, PluginId, PluginMetrics, Registry, ScoredCandidate};
use crate::wire::TEST_SELECTION_HEADER;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"where do I go?"}]}"#;

/// Scores by queue and KV cache; `picker` picks. Three endpoints: a busy, b idle, c in between.
fn config(filter: Option<&str>, picker: &str) -> String {
    let (plugin, step) = match filter {
        Some(f) => (format!("- type: {f}\n"), format!("  - pluginRef: {f}\n")),
        None => (String::new(), String::new()),
    };
    format!(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n{plugin}\
         - type: queue-scorer\n- type: kv-cache-utilization-scorer\n- type: inflight-load-producer\n\
         - type: {picker}\nschedulingProfiles:\n- name: default\n  plugins:\n{step}\
         \x20 - pluginRef: queue-scorer\n    weight: 2\n  - pluginRef: kv-cache-utilization-scorer\n\
         \x20   weight: 1\n  - pluginRef: {picker}\n"
    )
}

fn director(yaml: &str) -> Director {
    let datastore = Arc::new(Datastore::new("test"));
    let registry = MetricsRegistry::new("test");
    let ctx = FactoryContext::new(datastore.clone(), PluginMetrics::register(&registry));
    let loaded = config::load(yaml, &Registry::with_builtins(), &ctx).expect("config loads");
    datastore.set_endpoints(
        ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
            .iter()
            .zip(["a", "b", "c"])
            .map(|(addr, name)| Endpoint::new(name, addr.parse().expect("address")))
            .collect(),
    );
    for (ep, (waiting, kv)) in datastore.endpoints().iter().zip([(9, 0.9), (0, 0.1), (3, 0.5)]) {
        ep.update_telemetry(EndpointTelemetry {
            waiting_queue_size: waiting,
            kv_cache_usage: kv,
            update_time: Some(Instant::now()),
            ..Default::default()
        });
    }
    let options = DirectorOptions { parse_bodies: true, ..Default::default() };
    let metrics = DirectorMetrics::register(&registry);
    let pipeline = Arc::new(loaded.pipeline);
    Director::new(datastore, pipeline, Admission::default(), metrics, Arc::new(NoopObserver), options)
}

fn probe_request(headers: &[(&str, &str)], body: &str) -> ProbeRequest {
    ProbeRequest {
        path: CHAT.into(),
        headers: headers.iter().copied().collect(),
        body: body.as_bytes().to_vec(),
        seed: Some(1),
    }
}

#[tokio::test]
async fn the_explanation_names_the_filter_each_scorer_and_the_pick() {
    let d = director(&config(Some("header-based-testing-filter"), "max-score-picker"));
    let probe = RouteProbe::new(&d);
    let selection = [(TEST_SELECTION_HEADER, "10.0.0.1:8000,10.0.0.3:8000")];
    let answer = probe.explain(probe_request(&selection, BODY)).await.expect("explained");

    assert_eq!((answer.model.as_str(), answer.target_model.as_str()), ("m", "m"));
    assert_eq!(answer.candidates.len(), 3);
    assert_eq!(answer.candidates[1].waiting_queue_size, 0);
    let profile = &answer.profiles[0];
    assert_eq!(profile.name, "default");
    // b (the idle one) was not selected by the header: the filter removed it, so it has no scores.
    let b = &profile.candidates[1];
    assert_eq!(b.removed_by.as_deref(), Some("header-based-testing-filter"));
    assert!(b.scores.is_empty() && b.total.is_none());
    // a and c were scored by both scorers, weights applied; c (less loaded) wins.
    let (a, c) = (&profile.candidates[0], &profile.candidates[2]);
    for x in [a, c] {
        assert_eq!(x.removed_by, None);
        let scorers: Vec<_> = x.scores.iter().map(|s| (s.scorer.as_str(), s.weight)).collect();
        assert_eq!(scorers, [("queue-scorer", 2.0), ("kv-cache-utilization-scorer", 1.0)]);
        let sum: f64 = x.scores.iter().map(|s| s.weighted).sum();
        assert!((x.total.expect("a total") - sum).abs() < 1e-9);
    }
    assert!(c.total > a.total);
    assert_eq!(profile.picked, ["10.0.0.3:8000"]);
    let pick = answer.pick.expect("a pick");
    assert_eq!((pick.endpoint.as_str(), pick.address.as_str()), ("c", "10.0.0.3:8000"));
    assert!(answer.refusal.is_none() && !answer.shed);
    assert_eq!(answer.primary_profile.as_deref(), Some("default"));
}

#[tokio::test]
async fn a_request_nothing_can_serve_is_refused_but_still_explained() {
    let d = director(&config(Some("header-based-testing-filter"), "max-score-picker"));
    // A blank selection keeps nothing (GIE's behaviour): the ext_proc path answers 429.
    let answer = RouteProbe::new(&d).explain(probe_request(&[], BODY)).await.expect("explained");
    assert!(answer.pick.is_none());
    let refusal = answer.refusal.expect("refused");
    assert_eq!(refusal.status, 429);
    assert!(refusal.reason.contains("header-based-testing-filter"), "{}", refusal.reason);
    let profile = &answer.profiles[0];
    assert!(profile
        .candidates
        .iter()
        .all(|c| c.removed_by.as_deref() == Some("header-based-testing-filter")));
    assert!(profile.picked.is_empty());
}

#[tokio::test]
async fn the_pick_is_decides_primary_for_the_same_seed_and_snapshot() {
    let d = director(&config(None, "random-picker"));
    let mut picked = std::collections::HashSet::new();
    for seed in 0..48u64 {
        let req = IncomingRequest {
            request_id: format!("r{seed}"),
            path: CHAT.into(),
            body: BODY.as_bytes().to_vec(),
            ..Default::default()
        };
        let prepared = d.prepare(&req, &mut SmallRng::seed_from_u64(seed)).expect("prepared");
        let sreq = prepared.scheduling_request(&req, Instant::now());
        // The probe first: it books nothing, so decide then sees the same state.
        let mut candidates = d.candidates(&req).expect("candidates");
        let explained =
            explain(&d.pipeline, None, &sreq, &mut candidates, &mut SmallRng::seed_from_u64(seed));
        let mut candidates = d.candidates(&req).expect("candidates");
        let mut rng = SmallRng::seed_from_u64(seed);
        let decided = decide(&d.pipeline, None, &sreq, &mut candidates, &mut rng, &NoopObserver, &mut |_| {})
            .expect("decided");
        let probe_pick = explained.pick().expect("a pick");
        assert!(Arc::ptr_eq(probe_pick, decided.primary()), "seed {seed}");
        picked.insert(probe_pick.host_port.clone());
    }
    // A random picker over three endpoints: the comparison covered more than one outcome.
    assert!(picked.len() > 1, "{picked:?}");
}

#[tokio::test]
async fn probing_books_nothing_and_sees_what_decide_booked() {
    let d = director(&config(None, "max-score-picker"));
    let probe = RouteProbe::new(&d);
    async fn inflight(probe: &RouteProbe) -> Vec<i64> {
        let answer = probe.explain(probe_request(&[], BODY)).await.expect("explained");
        answer.candidates.iter().map(|c| c.inflight_requests).collect()
    }
    for _ in 0..5 {
        assert_eq!(inflight(&probe).await, [0, 0, 0]);
    }
    // One real decision: its pre-request hooks count it in flight on b, and the probe sees that.
    let req = IncomingRequest {
        request_id: "real".into(),
        path: CHAT.into(),
        body: BODY.into(),
        ..Default::default()
    };
    let prepared = d.prepare(&req, &mut SmallRng::seed_from_u64(0)).expect("prepared");
    let sreq = prepared.scheduling_request(&req, Instant::now());
    let mut candidates = d.candidates(&req).expect("candidates");
    let mut rng = SmallRng::seed_from_u64(0);
    let decided = decide(&d.pipeline, None, &sreq, &mut candidates, &mut rng, &NoopObserver, &mut |_| {});
    assert_eq!(decided.expect("decided").primary().name, "b");
    assert_eq!(inflight(&probe).await, [0, 1, 0]);
}

#[tokio::test]
async fn bad_bodies_and_slo_headers_get_prepares_400() {
    let d = director(&config(None, "max-score-picker"));
    let probe = RouteProbe::new(&d);
    let cases: [(&[(&str, &str)], &str); 3] =
        [(&[], "{not json"), (&[("x-slo-ttft-ms", "soon")], BODY), (&[], "")];
    for (headers, body) in cases {
        let err = probe.explain(probe_request(headers, body)).await.expect_err("rejected");
        let req = incoming(probe_request(headers, body));
        let (expected, _) = d.prepare(&req, &mut SmallRng::seed_from_u64(1)).expect_err("prepare rejects");
        assert_eq!(err.code, ErrorCode::BadRequest);
        assert_eq!(err, expected);
    }
    let subset = [(crate::wire::SUBSET_KEY, "10.0.0.2:8000,pod-a")];
    let err = probe.explain(probe_request(&subset, BODY)).await.expect_err("malformed subset");
    assert!(err.message.contains("pod-a") && err.code == ErrorCode::BadRequest, "{err}");
}

#[tokio::test]
async fn a_subset_header_narrows_the_candidates() {
    let d = director(&config(None, "max-score-picker"));
    let subset = [(crate::wire::SUBSET_KEY, "10.0.0.1:8000, 10.0.0.3:8000")];
    let answer = RouteProbe::new(&d).explain(probe_request(&subset, BODY)).await.expect("explained");
    let addresses: Vec<_> = answer.candidates.iter().map(|c| c.address.as_str()).collect();
    assert_eq!(addresses, ["10.0.0.1:8000", "10.0.0.3:8000"]);
    assert_eq!(answer.pick.map(|p| p.endpoint).as_deref(), Some("c"));
}

#[tokio::test]
async fn the_trace_forgets_a_removal_a_later_filter_restores() {
    let candidates: Vec<_> =
        (1..=3).map(crate::scheduling::plugins::testing::endpoint).map(Candidate::new).collect();
    let id = |name: &str| PluginId { type_name: "test", name: name.into() };
    let mut trace = ProfileExplain::default();
    trace.started("p", &candidates);
    trace.filtered(&id("drop-first"), &[1, 2]);
    trace.filtered(&id("drop-all"), &[]);
    // A filter failing open restores the list it was given: what it restored was not removed.
    trace.filtered(&id("fail-open"), &[1, 2]);
    trace.picked(&id("picker"), &[ScoredCandidate { index: 2, score: 0.5 }], &[2]);
    let profile = &trace.profiles[0];
    let removed: Vec<_> = profile.candidates.iter().map(|c| c.removed_by.as_deref()).collect();
    assert_eq!(removed, [Some("drop-first"), None, None]);
    assert_eq!(profile.candidates[2].total, Some(0.5));
    assert_eq!(profile.picked, ["10.0.0.3:8000"]);
}
