use std::time::Instant;

use serde_json::json;

use super::*;
use crate::scheduling::plugins::testing::*;
use crate::scheduling::CompletionKind;

fn detector(config: ConcurrencyConfig) -> ConcurrencyDetector {
    ConcurrencyDetector::new("det", config).unwrap()
}

fn requests_mode(max: i64, headroom: f64) -> ConcurrencyDetector {
    detector(ConcurrencyConfig { max_concurrency: max, headroom, ..Default::default() })
}

fn tokens_mode(max_tokens: i64, headroom: f64) -> ConcurrencyDetector {
    detector(ConcurrencyConfig {
        mode: ConcurrencyMode::Tokens,
        max_token_concurrency: max_tokens,
        headroom,
        ..Default::default()
    })
}

fn config_of(params: serde_json::Value) -> Result<ConcurrencyConfig, PluginError> {
    let p: Params = parse_params("p", TYPE_NAME, Some(&params))?;
    ConcurrencyConfig::from_params("p", p).map_err(|e| e.for_plugin("p", TYPE_NAME))
}

fn finished() -> Completion {
    Completion { kind: CompletionKind::Finished, status: Some(200), usage: None, now: Instant::now() }
}

fn aborted() -> Completion {
    Completion { kind: CompletionKind::Aborted, status: None, usage: None, now: Instant::now() }
}

/// Dispatches a request of `tokens` estimated tokens to `endpoint`; returns what completion needs.
fn dispatch_to(d: &ConcurrencyDetector, endpoint: &Arc<Endpoint>, tokens: u64) -> DispatchInfo {
    let info = dispatch(endpoint, tokens / 2, tokens);
    let fixture = RequestFixture::empty();
    d.pre_request(&fixture.request(), &result_for(std::slice::from_ref(endpoint)), &info);
    info
}

fn candidates_of(endpoints: &[Arc<Endpoint>]) -> Vec<Candidate> {
    endpoints.iter().map(|e| Candidate::new(e.clone())).collect()
}

fn run_filter(d: &ConcurrencyDetector, candidates: &[Candidate]) -> Vec<usize> {
    let mut kept: Vec<usize> = (0..candidates.len()).collect();
    d.filter(&RequestFixture::empty().request(), candidates, &mut kept);
    kept
}

// ---- parameters ----

#[test]
fn absent_or_empty_parameters_give_the_defaults() {
    let expected = ConcurrencyConfig {
        mode: ConcurrencyMode::Requests,
        max_concurrency: 100,
        max_token_concurrency: 1_000_000,
        headroom: 0.0,
        capacity_label: "epp.io/max-concurrency".into(),
        token_capacity_label: "epp.io/max-token-concurrency".into(),
        endpoint_capacities: HashMap::new(),
    };
    assert_eq!(ConcurrencyConfig::default(), expected);
    assert_eq!(config_of(json!({})).unwrap(), expected);
    let p: Params = parse_params("p", TYPE_NAME, None).unwrap();
    assert_eq!(ConcurrencyConfig::from_params("p", p).unwrap(), expected);
}

#[test]
fn every_parameter_is_read() {
    let c = config_of(json!({
        "concurrencyMode": "tokens",
        "maxConcurrency": 8,
        "maxTokenConcurrency": 5000,
        "headroom": 0.5,
        "capacityLabel": "gpu/slots",
        "tokenCapacityLabel": "",
        "endpointCapacities": [
            {"address": "10.0.0.1:8000", "maxConcurrency": 4},
            {"address": "[fd00::2]:8000", "maxTokenConcurrency": 900, "maxConcurrency": 2},
        ],
    }))
    .unwrap();
    assert_eq!(c.mode, ConcurrencyMode::Tokens);
    assert_eq!((c.max_concurrency, c.max_token_concurrency, c.headroom), (8, 5000, 0.5));
    assert_eq!((c.capacity_label.as_str(), c.token_capacity_label.as_str()), ("gpu/slots", ""));
    let v6 = "[fd00::2]:8000".parse().unwrap();
    assert_eq!(
        c.endpoint_capacities[&v6],
        CapacityOverride { max_concurrency: Some(2), max_token_concurrency: Some(900) }
    );
    assert_eq!(c.endpoint_capacities.len(), 2);
    assert_eq!(config_of(json!({"concurrencyMode": "requests"})).unwrap().mode, ConcurrencyMode::Requests);
}

