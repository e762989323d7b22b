//! The latency consumers: `latency-scorer`, `prefix-cache-affinity-filter`, `slo-headroom-tier-filter`,
//! `latency-slo-admitter`, over hand-written predictions.

use super::*;
use crate::datastore::EndpointTelemetry;
use crate::request::Slo;
use crate::scheduling::plugins::latency_slo_admitter::{self, LatencySloAdmitter, REJECTION};
use crate::scheduling::plugins::prefix_cache_affinity_filter::{
    self, AffinitySettings, PrefixCacheAffinityFilter, TtftSource,
};
use crate::scheduling::plugins::slo_headroom_tier_filter::{self, SloHeadroomTierFilter};
use crate::scheduling::plugins::testing::{self, assert_rejects, RequestFixture};
use crate::scheduling::{Admitter, Filter, InFlightLoad, LatencyPrediction, PrefixMatch};

/// Endpoint `n` with a prediction of (ttft, tpot) ms against `slo`, and `dispatched` requests in flight.
fn predicted(n: u8, ttft: f64, tpot: f64, slo: Slo, dispatched: i64) -> Candidate {
    let mut c = testing::candidate(
        n,
        EndpointTelemetry { kv_cache_usage: 0.5, running_requests: 1, ..Default::default() },
    );
    c.attrs.latency = Some(LatencyPrediction {
        ttft_ms: ttft,
        tpot_ms: tpot,
        ttft_valid: ttft < slo.ttft_ms,
        // As with streaming mode off: no TPOT objective, TPOT not enforced.
        tpot_valid: slo.tpot_ms == 0.0 || tpot < slo.tpot_ms,
        ttft_headroom_ms: slo.ttft_ms - ttft,
        tpot_headroom_ms: if slo.tpot_ms == 0.0 { 0.0 } else { slo.tpot_ms - tpot },
        dispatched_requests: dispatched,
        generation: 1,
        decode_stall_ms: 0.0,
    });
    c
}

fn scores(scorer: &LatencyScorer, candidates: &[Candidate]) -> Vec<f64> {
    scores_with_slo(scorer, candidates, Slo::default())
}

#[test]
fn without_slo_the_lowest_predicted_latency_scores_highest() {
    let none = Slo::default();
    let c = [
        predicted(1, 900.0, 0.0, none, 2),
        predicted(2, 300.0, 0.0, none, 2),
        predicted(3, 600.0, 0.0, none, 2),
    ];
    let s = scores(&LatencyScorer::default(), &c);
    assert!(s[1] > s[2] && s[2] > s[0], "{s:?}");
    assert_eq!(s[1], 1.01, "upstream's range is 0.01 … 1.01");
}

#[test]
fn idle_endpoints_are_preferred_when_every_endpoint_misses() {
    let none = Slo::default();
    let c = [predicted(1, 100.0, 0.0, none, 3), predicted(2, 500.0, 0.0, none, 0)];
    let s = scores(&LatencyScorer::default(), &c);
    assert_eq!(s[0], 0.0);
    assert!(s[1] > 0.0);
}

#[test]
fn positive_tier_is_scored_by_strategy_and_negatives_get_zero() {
    let slo = Slo { ttft_ms: 1000.0, tpot_ms: 100.0 };
    let c = [
        predicted(1, 900.0, 50.0, slo, 1),  // headroom 100 ms
        predicted(2, 200.0, 50.0, slo, 1),  // headroom 800 ms
        predicted(3, 1500.0, 50.0, slo, 1), // misses
    ];
    let least = scores(&LatencyScorer::default(), &c);
    assert!(least[0] > least[1] && least[2] == 0.0, "least packs: {least:?}");
    let most = scores(&LatencyScorer { strategy: Strategy::Most, ..LatencyScorer::default() }, &c);
    assert!(most[1] > most[0] && most[2] == 0.0, "most spreads: {most:?}");
}

#[test]
fn deficit_buckets_prefer_a_tpot_miss_over_a_ttft_miss() {
    let slo = Slo { ttft_ms: 1000.0, tpot_ms: 100.0 };
    let c = [
        predicted(1, 1200.0, 50.0, slo, 1),
        predicted(2, 500.0, 150.0, slo, 1),
        predicted(3, 1500.0, 150.0, slo, 1),
    ];
    let s = scores(&LatencyScorer::default(), &c);
    assert!(s[1] > 0.0 && s[0] == 0.0 && s[2] == 0.0, "{s:?}");
}

fn scores_with_slo(scorer: &LatencyScorer, candidates: &[Candidate], slo: Slo) -> Vec<f64> {
    let fixture = RequestFixture::empty();
    let request = SchedulingRequest { slo, ..fixture.request() };
    let subset: Vec<usize> = (0..candidates.len()).collect();
    let mut out = vec![f64::NAN; candidates.len()];
    scorer.score(&request, candidates, &subset, &mut out);
    out
}

