//! The built-in plugins, one per file, each registered under its upstream type name.
//!
//! Every factory decodes its `parameters` strictly through [`parse_params`](super::parse_params): an
//! unknown or ill-typed parameter is a startup error naming the plugin and the field, where the Go EPP
//! silently ignores it. Plugins that take no parameters still reject any they are given.
//!
//! Formulas follow `kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/` (GIE
//! behaviour unless a plugin's doc says llm-d-router).

use serde::Deserialize;

use super::registry::{parse_params, PluginError, Registry};

pub(crate) mod active_request_scorer;
pub(crate) mod approx_prefix_cache_producer;
pub(crate) mod cold_prefix_affinity_scorer;
pub(crate) mod concurrency_capacity;
pub(crate) mod concurrency_detector;
pub(crate) mod destination_endpoint_served_verifier;
pub mod disagg;
pub(crate) mod header_based_testing_filter;
pub(crate) mod inflight_load_producer;
pub(crate) mod kv_cache_utilization_scorer;
pub(crate) mod label_selector_filter;
pub(crate) mod latency_scorer;
pub(crate) mod latency_slo_admitter;
pub(crate) mod lora_affinity_scorer;
pub(crate) mod max_score_picker;
pub(crate) mod precise_prefix_cache_producer;
pub(crate) mod predicted_latency;
pub(crate) mod prefix_cache_affinity_filter;
pub(crate) mod prefix_cache_scorer;
pub(crate) mod prefix_hash;
mod prefix_index;
pub(crate) mod queue_scorer;
pub(crate) mod random_picker;
pub(crate) mod role_filters;
pub(crate) mod running_requests_size_scorer;
pub(crate) mod single_profile_handler;
pub(crate) mod slo_headroom_tier_filter;
pub(crate) mod token_load_scorer;
pub(crate) mod token_producer;
pub(crate) mod utilization_detector;
pub(crate) mod weighted_random_picker;

mod endpoint_key;
mod param_checks;
mod pick;
mod request_hash;

#[cfg(test)]
mod default_profile_tests;
#[cfg(test)]
pub(crate) mod testing;

pub use approx_prefix_cache_producer::{ApproxPrefixCacheConfig, ApproxPrefixCacheProducer};
pub use concurrency_detector::{
    Capacity, CapacityOverride, ConcurrencyConfig, ConcurrencyDetector, ConcurrencyMode,
};
pub use destination_endpoint_served_verifier::DestinationEndpointServedVerifier;
pub use header_based_testing_filter::HeaderBasedTestingFilter;
pub use inflight_load_producer::{InFlightLoadProducer, TokenBasis};
pub use kv_cache_utilization_scorer::KvCacheUtilizationScorer;
pub use lora_affinity_scorer::LoraAffinityScorer;
pub use max_score_picker::MaxScorePicker;
pub use param_checks::InvalidParameter;
pub use predicted_latency::{PredictedLatencyProducer, ProducerSettings};
pub use prefix_cache_scorer::PrefixCacheScorer;
pub use prefix_hash::{prefix_block_hashes, CHARS_PER_TOKEN};
pub use queue_scorer::QueueScorer;
pub use random_picker::RandomPicker;
pub use running_requests_size_scorer::RunningRequestsSizeScorer;
pub use single_profile_handler::SingleProfileHandler;
pub use token_load_scorer::TokenLoadScorer;
pub use utilization_detector::{UtilizationConfig, UtilizationDetector};
pub use weighted_random_picker::WeightedRandomPicker;

impl Registry {
    /// A registry holding every built-in plugin type. Defined beside the plugins (not in `registry`) so
    /// the registry stays a contract the plugins build on, without knowing them.
    pub fn with_builtins() -> Self {
        let mut r = Self::new();
        register_all(&mut r);
        r
    }
}

/// Registers every built-in plugin type.
pub fn register_all(registry: &mut Registry) {
    registry.register(queue_scorer::TYPE_NAME, queue_scorer::factory);
    registry.register(cold_prefix_affinity_scorer::TYPE_NAME, cold_prefix_affinity_scorer::factory);
    registry.register(running_requests_size_scorer::TYPE_NAME, running_requests_size_scorer::factory);
    registry.register(kv_cache_utilization_scorer::TYPE_NAME, kv_cache_utilization_scorer::factory);
    registry.register(lora_affinity_scorer::TYPE_NAME, lora_affinity_scorer::factory);
    registry.register(prefix_cache_scorer::TYPE_NAME, prefix_cache_scorer::factory);
    registry.register(approx_prefix_cache_producer::TYPE_NAME, approx_prefix_cache_producer::factory);
    registry.register(precise_prefix_cache_producer::TYPE_NAME, precise_prefix_cache_producer::factory);
    registry.register(token_producer::TYPE_NAME, token_producer::factory);
    registry.register(inflight_load_producer::TYPE_NAME, inflight_load_producer::factory);
    registry.register(token_load_scorer::TYPE_NAME, token_load_scorer::factory);
    registry.register(max_score_picker::TYPE_NAME, max_score_picker::factory);
    registry.register(random_picker::TYPE_NAME, random_picker::factory);
    registry.register(weighted_random_picker::TYPE_NAME, weighted_random_picker::factory);
    registry.register(single_profile_handler::TYPE_NAME, single_profile_handler::factory);
    registry.register(header_based_testing_filter::TYPE_NAME, header_based_testing_filter::factory);
    registry.register(
        destination_endpoint_served_verifier::TYPE_NAME,
        destination_endpoint_served_verifier::factory,
    );
    registry.register(utilization_detector::TYPE_NAME, utilization_detector::factory);
    registry.register(concurrency_detector::TYPE_NAME, concurrency_detector::factory);
    registry.register(predicted_latency::TYPE_NAME, predicted_latency::factory);
    registry.register(prefix_cache_affinity_filter::TYPE_NAME, prefix_cache_affinity_filter::factory);
    registry.register(slo_headroom_tier_filter::TYPE_NAME, slo_headroom_tier_filter::factory);
    registry.register(latency_scorer::TYPE_NAME, latency_scorer::factory);
    registry.register(latency_slo_admitter::TYPE_NAME, latency_slo_admitter::factory);
    register_disaggregation(registry);
}

