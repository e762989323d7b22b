use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use crate::datastore::EndpointTelemetry;
use crate::metrics::MetricsRegistry;
use crate::predictor::online::{HubMode, OnlineConfig, PredictorHub};
use crate::predictor::train::{Objective, Params};
use crate::request::{Slo, Usage};
use crate::scheduling::plugins::testing::{self, RequestFixture};
use crate::scheduling::{
    Completion, CompletionKind, DispatchInfo, EndpointListener, PreRequest, PrefixMatch, ResponseHook,
};

/// A manual hub that trains small models from 40 samples.
fn hub(streaming: bool) -> PredictorHub {
    let config = OnlineConfig {
        min_samples: 40,
        streaming,
        params: Params { objective: Objective::SquaredError, n_trees: 30, ..Params::default() },
        ..OnlineConfig::default()
    };
    PredictorHub::new(config, MetricsRegistry::new("test"), HubMode::Manual)
}

fn producer(hub: &PredictorHub, settings: ProducerSettings) -> PredictedLatencyProducer {
    let handles = hub.attach(settings.streaming).unwrap();
    PredictedLatencyProducer::new("plp", settings, handles, LatencyMetrics::detached())
}

fn labelled(n: u8, accelerator: &str, waiting: u64) -> Candidate {
    let labels = BTreeMap::from([("accelerator".to_string(), accelerator.to_string())]);
    let addr = format!("10.0.0.{n}:8000").parse().expect("test address");
    let ep = Arc::new(crate::datastore::Endpoint::new(format!("pod-{n}"), addr).with_labels(labels));
    ep.update_telemetry(EndpointTelemetry {
        waiting_queue_size: waiting,
        kv_cache_usage: 0.3,
        ..Default::default()
    });
    Candidate::new(ep)
}

fn info_for(c: &Candidate, id: u64, at: Instant) -> DispatchInfo {
    let mut info = testing::dispatch(&c.endpoint, 100, 200);
    info.dispatch_id = id;
    info.dispatched_at = at;
    info.attrs = c.attrs;
    info
}

fn finished(now: Instant, tokens: u64) -> Completion {
    let usage = Usage { prompt_tokens: 100, completion_tokens: tokens, cached_tokens: 0 };
    Completion { kind: CompletionKind::Finished, status: Some(200), usage: Some(usage), now }
}

/// Dispatches one request to an H100 and one to an L4 candidate; returns when, and each with its dispatch.
fn dispatch_pair(
    p: &PredictedLatencyProducer,
    fixture: &RequestFixture,
    round: u64,
) -> (Instant, Vec<(Candidate, DispatchInfo)>) {
    // Rows that differ (the held-out split hashes the sample, so identical rows all land on one side).
    let mut candidates = vec![labelled(1, "h100", round % 7), labelled(2, "l4", round % 5)];
    let req = fixture.request();
    p.prepare(&req, &mut candidates);
    let dispatched = candidates
        .into_iter()
        .enumerate()
        .map(|(k, c)| {
            let info = info_for(&c, round * 10 + k as u64, req.now);
            p.pre_request(&req, &testing::result_for(std::slice::from_ref(&c.endpoint)), &info);
            (c, info)
        })
        .collect();
    (req.now, dispatched)
}

/// Dispatches one request to each candidate and completes it after `latency(candidate)` ms.
fn train_round(
    p: &PredictedLatencyProducer,
    fixture: &RequestFixture,
    latency: impl Fn(&Candidate) -> u64,
    round: u64,
) {
    let (now, dispatched) = dispatch_pair(p, fixture, round);
    for (c, info) in &dispatched {
        let end = now + Duration::from_millis(latency(c));
        p.on_response_chunk(info, b"data: x", true, now + Duration::from_millis(latency(c) / 4));
        p.on_complete(info, &finished(end, 50));
    }
}

