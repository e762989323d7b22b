//! `prefix-cache-scorer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go):
//! prefers endpoints believed to hold more of the request's prompt in their prefix cache, as reported by a
//! producer of [`DataKey::PrefixCacheMatch`].
//!
//! GIE takes no parameters and silently drops the producer's parameters that its docs show on this
//! scorer; here they are an error that says where they belong. llm-d-router's optional match-length term
//! is supported:
//!
//! ```text
//! score = mlw · min(1, matchedTokens / scale)² + (1 − mlw) · matchBlocks / totalBlocks
//! ```
//! with `matchLengthWeight` (mlw, default 0) and `matchLengthScaleTokens` (scale, default 8192). With the
//! defaults it is GIE's score. A missing match, or a request with no blocks, scores 0.

use std::sync::Arc;

use serde::Deserialize;

use super::prefix_hash::CHARS_PER_TOKEN;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, PluginError, PrefixMatch,
    SchedulingRequest, Scorer, ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "prefix-cache-scorer";

const DEFAULT_MATCH_LENGTH_SCALE_TOKENS: u64 = 8192;

/// Parameters of `approx-prefix-cache-producer` that users put on the scorer (GIE's docs show them there).
const PRODUCER_PARAMETERS: &[&str] = &[
    "autoTune",
    "blockSize",
    "blockSizeTokens",
    "maxPrefixBlocksToMatch",
    "maxPrefixTokensToMatch",
    "lruCapacityPerServer",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    match_length_weight: Option<f64>,
    match_length_scale_tokens: Option<u64>,
    /// llm-d's pointer to the producer whose match the scorer reads. epp's pipeline has one producer of
    /// the prefix match (the configured one, else the approximate default), so it names that one.
    #[allow(dead_code)]
    prefix_match_info_producer_name: Option<String>,
}

/// Scores the prefix-cache match ratio, optionally blended with the matched length.
#[derive(Debug, Clone, Copy)]
pub struct PrefixCacheScorer {
    match_length_weight: f64,
    match_length_scale_tokens: f64,
}

impl Default for PrefixCacheScorer {
    fn default() -> Self {
        Self { match_length_weight: 0.0, match_length_scale_tokens: DEFAULT_MATCH_LENGTH_SCALE_TOKENS as f64 }
    }
}

impl PrefixCacheScorer {
    /// `match_length_weight` in [0, 1]; `match_length_scale_tokens` > 0.
    pub fn new(match_length_weight: f64, match_length_scale_tokens: u64) -> Self {
        Self { match_length_weight, match_length_scale_tokens: match_length_scale_tokens as f64 }
    }

    fn score_one(&self, m: Option<&PrefixMatch>) -> f64 {
        let Some(m) = m else { return 0.0 };
        if m.total_blocks == 0 {
            return 0.0;
        }
        let ratio = m.ratio();
        if self.match_length_weight == 0.0 {
            return ratio;
        }
        let matched_tokens = (m.match_blocks * m.block_chars / CHARS_PER_TOKEN) as f64;
        let length = (matched_tokens / self.match_length_scale_tokens).min(1.0);
        self.match_length_weight * length * length + (1.0 - self.match_length_weight) * ratio
    }
}

impl Scorer for PrefixCacheScorer {
    fn category(&self) -> ScorerCategory {
        ScorerCategory::Affinity
    }

    fn score(
        &self,
        _: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        scores: &mut [f64],
    ) {
        for (score, &i) in scores.iter_mut().zip(subset) {
            *score = self.score_one(candidates[i].attrs.prefix.as_ref());
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    if let Some(serde_json::Value::Object(map)) = params {
        if let Some(key) = PRODUCER_PARAMETERS.iter().find(|k| map.contains_key(**k)) {
            return Err(PluginError::new(
                name,
                TYPE_NAME,
                format!(
                    "parameter `{key}` belongs to approx-prefix-cache-producer, not the scorer (the Go EPP \
                     silently ignores it here); declare an approx-prefix-cache-producer plugin with it"
                ),
            ));
        }
    }
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let weight = p.match_length_weight.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&weight) {
        return Err(PluginError::new(
            name,
            TYPE_NAME,
            format!("parameter `matchLengthWeight` must be in [0, 1], got {weight}"),
        ));
    }
    let scale = p.match_length_scale_tokens.unwrap_or(DEFAULT_MATCH_LENGTH_SCALE_TOKENS);
    if scale == 0 {
        return Err(PluginError::new(name, TYPE_NAME, "parameter `matchLengthScaleTokens` must be > 0"));
    }
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .scorer(Arc::new(PrefixCacheScorer::new(weight, scale)))
        .consumes(&[DataKey::PrefixCacheMatch]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::EndpointTelemetry;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn pm(match_blocks: usize, total_blocks: usize, block_chars: usize) -> Option<PrefixMatch> {
        Some(PrefixMatch { match_blocks, total_blocks, block_chars })
    }

    #[test]
    fn match_ratio_and_missing_attribute() {
        let mut c = vec![candidate(1, EndpointTelemetry::default()), candidate(2, Default::default())];
        c[0].attrs.prefix = pm(3, 4, 64);
        let mut s = vec![f64::NAN; 2];
        PrefixCacheScorer::default().score(&RequestFixture::empty().request(), &c, &[0, 1], &mut s);
        assert_eq!(s, vec![0.75, 0.0]);
        assert_eq!(PrefixCacheScorer::default().score_one(pm(0, 0, 64).as_ref()), 0.0);
    }

    #[test]
    fn match_length_term() {
        // 0.5 weight, scale 100 tokens; 2 of 4 blocks of 64 chars = 32 tokens matched.
        let s = PrefixCacheScorer::new(0.5, 100);
        let expected = 0.5 * 0.32f64.powi(2) + 0.5 * 0.5;
        assert!((s.score_one(pm(2, 4, 64).as_ref()) - expected).abs() < 1e-12);
        // The length term saturates at 1.
        let s = PrefixCacheScorer::new(1.0, 10);
        assert_eq!(s.score_one(pm(2, 4, 64).as_ref()), 1.0);
    }

    #[test]
    fn factory_validates_and_consumes_prefix_match() {
        let built =
            build(factory, json!({"matchLengthWeight": 0.2, "matchLengthScaleTokens": 4096})).unwrap();
        assert_eq!(built.consumes, vec![DataKey::PrefixCacheMatch]);
        assert_rejects(factory, json!({"matchLengthWeight": 1.5}), "matchLengthWeight");
        assert_rejects(factory, json!({"matchLengthScaleTokens": 0}), "matchLengthScaleTokens");
    }

    #[test]
    fn rejects_unknown_and_ill_typed_parameters() {
        assert_rejects(factory, json!({"matchLenghtWeight": 0.1}), "matchLenghtWeight");
        assert_rejects(factory, json!({"matchLengthWeight": "high"}), "matchLengthWeight");
    }

    #[test]
    fn producer_parameters_point_to_the_producer() {
        let e = build(factory, json!({"blockSizeTokens": 64})).unwrap_err();
        assert!(e.message.contains("blockSizeTokens"), "{e}");
        assert!(e.message.contains("approx-prefix-cache-producer"), "{e}");
    }
}