/// P/D: the handler, its deciders, the role and label filters, and the decode profile's scorer.
pub(crate) fn register_disaggregation(registry: &mut Registry) {
    registry.register(disagg::TYPE_NAME, disagg::factory);
    registry.register(disagg::PREFIX_BASED, disagg::prefix_based_factory);
    registry.register(disagg::ALWAYS, disagg::always_factory);
    registry.register(disagg::MULTIMODAL, disagg::multimodal_factory);
    registry.register(disagg::LEGACY_PD, disagg::legacy_pd_factory);
    registry.register(disagg::LEGACY_HEADER_HANDLERS[0], disagg::prefill_header_handler_factory);
    registry.register(disagg::LEGACY_HEADER_HANDLERS[1], disagg::disagg_headers_handler_factory);
    registry.register(role_filters::PREFILL, role_filters::prefill_factory);
    registry.register(role_filters::DECODE, role_filters::decode_factory);
    registry.register(role_filters::ENCODE, role_filters::encode_factory);
    registry.register(label_selector_filter::TYPE_NAME, label_selector_filter::factory);
    registry.register(
        label_selector_filter::DEPRECATED_SELECTOR,
        label_selector_filter::deprecated_selector_factory,
    );
    registry.register(
        label_selector_filter::DEPRECATED_BY_LABEL,
        label_selector_filter::deprecated_by_label_factory,
    );
    registry.register(active_request_scorer::TYPE_NAME, active_request_scorer::factory);
}

/// The parameters of a plugin that takes none: decoding it rejects every key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

/// Checks that a parameterless plugin was given no parameters.
fn expect_no_params(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Result<(), PluginError> {
    parse_params::<NoParams>(name, type_name, params).map(|_| ())
}

/// Min-max normalisation used by the queue and running-requests scorers: the smallest value scores 1,
/// the largest 0, and when every value is equal every endpoint scores 1.
fn min_max_scores(values: impl Iterator<Item = u64> + Clone, scores: &mut [f64]) {
    let (min, max) = values.clone().fold((u64::MAX, 0u64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    for (score, v) in scores.iter_mut().zip(values) {
        *score = if max == min { 1.0 } else { (max - v) as f64 / (max - min) as f64 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_max_normalises_and_handles_ties() {
        let mut s = [0.0; 3];
        min_max_scores([0u64, 5, 10].into_iter(), &mut s);
        assert_eq!(s, [1.0, 0.5, 0.0]);
        min_max_scores([4u64, 4, 4].into_iter(), &mut s);
        assert_eq!(s, [1.0, 1.0, 1.0]);
    }

    #[test]
    fn registry_holds_every_builtin() {
        let r = Registry::with_builtins();
        let names: Vec<_> = r.type_names().collect();
        for t in [
            "queue-scorer",
            "running-requests-size-scorer",
            "kv-cache-utilization-scorer",
            "lora-affinity-scorer",
            "prefix-cache-scorer",
            "approx-prefix-cache-producer",
            "inflight-load-producer",
            "token-load-scorer",
            "max-score-picker",
            "random-picker",
            "weighted-random-picker",
            "single-profile-handler",
            "header-based-testing-filter",
            "destination-endpoint-served-verifier",
            "utilization-detector",
            "concurrency-detector",
            "predicted-latency-producer",
            "prefix-cache-affinity-filter",
            "slo-headroom-tier-filter",
            "latency-scorer",
            "latency-slo-admitter",
            "disagg-profile-handler",
            "prefix-based-pd-decider",
            "always-disagg-pd-decider",
            "prefill-filter",
            "decode-filter",
            "encode-filter",
            "label-selector-filter",
            "active-request-scorer",
        ] {
            assert!(names.contains(&t), "{t} missing");
        }
    }

    #[test]
    fn every_builtin_builds_with_no_parameters() {
        let r = Registry::with_builtins();
        let ctx = testing::ctx();
        // The deprecated `by-label` filter has a required parameter, as upstream.
        for t in r.type_names().filter(|t| *t != label_selector_filter::DEPRECATED_BY_LABEL) {
            let factory = r.get(t).unwrap();
            let built = factory(t, None, &ctx).unwrap_or_else(|e| panic!("{t}: {e}"));
            assert_eq!(built.id.type_name, t);
            assert_eq!(built.id.name, t);
        }
    }
}
