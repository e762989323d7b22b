//! Fake plugin factories standing in for the built-ins: each fills the roles of the real plugin of the
//! same type name and decodes its parameters strictly, so the loader can be tested on its own.

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use serde::Deserialize;

use crate::datastore::{Datastore, Endpoint};
use crate::flowcontrol::SaturationDetector;
use crate::scheduling::types::ProfileRunResult;
use crate::scheduling::PluginMetrics;
use crate::scheduling::{
    parse_params, Admitter, BuiltPlugin, Candidate, DataKey, DataProducer, DispatchInfo, EndpointListener,
    FactoryContext, Filter, Picker, PluginError, PreRequest, ProfileCycle, ProfileHandler, Registry,
    ResponseHook, SchedulingRequest, SchedulingResult, ScoredCandidate, Scorer, ScorerCategory,
};

pub(super) fn ctx() -> FactoryContext {
    FactoryContext::new(Arc::new(Datastore::new("test")), PluginMetrics::detached())
}

struct FakeDetector;
impl SaturationDetector for FakeDetector {
    fn saturation(&self, _: &[Candidate], _: Instant) -> f64 {
        0.5
    }
}

struct FakeFilter;
impl Filter for FakeFilter {
    fn filter(&self, _: &SchedulingRequest<'_>, _: &[Candidate], _: &mut Vec<usize>) {}
}

struct FakeScorer;
impl Scorer for FakeScorer {
    fn category(&self) -> ScorerCategory {
        ScorerCategory::Distribution
    }
    fn score(&self, _: &SchedulingRequest<'_>, _: &[Candidate], _: &[usize], scores: &mut [f64]) {
        scores.fill(0.5);
    }
}

struct FakePicker;
impl Picker for FakePicker {
    fn pick(&self, scored: &mut [ScoredCandidate], _: &mut SmallRng, out: &mut Vec<usize>) {
        out.extend(scored.first().map(|s| s.index));
    }
}

struct FakeHandler;
impl ProfileHandler for FakeHandler {
    fn pick_profiles(&self, _: &SchedulingRequest<'_>, cycle: &ProfileCycle<'_>) -> Vec<String> {
        if cycle.done.is_empty() {
            cycle.profiles.to_vec()
        } else {
            Vec::new()
        }
    }
    fn primary_profile(&self, results: &[(String, ProfileRunResult)]) -> Result<String, String> {
        results.first().map(|(n, _)| n.clone()).ok_or_else(|| "no result".to_string())
    }
}

struct FakeProducer {
    produces: &'static [DataKey],
    consumes: &'static [DataKey],
}
impl DataProducer for FakeProducer {
    fn produces(&self) -> &'static [DataKey] {
        self.produces
    }
    fn consumes(&self) -> &'static [DataKey] {
        self.consumes
    }
    fn prepare(&self, _: &SchedulingRequest<'_>, _: &mut [Candidate]) {}
}