fn graded(penalty: f64) -> LatencyScorer {
    LatencyScorer { slo_miss_penalty: Some(penalty), ..LatencyScorer::default() }
}

#[test]
fn graded_mode_with_no_penalty_scores_a_request_with_objectives_as_one_without() {
    let slo = Slo { ttft_ms: 1000.0, tpot_ms: 100.0 };
    let with = [
        predicted(1, 900.0, 50.0, slo, 1),
        predicted(2, 200.0, 60.0, slo, 1),
        predicted(3, 1500.0, 80.0, slo, 1),
    ];
    let none = Slo::default();
    // As the producer writes them without objectives in streaming mode: headroom = −prediction.
    let without = [(1, 900.0, 50.0), (2, 200.0, 60.0), (3, 1500.0, 80.0)].map(|(n, ttft, tpot)| {
        let mut c = predicted(n, ttft, tpot, none, 1);
        if let Some(l) = c.attrs.latency.as_mut() {
            (l.tpot_headroom_ms, l.tpot_valid) = (-tpot, false);
        }
        c
    });
    let legacy = scores(&LatencyScorer::default(), &without);
    assert_eq!(scores_with_slo(&graded(0.0), &with, slo), legacy, "the objectives change nothing at 0");
    assert_eq!(scores_with_slo(&graded(0.5), &without, none), legacy, "no objectives: llm-d's ordering");
    // llm-d's tiers with the same objectives: the miss scores 0 and `least` prefers the tightest fit.
    let tiers = scores_with_slo(&LatencyScorer::default(), &with, slo);
    assert!(tiers[2] == 0.0 && tiers[0] > tiers[1], "{tiers:?}");
}

#[test]
fn graded_mode_discounts_endpoints_predicted_to_miss_an_objective() {
    let slo = Slo { ttft_ms: 1000.0, tpot_ms: 100.0 };
    let c = [
        predicted(1, 200.0, 150.0, slo, 1), // fastest first token, misses TPOT
        predicted(2, 400.0, 60.0, slo, 1),  // meets both
        predicted(3, 1500.0, 50.0, slo, 1), // misses TTFT
    ];
    let plain = scores_with_slo(&graded(0.0), &c, slo);
    let penalised = scores_with_slo(&graded(0.5), &c, slo);
    assert_eq!(penalised[1], plain[1], "the endpoint meeting both keeps its score");
    assert!((penalised[0] - plain[0] * 0.5).abs() < 1e-12 && (penalised[2] - plain[2] * 0.5).abs() < 1e-12);
    // Only objectives the request carries count: with a TTFT objective alone, endpoint 1 is not penalised.
    let ttft_only = Slo { ttft_ms: 1000.0, tpot_ms: 0.0 };
    let s = scores_with_slo(&graded(0.5), &c, ttft_only);
    assert_eq!(s[0], plain[0]);
}

#[test]
fn graded_mode_keeps_the_idle_preference() {
    let slo = Slo { ttft_ms: 1000.0, tpot_ms: 100.0 };
    let c = [predicted(1, 100.0, 20.0, slo, 3), predicted(2, 500.0, 40.0, slo, 0)];
    let s = scores_with_slo(&graded(0.3), &c, slo);
    assert!(s[0] == 0.0 && s[1] > 0.0, "{s:?}");
}

fn stalling(mut c: Candidate, decode_stall_ms: f64) -> Candidate {
    if let Some(l) = c.attrs.latency.as_mut() {
        l.decode_stall_ms = decode_stall_ms;
    }
    c
}

#[test]
fn decode_stall_weight_sends_the_request_where_it_stalls_fewer_decodes() {
    let none = Slo::default();
    // The first endpoint is predicted a little faster, but the request would stall far more decode there.
    let c = [
        stalling(predicted(1, 400.0, 20.0, none, 8), 3000.0),
        stalling(predicted(2, 450.0, 22.0, none, 2), 500.0),
    ];
    let plain = scores(&graded(0.3), &c);
    assert!(plain[0] > plain[1], "weight 0: the stall is ignored, {plain:?}");
    let weighted = LatencyScorer { decode_stall_weight: 2.0, ..graded(0.3) };
    let s = scores(&weighted, &c);
    assert!(s[1] > s[0], "{s:?}");
    // An axis with one value everywhere says nothing: the ordering is TTFT and TPOT's alone.
    let flat = [stalling(c[0].clone(), 700.0), stalling(c[1].clone(), 700.0)];
    assert_eq!(scores(&weighted, &flat), plain);
    // llm-d's tiers (no sloMissPenalty) never read it.
    let tiers = LatencyScorer { decode_stall_weight: 1.0, ..LatencyScorer::default() };
    assert_eq!(scores(&tiers, &c), scores(&LatencyScorer::default(), &c));
    assert_rejects(factory, serde_json::json!({"decodeStallWeight": -0.5}), "decodeStallWeight");
}