#[test]
fn warm_up_captures_features_and_predicts_once_trained() {
    let hub = hub(false);
    let p = producer(&hub, ProducerSettings::default());
    let fixture = RequestFixture::with_prompt("m", "hello");
    let mut candidates = vec![labelled(1, "h100", 0), labelled(2, "l4", 3)];
    p.prepare(&fixture.request(), &mut candidates);
    assert!(candidates.iter().all(|c| c.attrs.latency.is_none()), "no model yet: consumers fall back");
    let observation = candidates[1].attrs.observation.expect("features are captured during warm-up");
    assert_eq!(observation.waiting, 3);
    assert_eq!(observation.accelerator_class, accelerator_code("l4"));
    assert_ne!(observation.accelerator_class, candidates[0].attrs.observation.unwrap().accelerator_class);

    // The same pool, but the L4 is five times slower: the model must tell them apart by class alone.
    for round in 0..40 {
        let slow = |c: &Candidate| if c.endpoint.labels["accelerator"] == "l4" { 1000 } else { 200 };
        train_round(&p, &fixture, slow, round);
    }
    assert_eq!(p.tracked_requests(), 0, "every completed request is forgotten");
    assert!(hub.retrain_now(), "80 samples: the first model is published");
    p.prepare(&fixture.request(), &mut candidates);
    let [h100, l4] = [&candidates[0], &candidates[1]].map(|c| c.attrs.latency.expect("predicted"));
    assert!(h100.ttft_ms < 400.0 && l4.ttft_ms > 700.0, "h100 {} ms, l4 {} ms", h100.ttft_ms, l4.ttft_ms);
    assert_eq!(h100.generation, 1);
    // No SLO: never valid, headroom is minus the prediction.
    assert!(!h100.ttft_valid && h100.ttft_headroom_ms == -h100.ttft_ms);
    assert!(h100.tpot_valid, "streaming off: TPOT is not enforced");
}

#[test]
fn slo_headroom_uses_the_tightest_running_tpot_objective() {
    let hub = hub(true);
    let settings =
        ProducerSettings { streaming: true, slo_buffer_factor: 1.0, ..ProducerSettings::default() };
    let p = producer(&hub, settings);
    let mut fixture = RequestFixture::with_prompt("m", "hello");
    fixture.parsed.stream = true;
    for round in 0..40 {
        train_round(&p, &fixture, |_| 400, round);
    }
    assert!(hub.retrain_now());
    let predicted = {
        let mut c = vec![labelled(1, "h100", 0)];
        p.prepare(&fixture.request(), &mut c);
        c[0].attrs.latency.unwrap()
    };
    assert!(predicted.tpot_ms > 0.0, "a TPOT model exists in streaming mode: {predicted:?}");

    // A request with a loose TPOT objective predicts valid; then a running request with a tight one lowers
    // the bar on that endpoint.
    let loose = Slo { ttft_ms: 10_000.0, tpot_ms: predicted.tpot_ms * 10.0 };
    let mut req = fixture.request();
    req.slo = loose;
    let mut candidates = vec![labelled(1, "h100", 0)];
    p.prepare(&req, &mut candidates);
    assert!(candidates[0].attrs.latency.unwrap().is_valid());

    let mut tight_req = fixture.request();
    tight_req.slo = Slo { ttft_ms: 10_000.0, tpot_ms: predicted.tpot_ms / 10.0 };
    let info = info_for(&candidates[0], 999, tight_req.now);
    p.pre_request(&tight_req, &testing::result_for(std::slice::from_ref(&candidates[0].endpoint)), &info);
    assert_eq!(p.running_objectives(), 1);
    p.prepare(&req, &mut candidates);
    let constrained = candidates[0].attrs.latency.unwrap();
    assert!(constrained.ttft_valid && !constrained.tpot_valid, "{constrained:?}");

    // Aborted: forgotten without a training row, and the objective no longer constrains.
    let aborted =
        Completion { kind: CompletionKind::Aborted, status: None, usage: None, now: Instant::now() };
    p.on_complete(&info, &aborted);
    assert_eq!((p.running_objectives(), p.tracked_requests()), (0, 0));
    p.prepare(&req, &mut candidates);
    assert!(candidates[0].attrs.latency.unwrap().is_valid());
}

#[test]
fn a_probe_predicts_but_records_no_prediction_metrics() {
    let hub = hub(true);
    let registry = MetricsRegistry::new("test");
    let settings = ProducerSettings { streaming: true, ..ProducerSettings::default() };
    let handles = hub.attach(true).unwrap();
    let p = PredictedLatencyProducer::new("plp", settings, handles, LatencyMetrics::register(&registry));
    let mut fixture = RequestFixture::with_prompt("m", "hello");
    fixture.parsed.stream = true;
    for round in 0..40 {
        train_round(&p, &fixture, |_| 400, round);
    }
    assert!(hub.retrain_now());
    let timed = |page: &str| page.lines().filter(|l| l.contains("prediction_duration_seconds_count")).count();
    let baseline = timed(&registry.encode());

    let mut candidates = vec![labelled(1, "h100", 0)];
    let probe = crate::scheduling::SchedulingRequest { dry_run: true, ..fixture.request() };
    p.prepare(&probe, &mut candidates);
    assert!(candidates[0].attrs.latency.is_some_and(|l| l.tpot_ms > 0.0), "the probe sees predictions");
    assert_eq!(timed(&registry.encode()), baseline, "nothing recorded for a probe");

    p.prepare(&fixture.request(), &mut candidates);
    assert!(timed(&registry.encode()) > baseline, "a real request's predictions are timed");
}

