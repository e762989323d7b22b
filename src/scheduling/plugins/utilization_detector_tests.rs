use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::datastore::EndpointTelemetry;
use crate::scheduling::plugins::testing::*;

fn detector(config: UtilizationConfig) -> UtilizationDetector {
    UtilizationDetector::new(config).unwrap()
}

fn defaults() -> UtilizationDetector {
    detector(UtilizationConfig::default())
}

/// Fresh telemetry (produced at `at`) with the given queue depth and KV usage.
fn fresh(at: Instant, queue: u64, kv: f64) -> EndpointTelemetry {
    EndpointTelemetry {
        waiting_queue_size: queue,
        kv_cache_usage: kv,
        update_time: Some(at),
        ..Default::default()
    }
}

/// Candidates `1..` with the given (queue, kv) telemetry, all fresh at `at`.
fn fresh_candidates(at: Instant, loads: &[(u64, f64)]) -> Vec<Candidate> {
    loads.iter().enumerate().map(|(i, &(q, kv))| candidate(i as u8 + 1, fresh(at, q, kv))).collect()
}

/// Runs the filter at `now` over all of `candidates`; returns the kept indices.
fn run_filter(d: &UtilizationDetector, candidates: &[Candidate], now: Instant) -> Vec<usize> {
    let mut kept: Vec<usize> = (0..candidates.len()).collect();
    run_filter_on(d, candidates, now, &mut kept);
    kept
}

fn run_filter_on(d: &UtilizationDetector, candidates: &[Candidate], now: Instant, kept: &mut Vec<usize>) {
    let fixture = RequestFixture::empty();
    let mut req = fixture.request();
    req.now = now;
    d.filter(&req, candidates, kept);
}

// ---- parameters ----

#[test]
fn absent_or_empty_parameters_give_the_defaults() {
    let expected = UtilizationConfig {
        queue_depth_threshold: 5,
        kv_cache_util_threshold: 0.8,
        metrics_staleness_threshold: Duration::from_millis(200),
        headroom: 0.0,
    };
    assert_eq!(UtilizationConfig::default(), expected);
    let p: Params = parse_params("p", TYPE_NAME, None).unwrap();
    assert_eq!(UtilizationConfig::from_params("p", p).unwrap(), expected);
    let p: Params = parse_params("p", TYPE_NAME, Some(&json!({}))).unwrap();
    assert_eq!(UtilizationConfig::from_params("p", p).unwrap(), expected);
}

#[test]
fn every_parameter_is_read() {
    let params = json!({
        "queueDepthThreshold": 1,
        "kvCacheUtilThreshold": 1.0,
        "metricsStalenessThreshold": "1m30s",
        "headroom": 0.25,
    });
    let p: Params = parse_params("p", TYPE_NAME, Some(&params)).unwrap();
    let c = UtilizationConfig::from_params("p", p).unwrap();
    assert_eq!(
        c,
        UtilizationConfig {
            queue_depth_threshold: 1,
            kv_cache_util_threshold: 1.0,
            metrics_staleness_threshold: Duration::from_secs(90),
            headroom: 0.25,
        }
    );
    // An integer is a valid float; a fractional duration is accepted.
    let p: Params = parse_params(
        "p",
        TYPE_NAME,
        Some(&json!({"kvCacheUtilThreshold": 1, "metricsStalenessThreshold": "1.5s"})),
    )
    .unwrap();
    let c = UtilizationConfig::from_params("p", p).unwrap();
    assert_eq!(c.kv_cache_util_threshold, 1.0);
    assert_eq!(c.metrics_staleness_threshold, Duration::from_millis(1500));
    assert!(build(factory, params).is_ok());
}

#[test]
fn explicit_zeros_are_errors_not_defaults() {
    assert_rejects(factory, json!({"queueDepthThreshold": 0}), "queueDepthThreshold");
    assert_rejects(factory, json!({"kvCacheUtilThreshold": 0}), "kvCacheUtilThreshold");
    assert_rejects(factory, json!({"kvCacheUtilThreshold": 0.0}), "kvCacheUtilThreshold");
    assert_rejects(factory, json!({"metricsStalenessThreshold": "0s"}), "metricsStalenessThreshold");
    assert_rejects(factory, json!({"metricsStalenessThreshold": "0ms"}), "metricsStalenessThreshold");
    // A zero headroom is valid (it is the default).
    assert!(build(factory, json!({"headroom": 0})).is_ok());
}