#[test]
fn unknown_mode_names_the_field_and_the_allowed_values() {
    for mode in ["hybrid", "Requests", ""] {
        let e = config_of(json!({"concurrencyMode": mode})).unwrap_err().to_string();
        assert!(e.contains("concurrencyMode") && e.contains("\"requests\" or \"tokens\""), "{e}");
    }
}

#[test]
fn explicit_zeros_and_negatives_are_errors() {
    assert_rejects(factory, json!({"maxConcurrency": 0}), "maxConcurrency");
    assert_rejects(factory, json!({"maxTokenConcurrency": 0}), "maxTokenConcurrency");
    assert_rejects(factory, json!({"maxConcurrency": -1}), "maxConcurrency");
    assert_rejects(factory, json!({"headroom": -0.5}), "headroom");
    assert!(build(factory, json!({"headroom": 0})).is_ok());
    assert!(build(factory, json!({"headroom": 3.0})).is_ok(), "above 1.0 is accepted");
}

#[test]
fn wrong_json_types_and_unknown_keys_are_errors() {
    assert_rejects(factory, json!({"maxConcurrency": "100"}), "maxConcurrency");
    assert_rejects(factory, json!({"maxConcurrency": 10.5}), "maxConcurrency");
    assert_rejects(factory, json!({"maxTokenConcurrency": [1]}), "maxTokenConcurrency");
    assert_rejects(factory, json!({"concurrencyMode": 1}), "concurrencyMode");
    assert_rejects(factory, json!({"headroom": "0.2"}), "headroom");
    assert_rejects(factory, json!({"capacityLabel": 5}), "capacityLabel");
    assert_rejects(factory, json!({"endpointCapacities": {"address": "10.0.0.1:80"}}), "endpointCapacities");
    // Upstream silently ignores the misspelt `mode`.
    assert_rejects(factory, json!({"mode": "tokens"}), "mode");
}

#[test]
fn endpoint_capacity_entries_are_validated() {
    let entry = |e: serde_json::Value| json!({"endpointCapacities": [{"address": "10.0.0.9:80", "maxConcurrency": 1}, e]});
    assert_rejects(
        factory,
        entry(json!({"address": "pod-1", "maxConcurrency": 4})),
        "endpointCapacities[1].address",
    );
    assert_rejects(
        factory,
        entry(json!({"address": "10.0.0.1", "maxConcurrency": 4})),
        "endpointCapacities[1].address",
    );
    assert_rejects(
        factory,
        entry(json!({"address": "10.0.0.9:80", "maxConcurrency": 4})),
        "endpointCapacities[1].address",
    );
    assert_rejects(factory, entry(json!({"address": "10.0.0.1:80"})), "endpointCapacities[1]");
    assert_rejects(
        factory,
        entry(json!({"address": "10.0.0.1:80", "maxConcurrency": 0})),
        "endpointCapacities[1].maxConcurrency",
    );
    assert_rejects(
        factory,
        entry(json!({"address": "10.0.0.1:80", "maxTokenConcurrency": -5})),
        "endpointCapacities[1].maxTokenConcurrency",
    );
    assert_rejects(factory, entry(json!({"address": "10.0.0.1:80", "slots": 4})), "slots");
    assert_rejects(factory, entry(json!({"maxConcurrency": 4})), "address");
}