/// A streaming producer that forgets requests running longer than a second.
fn streaming_producer_with_a_1s_ttl(hub: &PredictorHub) -> PredictedLatencyProducer {
    let settings = ProducerSettings {
        streaming: true,
        context_ttl: Duration::from_secs(1),
        ..ProducerSettings::default()
    };
    producer(hub, settings)
}

#[test]
fn requests_running_past_the_ttl_are_forgotten() {
    let hub = hub(true);
    let p = streaming_producer_with_a_1s_ttl(&hub);
    let fixture = RequestFixture::with_prompt("m", "hello");
    let mut req = fixture.request();
    req.slo = Slo { ttft_ms: 0.0, tpot_ms: 50.0 };
    let mut candidates = vec![labelled(1, "h100", 0)];
    p.prepare(&req, &mut candidates);
    let info = info_for(&candidates[0], 7, req.now);
    p.pre_request(&req, &testing::result_for(std::slice::from_ref(&candidates[0].endpoint)), &info);
    assert_eq!((p.tracked_requests(), p.running_objectives()), (1, 1));
    p.tracker.sweep(req.now + Duration::from_secs(2));
    assert_eq!((p.tracked_requests(), p.running_objectives()), (0, 0));
    p.on_complete(&info, &finished(Instant::now(), 10));
    p.on_endpoints_removed(&[candidates[0].endpoint.clone()]);
}

/// The phase counters a fresh capture sees on `c`'s endpoint: (prefill tokens, decode tokens).
fn phases_seen(
    p: &PredictedLatencyProducer,
    req: &crate::scheduling::SchedulingRequest<'_>,
    c: &Candidate,
) -> (u64, u64) {
    let mut fresh = vec![c.clone()];
    p.prepare(req, &mut fresh);
    let o = fresh[0].attrs.observation.expect("captured");
    (o.prefill_tokens_in_flight, o.decode_tokens_in_flight)
}

#[test]
fn tokens_in_flight_follow_each_request_from_prefill_to_decode_to_its_end() {
    let hub = hub(true);
    let p = producer(&hub, ProducerSettings { streaming: true, ..ProducerSettings::default() });
    let fixture = RequestFixture::with_prompt("m", "hello");
    let mut req = fixture.request();
    req.input_tokens = 1000;
    let mut cached = labelled(1, "h100", 0);
    cached.attrs.prefix = Some(PrefixMatch { match_blocks: 1, total_blocks: 4, block_chars: 64 });
    let other = labelled(2, "l4", 0);
    assert_eq!(phases_seen(&p, &req, &cached), (0, 0));

    // Dispatched: the uncached part of the prompt waits to be prefilled (a quarter of it is cached).
    let mut first = vec![cached.clone()];
    p.prepare(&req, &mut first);
    let first_info = info_for(&first[0], 1, req.now);
    let result = testing::result_for(std::slice::from_ref(&first[0].endpoint));
    p.pre_request(&req, &result, &first_info);
    assert_eq!(phases_seen(&p, &req, &cached), (750, 0));
    assert_eq!(phases_seen(&p, &req, &other), (0, 0), "counted per endpoint");
    let mut plain = vec![labelled(1, "h100", 0)];
    plain[0].endpoint = cached.endpoint.clone();
    p.prepare(&req, &mut plain);
    let second_info = info_for(&plain[0], 2, req.now);
    p.pre_request(&req, &result, &second_info);
    assert_eq!(phases_seen(&p, &req, &cached), (1750, 0));

    // The first chunk moves the first request's prompt to the decode context; later chunks change nothing.
    p.on_response_chunk(&first_info, b"data: x", true, req.now);
    assert_eq!(phases_seen(&p, &req, &cached), (1000, 1000));
    p.on_response_chunk(&first_info, b"data: y", false, req.now);
    assert_eq!(phases_seen(&p, &req, &cached), (1000, 1000));

    // Finished or failed, each request takes back exactly what it added.
    p.on_complete(&first_info, &finished(Instant::now(), 10));
    assert_eq!(phases_seen(&p, &req, &cached), (1000, 0));
    let aborted =
        Completion { kind: CompletionKind::Aborted, status: None, usage: None, now: Instant::now() };
    p.on_complete(&second_info, &aborted);
    assert_eq!(phases_seen(&p, &req, &cached), (0, 0));
    assert_eq!((p.endpoints_with_tokens_in_flight(), p.tracked_requests()), (0, 0));
    p.on_complete(&second_info, &aborted);
    assert_eq!(phases_seen(&p, &req, &cached), (0, 0), "a second completion takes nothing");
}