#[test]
fn out_of_range_values_are_errors() {
    assert_rejects(factory, json!({"queueDepthThreshold": -3}), "queueDepthThreshold");
    assert_rejects(factory, json!({"kvCacheUtilThreshold": -0.5}), "kvCacheUtilThreshold");
    assert_rejects(factory, json!({"kvCacheUtilThreshold": 1.01}), "kvCacheUtilThreshold");
    assert_rejects(factory, json!({"metricsStalenessThreshold": "-1s"}), "metricsStalenessThreshold");
    assert_rejects(factory, json!({"metricsStalenessThreshold": "soon"}), "metricsStalenessThreshold");
    assert_rejects(factory, json!({"metricsStalenessThreshold": "200"}), "metricsStalenessThreshold");
    assert_rejects(factory, json!({"headroom": -0.1}), "headroom");
    // The upper bounds themselves are valid; headroom above 1.0 is accepted (with a warning).
    assert!(build(factory, json!({"kvCacheUtilThreshold": 1.0})).is_ok());
    assert!(build(factory, json!({"headroom": 1.5})).is_ok());
    assert!(build(factory, json!({"queueDepthThreshold": 1})).is_ok());
}

#[test]
fn wrong_json_types_are_errors() {
    assert_rejects(factory, json!({"queueDepthThreshold": "5"}), "queueDepthThreshold");
    assert_rejects(factory, json!({"queueDepthThreshold": 5.5}), "queueDepthThreshold");
    assert_rejects(factory, json!({"kvCacheUtilThreshold": "0.8"}), "kvCacheUtilThreshold");
    assert_rejects(factory, json!({"metricsStalenessThreshold": 200}), "metricsStalenessThreshold");
    assert_rejects(factory, json!({"headroom": true}), "headroom");
    assert_rejects(factory, json!([5]), "parameters");
}

#[test]
fn unknown_keys_are_errors() {
    assert_rejects(factory, json!({"queueDepthTreshold": 5}), "queueDepthTreshold");
    assert_rejects(factory, json!({"stalenessPolicy": "ignore"}), "stalenessPolicy");
}

#[test]
fn new_validates_a_hand_built_config() {
    let bad = UtilizationConfig { queue_depth_threshold: 0, ..Default::default() };
    assert_eq!(UtilizationDetector::new(bad).unwrap_err().field, "queueDepthThreshold");
    let bad = UtilizationConfig { kv_cache_util_threshold: f64::NAN, ..Default::default() };
    assert_eq!(UtilizationDetector::new(bad).unwrap_err().field, "kvCacheUtilThreshold");
    let bad = UtilizationConfig { metrics_staleness_threshold: Duration::ZERO, ..Default::default() };
    assert_eq!(UtilizationDetector::new(bad).unwrap_err().field, "metricsStalenessThreshold");
    let bad = UtilizationConfig { headroom: -1.0, ..Default::default() };
    assert_eq!(UtilizationDetector::new(bad).unwrap_err().field, "headroom");
}

#[test]
fn factory_fills_both_roles_with_its_parameters() {
    let built = build(factory, json!({"queueDepthThreshold": 2, "metricsStalenessThreshold": "1s"})).unwrap();
    assert_eq!(built.id.type_name, "utilization-detector");
    assert!(built.pre_request.is_none() && built.response.is_none() && built.consumes.is_empty());
    let scraped = Instant::now();
    let now = scraped + Duration::from_millis(500);
    let c = vec![candidate(1, fresh(scraped, 1, 0.0)), candidate(2, fresh(scraped, 2, 0.0))];
    // 1/2 and 2/2, fresh under the 1s threshold.
    assert_eq!(built.saturation_detector.unwrap().saturation(&c, now), 0.75);
    let fixture = RequestFixture::empty();
    let mut req = fixture.request();
    req.now = now;
    let mut kept = vec![0, 1];
    built.filter.unwrap().filter(&req, &c, &mut kept);
    assert_eq!(kept, vec![0]);
}

// ---- saturation ----