#[test]
fn slo_miss_penalty_is_validated() {
    let ctx = testing::ctx();
    for bad in [serde_json::json!({"sloMissPenalty": 1.5}), serde_json::json!({"sloMissPenalty": -0.1})] {
        let e = factory("ls", Some(&bad), &ctx).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("sloMissPenalty"), "{e}");
    }
    assert!(factory("ls", Some(&serde_json::json!({"sloMissPenalty": 0.25})), &ctx).is_ok());
}

#[test]
fn composite_fallback_without_predictions() {
    let mut c = testing::candidates_with(&[(0.2, 0u64), (0.8, 4)], |m, (kv, q)| {
        m.kv_cache_usage = kv;
        m.waiting_queue_size = q;
    });
    c[1].attrs.prefix = Some(PrefixMatch { match_blocks: 4, total_blocks: 4, block_chars: 64 });
    let s = scores(&LatencyScorer::default(), &c);
    // (0.8 + 1 + 0)/3 and (0.2 + 0 + 1)/3, rounded to hundredths.
    assert_eq!(s, vec![0.6, 0.4]);
    let kv_only = LatencyScorer { composite: [0.0; 3], ..LatencyScorer::default() };
    assert_eq!(scores(&kv_only, &c), vec![0.8, 0.2], "weights summing to 0 fall back to KV alone");
}

#[test]
fn scorer_parameters_are_validated() {
    assert_rejects(factory, serde_json::json!({"ttftWeight": -1.0}), "ttftWeight");
    assert_rejects(
        factory,
        serde_json::json!({"headroomSelectionStrategy": "middle"}),
        "headroomSelectionStrategy",
    );
    assert_rejects(factory, serde_json::json!({"compositeKvWeight": 1.0}), "compositeKvWeight");
    assert!(testing::build(
        factory,
        serde_json::json!({"compositeKVWeight": 2.0, "headroomSelectionStrategy": "most"})
    )
    .is_ok());
}

fn with_prefix(mut c: Candidate, matched: usize, tokens: i64) -> Candidate {
    c.attrs.prefix = Some(PrefixMatch { match_blocks: matched, total_blocks: 10, block_chars: 64 });
    c.attrs.inflight = InFlightLoad { requests: 1, tokens };
    c
}

fn filtered(filter: &dyn Filter, candidates: &[Candidate]) -> Vec<usize> {
    let fixture = RequestFixture::empty();
    let mut kept: Vec<usize> = (0..candidates.len()).collect();
    filter.filter(&fixture.request(), candidates, &mut kept);
    kept
}

#[test]
fn affinity_keeps_sticky_endpoints_unless_the_load_gate_breaks_it() {
    let none = Slo::default();
    let settings = AffinitySettings {
        ttft_source: TtftSource::LatencyPredictor,
        max_ttft_penalty_ms: 5000.0,
        ..AffinitySettings::default()
    };
    let filter = PrefixCacheAffinityFilter::new("f", settings.clone());
    let c = [
        with_prefix(predicted(1, 800.0, 0.0, none, 1), 9, 0),
        with_prefix(predicted(2, 300.0, 0.0, none, 1), 2, 0),
    ];
    assert_eq!(filtered(&filter, &c), vec![0], "90% cached ≥ 0.8: sticky");
    let c = [
        with_prefix(predicted(1, 9000.0, 0.0, none, 1), 9, 0),
        with_prefix(predicted(2, 300.0, 0.0, none, 1), 2, 0),
    ];
    assert_eq!(filtered(&filter, &c), vec![0, 1], "8.7 s slower than the other: affinity broken");
    let c = [
        with_prefix(predicted(1, 800.0, 0.0, none, 1), 5, 0),
        with_prefix(predicted(2, 300.0, 0.0, none, 1), 2, 0),
    ];
    assert_eq!(filtered(&filter, &c), vec![0, 1], "nothing sticky: all kept");

    // The default TTFT source: in-flight tokens over the peak prefill throughput (15,928 tokens/s).
    let by_tokens = PrefixCacheAffinityFilter::new("f", AffinitySettings::default());
    let heavy = [
        with_prefix(testing::candidate(1, Default::default()), 10, 400_000),
        with_prefix(testing::candidate(2, Default::default()), 0, 0),
    ];
    assert_eq!(filtered(&by_tokens, &heavy), vec![0, 1], "25 s of prefill queued > 18 s penalty");
    let light = [
        with_prefix(testing::candidate(1, Default::default()), 10, 100_000),
        with_prefix(testing::candidate(2, Default::default()), 0, 0),
    ];
    assert_eq!(filtered(&by_tokens, &light), vec![0]);

    let explore =
        PrefixCacheAffinityFilter::new("f", AffinitySettings { exploration_probability: 1.0, ..settings });
    let c = [
        with_prefix(predicted(1, 800.0, 0.0, none, 1), 9, 0),
        with_prefix(predicted(2, 300.0, 0.0, none, 1), 2, 0),
    ];
    assert_eq!(filtered(&explore, &c), vec![0, 1], "always exploring");
}