#[test]
fn tokens_in_flight_are_released_by_the_ttl_and_by_endpoint_removal() {
    let hub = hub(true);
    let p = streaming_producer_with_a_1s_ttl(&hub);
    let fixture = RequestFixture::with_prompt("m", "hello");
    let mut req = fixture.request();
    req.input_tokens = 500;
    let mut candidates = vec![labelled(1, "h100", 0), labelled(2, "l4", 0)];
    p.prepare(&req, &mut candidates);
    for (k, c) in candidates.iter().enumerate() {
        let info = info_for(c, 20 + k as u64, req.now);
        p.pre_request(&req, &testing::result_for(std::slice::from_ref(&c.endpoint)), &info);
    }
    assert_eq!(p.endpoints_with_tokens_in_flight(), 2);
    p.on_endpoints_removed(&[candidates[1].endpoint.clone()]);
    assert_eq!(p.endpoints_with_tokens_in_flight(), 1);
    p.tracker.sweep(req.now + Duration::from_secs(2));
    assert_eq!((p.endpoints_with_tokens_in_flight(), p.tracked_requests()), (0, 0));
    assert_eq!(phases_seen(&p, &req, &candidates[0]), (0, 0));
}

#[test]
fn parameters_are_validated_and_deprecated_ones_accepted() {
    let ctx = testing::ctx();
    let built = factory(
        "plp",
        Some(&serde_json::json!({"samplingMean": 100.0, "maxDecodeTokenSamplesForPrediction": 3,
            "contextTTL": "5m", "streamingMode": true, "sloBufferFactor": 0.9, "endpointRoleLabel": "role",
            "predictInProduce": true, "predictDecodeStall": true, "prefixMatchInfoProducerName": "", "inFlightLoadProducerName": ""})),
        &ctx,
    );
    assert!(built.is_ok(), "{built:?}");
    for (params, field) in [
        (serde_json::json!({"sloBufferFactor": 0.0}), "sloBufferFactor"),
        (serde_json::json!({"contextTTL": "soon"}), "contextTTL"),
        (serde_json::json!({"contextTtl": "5m"}), "contextTtl"),
        (serde_json::json!({"acceleratorLabels": [""]}), "acceleratorLabels"),
    ] {
        let err = factory("plp", Some(&params), &testing::ctx()).unwrap_err().to_string();
        assert!(err.contains(field) && err.contains("plp"), "{params}: {err}");
    }
    let err = factory("other", Some(&serde_json::json!({"streamingMode": false})), &ctx).unwrap_err();
    assert!(err.to_string().contains("streamingMode"), "one predictor per epp: {err}");
}

/// The decode stall predicted on each of `endpoints` for a fresh request.
fn stalls(p: &PredictedLatencyProducer, fixture: &RequestFixture, endpoints: &[&Candidate]) -> Vec<f64> {
    let mut fresh: Vec<Candidate> = endpoints.iter().map(|c| (*c).clone()).collect();
    p.prepare(&fixture.request(), &mut fresh);
    fresh.iter().map(|c| c.attrs.latency.expect("predicted").decode_stall_ms).collect()
}