#[test]
fn roofline_takes_the_most_constrained_resource() {
    let now = Instant::now();
    let d = defaults();
    // Queue-bound: 4/5 = 0.8 beats 0.4/0.8 = 0.5.
    assert!((d.endpoint_score(&fresh(now, 4, 0.4), now) - 0.8).abs() < 1e-12);
    // KV-bound: 0.6/0.8 = 0.75 beats 1/5 = 0.2.
    assert!((d.endpoint_score(&fresh(now, 1, 0.6), now) - 0.75).abs() < 1e-12);
    assert_eq!(d.endpoint_score(&fresh(now, 0, 0.0), now), 0.0);
}

#[test]
fn saturation_is_the_unweighted_mean() {
    let now = Instant::now();
    let c = fresh_candidates(now, &[(5, 0.0), (0, 0.4), (0, 0.0)]);
    // (1.0 + 0.5 + 0.0) / 3
    assert!((defaults().saturation(&c, now) - 0.5).abs() < 1e-12);
}

#[test]
fn saturation_is_not_clamped() {
    let now = Instant::now();
    let c = fresh_candidates(now, &[(10, 0.0), (15, 0.0)]);
    // (2.0 + 3.0) / 2
    assert_eq!(defaults().saturation(&c, now), 2.5);
    let c = fresh_candidates(now, &[(0, 1.0)]);
    assert!((defaults().saturation(&c, now) - 1.25).abs() < 1e-12);
}

#[test]
fn no_candidates_is_saturated() {
    assert_eq!(defaults().saturation(&[], Instant::now()), 1.0);
}

#[test]
fn missing_metrics_score_one() {
    let now = Instant::now();
    // Never scraped: update_time is None.
    let mut c = vec![candidate(1, EndpointTelemetry::default())];
    assert_eq!(defaults().saturation(&c, now), 1.0);
    c.extend(fresh_candidates(now, &[(0, 0.0)]));
    assert_eq!(defaults().saturation(&c, now), 0.5);
}

#[test]
fn stale_metrics_score_one_whatever_they_say() {
    let scraped = Instant::now();
    let d = defaults();
    let idle = fresh(scraped, 0, 0.0);
    // Exactly at the threshold the telemetry is still fresh; one nanosecond later it is stale.
    assert_eq!(d.endpoint_score(&idle, scraped + Duration::from_millis(200)), 0.0);
    let later = scraped + Duration::from_millis(200) + Duration::from_nanos(1);
    assert_eq!(d.endpoint_score(&idle, later), 1.0);
    // Stale counts as 1.0 even when the old telemetry said "overloaded".
    assert_eq!(d.endpoint_score(&fresh(scraped, 50, 1.0), later), 1.0);
    let c = vec![candidate(1, idle.clone()), candidate(2, fresh(later, 0, 0.0))];
    assert_eq!(d.saturation(&c, later), 0.5);
}

#[test]
fn stale_endpoints_are_counted() {
    let scraped = Instant::now();
    let now = scraped + Duration::from_millis(300);
    let c = vec![
        candidate(1, fresh(scraped, 0, 0.0)),       // stale
        candidate(2, EndpointTelemetry::default()), // missing
        candidate(3, fresh(now, 9, 0.9)),           // fresh, however loaded
    ];
    let d = defaults();
    assert_eq!(d.stale_endpoints(&c, now), 2);
    assert_eq!(d.stale_endpoints(&c, scraped), 1, "only the never-scraped one at scrape time");
    assert_eq!(d.stale_endpoints(&[], now), 0);
    // A longer threshold makes the first one fresh again.
    let lenient = detector(UtilizationConfig {
        metrics_staleness_threshold: Duration::from_secs(1),
        ..Default::default()
    });
    assert_eq!(lenient.stale_endpoints(&c, now), 1);
}

// ---- filter ----

#[test]
fn filter_drops_endpoints_at_or_over_the_queue_limit() {
    let now = Instant::now();
    // Limit 5·(1+0) = 5: 4 stays, 5 (exactly at the limit) and 6 go.
    let c = fresh_candidates(now, &[(4, 0.0), (5, 0.0), (6, 0.0), (0, 0.0)]);
    assert_eq!(run_filter(&defaults(), &c, now), vec![0, 3]);
}

#[test]
fn filter_drops_endpoints_at_or_over_the_kv_limit() {
    let now = Instant::now();
    // Limit 0.8: 0.79 stays, 0.8 (exactly at the limit) and 0.95 go.
    let c = fresh_candidates(now, &[(0, 0.79), (0, 0.8), (0, 0.95)]);
    assert_eq!(run_filter(&defaults(), &c, now), vec![0]);
}