struct FakeHook;
impl PreRequest for FakeHook {
    fn pre_request(&self, _: &SchedulingRequest<'_>, _: &SchedulingResult, _: &DispatchInfo) {}
}
impl ResponseHook for FakeHook {}
impl EndpointListener for FakeHook {
    fn on_endpoints_removed(&self, _: &[Arc<Endpoint>]) {}
}
impl Admitter for FakeHook {
    fn admit(&self, _: &SchedulingRequest<'_>, _: &[Candidate]) -> Result<(), String> {
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PrefixScorerParams {
    #[allow(dead_code)]
    prefix_match_info_producer_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PickerParams {
    #[allow(dead_code)]
    max_num_of_endpoints: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PrefixProducerParams {
    block_size_tokens: Option<u32>,
    max_prefix_blocks_to_match: Option<u32>,
    max_prefix_tokens_to_match: Option<u32>,
    lru_capacity_per_server: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct DetectorParams {
    queue_depth_threshold: Option<u32>,
    kv_cache_util_threshold: Option<f64>,
    metrics_staleness_threshold: Option<String>,
    headroom: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ConcurrencyParams {
    concurrency_mode: Option<String>,
    max_concurrency: Option<i64>,
    max_token_concurrency: Option<i64>,
    headroom: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct TokenLoadParams {
    queue_threshold_tokens: Option<u64>,
}

type Params<'a> = Option<&'a serde_json::Value>;

/// Defines a factory `$fn` for type `$type` decoding `$params`, with the roles set by `$build`.
macro_rules! fake {
    ($fn:ident, $type:literal, $params:ty, |$p:ident| $build:expr) => {
        fn $fn(name: &str, params: Params<'_>, _: &FactoryContext) -> Result<BuiltPlugin, PluginError> {
            parse_params::<$params>(name, $type, params)?;
            let $p = BuiltPlugin::new($type, name);
            Ok($build)
        }
    };
}

const PREFIX: &[DataKey] = &[DataKey::PrefixCacheMatch];
const INFLIGHT: &[DataKey] = &[DataKey::InFlightLoad];

fake!(queue_scorer, "queue-scorer", NoParams, |p| p.scorer(Arc::new(FakeScorer)));
fake!(kv_scorer, "kv-cache-utilization-scorer", NoParams, |p| p.scorer(Arc::new(FakeScorer)));
fake!(lora_scorer, "lora-affinity-scorer", NoParams, |p| p.scorer(Arc::new(FakeScorer)));
fake!(prefix_scorer, "prefix-cache-scorer", PrefixScorerParams, |p| p
    .scorer(Arc::new(FakeScorer))
    .consumes(PREFIX));
fake!(token_load_scorer, "token-load-scorer", TokenLoadParams, |p| p
    .scorer(Arc::new(FakeScorer))
    .consumes(INFLIGHT));
fake!(max_score_picker, "max-score-picker", PickerParams, |p| p.picker(Arc::new(FakePicker)));
fake!(random_picker, "random-picker", PickerParams, |p| p.picker(Arc::new(FakePicker)));
fake!(weighted_random_picker, "weighted-random-picker", PickerParams, |p| p.picker(Arc::new(FakePicker)));
fake!(single_handler, "single-profile-handler", NoParams, |p| p.profile_handler(Arc::new(FakeHandler)));
fake!(pd_handler, "pd-profile-handler", NoParams, |p| p.profile_handler(Arc::new(FakeHandler)));
fake!(prefix_producer, "approx-prefix-cache-producer", PrefixProducerParams, |p| p
    .producer(Arc::new(FakeProducer { produces: PREFIX, consumes: &[] }))
    .pre_request(Arc::new(FakeHook)));
fake!(inflight_producer, "inflight-load-producer", NoParams, |p| p
    .producer(Arc::new(FakeProducer { produces: INFLIGHT, consumes: &[] }))
    .pre_request(Arc::new(FakeHook))
    .response(Arc::new(FakeHook))
    .endpoint_listener(Arc::new(FakeHook)));
// Produces InFlightLoad from PrefixCacheMatch: must run after approx-prefix-cache-producer.
fake!(derived_producer, "derived-producer", NoParams, |p| p
    .producer(Arc::new(FakeProducer { produces: INFLIGHT, consumes: PREFIX })));
// With derived-producer, a cycle.
fake!(cyclic_producer, "cyclic-producer", NoParams, |p| p
    .producer(Arc::new(FakeProducer { produces: PREFIX, consumes: INFLIGHT })));
fake!(header_filter, "header-based-testing-filter", NoParams, |p| p.filter(Arc::new(FakeFilter)));
fake!(served_verifier, "destination-endpoint-served-verifier", NoParams, |p| p.response(Arc::new(FakeHook)));
fake!(utilization_detector, "utilization-detector", DetectorParams, |p| p
    .filter(Arc::new(FakeFilter))
    .saturation_detector(Arc::new(FakeDetector)));
fake!(concurrency_detector, "concurrency-detector", ConcurrencyParams, |p| p
    .filter(Arc::new(FakeFilter))
    .saturation_detector(Arc::new(FakeDetector))
    .pre_request(Arc::new(FakeHook))
    .response(Arc::new(FakeHook))
    .endpoint_listener(Arc::new(FakeHook)));
fake!(admitter, "test-admitter", NoParams, |p| p.admitter(Arc::new(FakeHook)));
fake!(filter_scorer, "filter-scorer", NoParams, |p| p
    .filter(Arc::new(FakeFilter))
    .scorer(Arc::new(FakeScorer)));
fake!(inert, "inert-plugin", NoParams, |p| p);

/// A registry with every fake.
pub(super) fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("queue-scorer", queue_scorer);
    r.register("kv-cache-utilization-scorer", kv_scorer);
    r.register("lora-affinity-scorer", lora_scorer);
    r.register("prefix-cache-scorer", prefix_scorer);
    r.register("token-load-scorer", token_load_scorer);
    r.register("max-score-picker", max_score_picker);
    r.register("random-picker", random_picker);
    r.register("weighted-random-picker", weighted_random_picker);
    r.register("single-profile-handler", single_handler);
    r.register("approx-prefix-cache-producer", prefix_producer);
    r.register("inflight-load-producer", inflight_producer);
    r.register("derived-producer", derived_producer);
    r.register("cyclic-producer", cyclic_producer);
    r.register("header-based-testing-filter", header_filter);
    r.register("destination-endpoint-served-verifier", served_verifier);
    // The predicted-latency plugins are registered for real: they are pure and cheap to build.
    use crate::scheduling::plugins::{
        latency_scorer, latency_slo_admitter, precise_prefix_cache_producer, predicted_latency,
        prefix_cache_affinity_filter, slo_headroom_tier_filter, token_producer,
    };
    // So are the precise prefix plugins outside a runtime (no subscribers start).
    r.register(precise_prefix_cache_producer::TYPE_NAME, precise_prefix_cache_producer::factory);
    r.register(token_producer::TYPE_NAME, token_producer::factory);
    r.register(prefix_cache_affinity_filter::TYPE_NAME, prefix_cache_affinity_filter::factory);
    r.register(predicted_latency::TYPE_NAME, predicted_latency::factory);
    r.register(slo_headroom_tier_filter::TYPE_NAME, slo_headroom_tier_filter::factory);
    r.register(latency_scorer::TYPE_NAME, latency_scorer::factory);
    r.register(latency_slo_admitter::TYPE_NAME, latency_slo_admitter::factory);
    crate::scheduling::plugins::register_disaggregation(&mut r);
    // After the real P/D plugins: the loader tests use a fake multi-profile handler under this name.
    r.register("pd-profile-handler", pd_handler);
    r.register("utilization-detector", utilization_detector);
    r.register("concurrency-detector", concurrency_detector);
    r.register("test-admitter", admitter);
    r.register("filter-scorer", filter_scorer);
    r.register("inert-plugin", inert);
    r
}