#[test]
fn affinity_parameters_are_validated() {
    let f = prefix_cache_affinity_filter::factory;
    assert_rejects(f, serde_json::json!({"affinityThreshold": 1.5}), "affinityThreshold");
    assert_rejects(f, serde_json::json!({"maxTtftPenaltyMs": 5}), "maxTtftPenaltyMs");
    assert_rejects(f, serde_json::json!({"ttftSource": "guess"}), "ttftSource");
    assert_rejects(f, serde_json::json!({"peakPrefillThroughput": 0}), "peakPrefillThroughput");
    let ok = serde_json::json!({"affinityThreshold": 0.99, "ttftSource": "latencyPredictor", "maxTTFTPenaltyMs": 5000,
        "explorationProbability": 0.01, "maxTokensInFlightPenalty": 286720});
    assert!(testing::build(f, ok).is_ok());
}

#[test]
fn tier_filter_keeps_the_positive_tier_and_fails_open() {
    let slo = Slo { ttft_ms: 1000.0, tpot_ms: 100.0 };
    let filter = SloHeadroomTierFilter::new("tier", 0.0);
    let c = [
        predicted(1, 1500.0, 50.0, slo, 1),
        predicted(2, 500.0, 50.0, slo, 1),
        predicted(3, 500.0, 150.0, slo, 1),
    ];
    assert_eq!(filtered(&filter, &c), vec![1]);
    let always_negative = SloHeadroomTierFilter::new("tier", 1.0);
    assert_eq!(filtered(&always_negative, &c), vec![0, 2], "epsilon 1: the negative tier");
    let none = Slo::default();
    let c = [predicted(1, 1500.0, 50.0, none, 1), predicted(2, 500.0, 50.0, none, 1)];
    assert_eq!(filtered(&filter, &c), vec![0, 1], "no SLO: all negative, all kept");
    let warm_up = [testing::candidate(1, Default::default()), testing::candidate(2, Default::default())];
    assert_eq!(filtered(&filter, &warm_up), vec![0, 1], "no predictions: all kept");
    assert_rejects(
        slo_headroom_tier_filter::factory,
        serde_json::json!({"epsilonExploreNeg": 2}),
        "epsilonExploreNeg",
    );
}

#[test]
fn admitter_sheds_only_sheddable_requests_no_endpoint_can_serve_in_time() {
    let slo = Slo { ttft_ms: 100.0, tpot_ms: 0.0 };
    let fixture = RequestFixture::empty();
    let mut req = fixture.request();
    req.slo = slo;
    req.priority = -1;
    let hopeless = [predicted(1, 500.0, 0.0, slo, 1), predicted(2, 900.0, 0.0, slo, 1)];
    assert_eq!(LatencySloAdmitter.admit(&req, &hopeless), Err(REJECTION.to_string()));
    assert!(LatencySloAdmitter.denial_is_load(), "a 429, not a 500");
    let mut standard = req;
    standard.priority = 0;
    assert_eq!(LatencySloAdmitter.admit(&standard, &hopeless), Ok(()), "non-sheddable: always admitted");
    let mut no_slo = req;
    no_slo.slo = Slo::default();
    assert_eq!(LatencySloAdmitter.admit(&no_slo, &hopeless), Ok(()));
    let one_fits = [predicted(1, 50.0, 0.0, slo, 1), predicted(2, 900.0, 0.0, slo, 1)];
    assert_eq!(LatencySloAdmitter.admit(&req, &one_fits), Ok(()));
    let mut cold = predicted(3, 900.0, 0.0, slo, 1);
    cold.telemetry = std::sync::Arc::new(EndpointTelemetry {
        kv_cache_usage: 0.01,
        running_requests: 1,
        ..Default::default()
    });
    assert_eq!(
        LatencySloAdmitter.admit(&req, &[hopeless[0].clone(), cold]),
        Ok(()),
        "a cold endpoint: admitted"
    );
    let warm_up = [testing::candidate(
        1,
        EndpointTelemetry { kv_cache_usage: 0.5, running_requests: 3, ..Default::default() },
    )];
    assert_eq!(LatencySloAdmitter.admit(&req, &warm_up), Ok(()), "no predictions: fail open");
    assert_rejects(latency_slo_admitter::factory, serde_json::json!({"threshold": 1}), "threshold");
}