#[test]
fn decode_stall_is_the_idle_ttft_times_the_requests_decoding_there() {
    let hub = hub(true);
    let settings =
        ProducerSettings { streaming: true, predict_decode_stall: true, ..ProducerSettings::default() };
    let p = producer(&hub, settings);
    let mut fixture = RequestFixture::with_prompt("m", "hello");
    fixture.parsed.stream = true;
    for round in 0..40 {
        train_round(
            &p,
            &fixture,
            |c| if c.endpoint.labels["accelerator"] == "l4" { 900 } else { 300 },
            round,
        );
    }
    assert!(hub.retrain_now());
    let (h100, l4) = (labelled(1, "h100", 0), labelled(2, "l4", 0));
    assert_eq!(stalls(&p, &fixture, &[&h100, &l4]), [0.0, 0.0], "nothing decoding: nothing to stall");

    // Two requests decoding on the H100, one still prefilling on the L4 (it stalls no decode yet).
    let req = fixture.request();
    let mut dispatched = Vec::new();
    for (id, c) in [(1, &h100), (2, &h100), (3, &l4)] {
        let mut one = vec![c.clone()];
        p.prepare(&req, &mut one);
        let info = info_for(&one[0], id, req.now);
        p.pre_request(&req, &testing::result_for(std::slice::from_ref(&one[0].endpoint)), &info);
        if id != 3 {
            p.on_response_chunk(&info, b"data: x", true, req.now);
        }
        dispatched.push(info);
    }
    let two = stalls(&p, &fixture, &[&h100, &l4]);
    assert!(two[0] > 0.0 && two[1] == 0.0, "{two:?}");
    p.on_response_chunk(&dispatched[2], b"data: x", true, req.now);
    let mut third = vec![h100.clone()];
    p.prepare(&req, &mut third);
    let info = info_for(&third[0], 4, req.now);
    p.pre_request(&req, &testing::result_for(std::slice::from_ref(&h100.endpoint)), &info);
    p.on_response_chunk(&info, b"data: x", true, req.now);
    let three = stalls(&p, &fixture, &[&h100, &l4]);
    // The idle TTFT does not depend on the load, so the stall grows exactly with the decodes.
    assert!((three[0] - 1.5 * two[0]).abs() < 1e-6, "{two:?} -> {three:?}");
    assert!(three[1] > 0.0, "the L4's request is decoding now");
    for info in dispatched.iter().chain([&info]) {
        p.on_complete(info, &finished(Instant::now(), 10));
    }
    assert_eq!(stalls(&p, &fixture, &[&h100, &l4]), [0.0, 0.0], "completions release the decodes");

    let off = producer(&hub, ProducerSettings { streaming: true, ..ProducerSettings::default() });
    let mut c = vec![h100.clone()];
    off.prepare(&req, &mut c);
    assert_eq!(c[0].attrs.latency.expect("predicted").decode_stall_ms, 0.0, "off by default");
}

/// Dispatches one streamed request to each of two candidates, passes response headers with `status` (none
/// when `None`) and the first chunk, and leaves the answers running.
fn start_streams(p: &PredictedLatencyProducer, fixture: &RequestFixture, status: Option<u16>, round: u64) {
    let (now, dispatched) = dispatch_pair(p, fixture, round);
    for (k, (_, info)) in dispatched.iter().enumerate() {
        if status.is_some() {
            p.on_response_headers(info, status, None, &mut Vec::new());
        }
        p.on_response_chunk(info, b"data: x", true, now + Duration::from_millis(100 + 50 * k as u64));
    }
}

#[test]
fn ttft_trains_at_the_first_chunk_of_a_streamed_2xx_answer() {
    let streamed = |status: Option<u16>| {
        let hub = hub(true);
        let p = producer(&hub, ProducerSettings { streaming: true, ..ProducerSettings::default() });
        let mut fixture = RequestFixture::with_prompt("m", "hello");
        fixture.parsed.stream = true;
        for round in 0..40 {
            start_streams(&p, &fixture, status, round);
        }
        assert_eq!(p.tracked_requests(), 80, "every answer is still running");
        (hub.retrain_now(), p)
    };
    assert!(streamed(Some(200)).0, "80 TTFT rows arrived with the first chunks: a model is published");
    assert!(!streamed(Some(503)).0, "an error's first chunk teaches nothing");
    let (trained, p) = streamed(None);
    assert!(!trained, "status unknown: the TTFT row waits for the completion");
    // The completion then sends it, once, with the TPOT.
    let now = Instant::now() + Duration::from_secs(1);
    for round in 0..40u64 {
        for k in 0..2u64 {
            let c = labelled(k as u8 + 1, if k == 0 { "h100" } else { "l4" }, 0);
            let info = info_for(&c, round * 10 + k, now);
            p.on_complete(&info, &finished(now, 50));
        }
    }
    assert_eq!(p.tracked_requests(), 0);
}