#[test]
fn headroom_relaxes_both_limits() {
    let now = Instant::now();
    let d = detector(UtilizationConfig { headroom: 0.2, ..Default::default() });
    // Queue limit 5·1.2 = 6: 5 now stays, 6 goes.
    let c = fresh_candidates(now, &[(5, 0.0), (6, 0.0)]);
    assert_eq!(run_filter(&d, &c, now), vec![0]);
    // KV limit 0.8·1.2 = 0.96: 0.9 stays, 0.96 goes.
    let c = fresh_candidates(now, &[(0, 0.9), (0, 0.96)]);
    assert_eq!(run_filter(&d, &c, now), vec![0]);
    // The headroom shapes the filter only: saturation still uses the ideal thresholds.
    let c = fresh_candidates(now, &[(5, 0.0)]);
    assert_eq!(d.saturation(&c, now), 1.0);
}

#[test]
fn kv_limit_is_clamped_to_one() {
    let now = Instant::now();
    // 0.9·1.5 = 1.35 is clamped to 1.0: a full KV cache (1.0) is dropped, 0.99 stays. (GIE's unclamped
    // code would keep the full one.)
    let d = detector(UtilizationConfig { kv_cache_util_threshold: 0.9, headroom: 0.5, ..Default::default() });
    let c = fresh_candidates(now, &[(0, 0.99), (0, 1.0)]);
    assert_eq!(run_filter(&d, &c, now), vec![0]);
}

#[test]
fn filter_drops_stale_and_unscraped_endpoints() {
    let scraped = Instant::now();
    let now = scraped + Duration::from_secs(1);
    let c = vec![
        candidate(1, fresh(scraped, 0, 0.0)),
        candidate(2, EndpointTelemetry::default()),
        candidate(3, fresh(now, 0, 0.0)),
    ];
    assert_eq!(run_filter(&defaults(), &c, now), vec![2]);
    // The filter reads the request's clock: at scrape time the first one is fresh too (and telemetry
    // stamped after the request's clock is not stale).
    assert_eq!(run_filter(&defaults(), &c, scraped), vec![0, 2]);
}

#[test]
fn filter_fails_open_when_it_would_drop_everything() {
    let scraped = Instant::now();
    let now = scraped + Duration::from_secs(1);
    let c = vec![
        candidate(1, fresh(now, 50, 0.0)),
        candidate(2, fresh(scraped, 0, 0.0)),
        candidate(3, fresh(now, 0, 0.99)),
        candidate(4, EndpointTelemetry::default()),
    ];
    assert_eq!(run_filter(&defaults(), &c, now), vec![0, 1, 2, 3]);
    // "The original list" is the list the filter was given, e.g. what earlier filters left.
    let mut kept = vec![1, 3];
    run_filter_on(&defaults(), &c, now, &mut kept);
    assert_eq!(kept, vec![1, 3]);
}

#[test]
fn filter_keeps_order_and_an_empty_list_stays_empty() {
    let now = Instant::now();
    let c = fresh_candidates(now, &[(0, 0.0), (9, 0.0), (1, 0.1), (2, 0.2)]);
    let mut kept = vec![3, 1, 0];
    run_filter_on(&defaults(), &c, now, &mut kept);
    assert_eq!(kept, vec![3, 0]);
    let mut kept = Vec::new();
    run_filter_on(&defaults(), &c, now, &mut kept);
    assert!(kept.is_empty());
}

#[test]
fn pending_requests_count_as_queue_depth_spread_over_candidates() {
    let det = UtilizationDetector::new(UtilizationConfig::default()).unwrap();
    let now = std::time::Instant::now();
    let idle = |n: u8| {
        crate::scheduling::plugins::testing::candidate(
            n,
            crate::datastore::EndpointTelemetry { update_time: Some(now), ..Default::default() },
        )
    };
    let cands = vec![idle(1), idle(2)];
    assert_eq!(det.saturation(&cands, now), 0.0);
    // 10 pending over 2 endpoints with a queue threshold of 5: one full threshold each.
    let s = det.saturation_with_pending(&cands, now, PendingLoad { requests: 10, tokens: 0 });
    assert!((s - 1.0).abs() < 1e-9, "{s}");
}