#[test]
fn new_validates_a_hand_built_config() {
    let bad = ConcurrencyConfig { max_concurrency: 0, ..Default::default() };
    assert_eq!(ConcurrencyDetector::new("d", bad).unwrap_err().field, "maxConcurrency");
    let bad = ConcurrencyConfig { headroom: f64::NAN, ..Default::default() };
    assert_eq!(ConcurrencyDetector::new("d", bad).unwrap_err().field, "headroom");
    let mut bad = ConcurrencyConfig::default();
    bad.endpoint_capacities.insert(
        "10.0.0.1:80".parse().unwrap(),
        CapacityOverride { max_concurrency: Some(0), max_token_concurrency: None },
    );
    assert!(ConcurrencyDetector::new("d", bad).unwrap_err().field.contains("maxConcurrency"));
}

#[test]
fn factory_fills_every_role_and_needs_no_producer() {
    let built = build(factory, json!({"maxConcurrency": 2})).unwrap();
    assert_eq!(built.id.type_name, "concurrency-detector");
    assert!(built.filter.is_some() && built.saturation_detector.is_some());
    assert!(built.pre_request.is_some() && built.response.is_some() && built.endpoint_listener.is_some());
    assert!(built.consumes.is_empty() && built.producer.is_none());
    // The roles share one set of counters.
    let ep = endpoint(1);
    let info = dispatch(&ep, 5, 10);
    built.pre_request.as_ref().unwrap().pre_request(
        &RequestFixture::empty().request(),
        &result_for(std::slice::from_ref(&ep)),
        &info,
    );
    let c = candidates_of(std::slice::from_ref(&ep));
    let sat = built.saturation_detector.as_ref().unwrap();
    assert_eq!(sat.saturation(&c, Instant::now()), 0.5);
    built.response.as_ref().unwrap().on_complete(&info, &finished());
    assert_eq!(sat.saturation(&c, Instant::now()), 0.0);
}

// ---- saturation ----

#[test]
fn saturation_is_aggregate_inflight_over_aggregate_capacity() {
    let d = requests_mode(10, 0.0);
    let eps: Vec<_> = (1..=3).map(endpoint).collect();
    let c = candidates_of(&eps);
    assert_eq!(d.saturation(&c, Instant::now()), 0.0);
    for _ in 0..6 {
        dispatch_to(&d, &eps[0], 1);
    }
    for _ in 0..3 {
        dispatch_to(&d, &eps[1], 1);
    }
    // (6 + 3 + 0) / (3 · 10)
    assert!((d.saturation(&c, Instant::now()) - 0.3).abs() < 1e-12);
    // Over a subset, only that subset counts.
    assert_eq!(d.saturation(&c[..1], Instant::now()), 0.6);
}

#[test]
fn saturation_is_not_clamped() {
    let d = requests_mode(2, 0.0);
    let ep = endpoint(1);
    for _ in 0..3 {
        dispatch_to(&d, &ep, 1);
    }
    assert_eq!(d.saturation(&candidates_of(&[ep]), Instant::now()), 1.5);
}

#[test]
fn no_candidates_is_saturated() {
    let d = requests_mode(10, 0.0);
    assert_eq!(d.saturation(&[], Instant::now()), 1.0);
    assert_eq!(d.saturation_with_pending(&[], Instant::now(), PendingLoad { requests: 0, tokens: 0 }), 1.0);
    assert_eq!(d.stale_endpoints(&[], Instant::now()), 0);
}

#[test]
fn tokens_mode_counts_estimated_tokens_against_token_capacity() {
    let d = tokens_mode(1000, 0.0);
    let eps = [endpoint(1), endpoint(2)];
    let a = dispatch_to(&d, &eps[0], 300);
    dispatch_to(&d, &eps[1], 200);
    let c = candidates_of(&eps);
    // (300 + 200) / (2 · 1000); the request count (2) is irrelevant in this mode.
    assert_eq!(d.saturation(&c, Instant::now()), 0.25);
    d.on_complete(&a, &finished());
    assert_eq!(d.saturation(&c, Instant::now()), 0.1);
    assert_eq!(d.load(&eps[1]), InFlightLoad { requests: 1, tokens: 200 });
}

#[test]
fn pending_load_is_added_to_the_inflight_sum() {
    let d = requests_mode(10, 0.0);
    let eps = [endpoint(1), endpoint(2)];
    dispatch_to(&d, &eps[0], 50);
    let c = candidates_of(&eps);
    let pending = PendingLoad { requests: 4, tokens: 999 };
    // (1 + 4) / 20: requests mode adds the pending requests, not the tokens.
    assert_eq!(d.saturation_with_pending(&c, Instant::now(), pending), 0.25);
    assert_eq!(d.saturation_with_pending(&c, Instant::now(), PendingLoad::default()), 0.05);
    // Enough pending load alone saturates an idle pool.
    let idle = candidates_of(&[endpoint(3)]);
    assert_eq!(
        d.saturation_with_pending(&idle, Instant::now(), PendingLoad { requests: 10, tokens: 0 }),
        1.0
    );

    let d = tokens_mode(1000, 0.0);
    dispatch_to(&d, &eps[0], 100);
    let pending = PendingLoad { requests: 7, tokens: 400 };
    assert_eq!(d.saturation_with_pending(&c, Instant::now(), pending), 0.25);
}

// ---- filter ----

#[test]
fn filter_keeps_endpoints_strictly_under_capacity() {
    let d = requests_mode(3, 0.0);
    let eps: Vec<_> = (1..=3).map(endpoint).collect();
    for (ep, n) in eps.iter().zip([2, 3, 4]) {
        for _ in 0..n {
            dispatch_to(&d, ep, 1);
        }
    }
    // Limit 3: a load of 2 stays, 3 (exactly at the limit) and 4 go.
    assert_eq!(run_filter(&d, &candidates_of(&eps)), vec![0]);
}

#[test]
fn headroom_limit_is_truncated() {
    // 10 · 1.25 = 12.5 → 12: a load of 11 stays, 12 goes.
    let d = requests_mode(10, 0.25);
    assert_eq!(d.limit(10), 12);
    let eps = [endpoint(1), endpoint(2)];
    for _ in 0..11 {
        dispatch_to(&d, &eps[0], 1);
    }
    for _ in 0..12 {
        dispatch_to(&d, &eps[1], 1);
    }
    assert_eq!(run_filter(&d, &candidates_of(&eps)), vec![0]);
    // 0.99 of headroom on a capacity of 1 still allows only one request (trunc 1.99 = 1).
    assert_eq!(requests_mode(1, 0.99).limit(1), 1);
    // The headroom shapes the filter only: saturation uses the capacity itself.
    assert!((d.saturation(&candidates_of(&eps), Instant::now()) - 1.15).abs() < 1e-12);
}

#[test]
fn filter_does_not_fail_open() {
    let d = requests_mode(1, 0.0);
    let eps = [endpoint(1), endpoint(2)];
    dispatch_to(&d, &eps[0], 1);
    dispatch_to(&d, &eps[1], 1);
    assert!(run_filter(&d, &candidates_of(&eps)).is_empty());
}

#[test]
fn tokens_mode_filter_uses_token_limits() {
    let d = tokens_mode(1000, 0.1);
    let eps = [endpoint(1), endpoint(2), endpoint(3)];
    dispatch_to(&d, &eps[0], 1099);
    dispatch_to(&d, &eps[1], 1100); // at trunc(1000 · 1.1) = 1100
    for _ in 0..50 {
        dispatch_to(&d, &eps[2], 1); // many requests, few tokens
    }
    assert_eq!(run_filter(&d, &candidates_of(&eps)), vec![0, 2]);
}

#[test]
fn filter_keeps_order_of_the_given_subset() {
    let d = requests_mode(1, 0.0);
    let eps: Vec<_> = (1..=4).map(endpoint).collect();
    dispatch_to(&d, &eps[2], 1);
    let mut kept = vec![3, 2, 0];
    d.filter(&RequestFixture::empty().request(), &candidates_of(&eps), &mut kept);
    assert_eq!(kept, vec![3, 0]);
}

#[path = "concurrency_detector_lifecycle_tests.rs"]
mod lifecycle;

#[path = "concurrency_detector_capacity_tests.rs"]
mod capacities;
