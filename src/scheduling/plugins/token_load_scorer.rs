//! `token-load-scorer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/scorer/tokenload/token_load.go):
//! prefers endpoints with fewer tokens in flight from this EPP, as counted by `inflight-load-producer`.
//!
//! ```text
//! score = 1                       if load ≤ 0
//! score = 1 − min(load, T) / T    otherwise, T = queueThresholdTokens (default 4194304)
//! ```

use std::sync::Arc;

use serde::Deserialize;

use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, PluginError, SchedulingRequest, Scorer,
    ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "token-load-scorer";

/// "128 requests @ 32K" tokens.
pub(crate) const DEFAULT_QUEUE_THRESHOLD_TOKENS: i64 = 4_194_304;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    queue_threshold_tokens: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
pub struct TokenLoadScorer {
    threshold_tokens: i64,
}

impl TokenLoadScorer {
    /// `threshold_tokens` must be > 0.
    pub fn new(threshold_tokens: i64) -> Self {
        Self { threshold_tokens: threshold_tokens.max(1) }
    }

    fn score_one(&self, load: i64) -> f64 {
        if load <= 0 {
            return 1.0;
        }
        let t = self.threshold_tokens as f64;
        1.0 - (load as f64).min(t) / t
    }
}

impl Scorer for TokenLoadScorer {
    fn category(&self) -> ScorerCategory {
        ScorerCategory::Distribution
    }

    fn score(
        &self,
        _: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        scores: &mut [f64],
    ) {
        for (score, &i) in scores.iter_mut().zip(subset) {
            *score = self.score_one(candidates[i].attrs.inflight.tokens);
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let threshold = p.queue_threshold_tokens.unwrap_or(DEFAULT_QUEUE_THRESHOLD_TOKENS);
    if threshold <= 0 {
        return Err(PluginError::new(
            name,
            TYPE_NAME,
            format!("parameter `queueThresholdTokens` must be > 0, got {threshold}"),
        ));
    }
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .scorer(Arc::new(TokenLoadScorer::new(threshold)))
        .consumes(&[DataKey::InFlightLoad]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::EndpointTelemetry;
    use crate::scheduling::plugins::testing::*;
    use crate::scheduling::InFlightLoad;
    use serde_json::json;

    #[test]
    fn formula() {
        let s = TokenLoadScorer::new(1000);
        assert_eq!(s.score_one(0), 1.0);
        assert_eq!(s.score_one(-5), 1.0);
        assert_eq!(s.score_one(250), 0.75);
        assert_eq!(s.score_one(1000), 0.0);
        assert_eq!(s.score_one(5000), 0.0);
    }

    #[test]
    fn reads_inflight_tokens() {
        let mut c = vec![candidate(1, EndpointTelemetry::default()), candidate(2, Default::default())];
        c[1].attrs.inflight = InFlightLoad { requests: 3, tokens: 2_097_152 };
        let mut s = vec![f64::NAN; 2];
        let built = factory("t", None, &ctx()).unwrap();
        assert_eq!(built.consumes, vec![DataKey::InFlightLoad]);
        built.scorer.unwrap().score(&RequestFixture::empty().request(), &c, &[0, 1], &mut s);
        assert_eq!(s, vec![1.0, 0.5]);
    }

    #[test]
    fn parameters() {
        assert!(build(factory, json!({"queueThresholdTokens": 10})).is_ok());
        assert_rejects(factory, json!({"queueThresholdTokens": 0}), "queueThresholdTokens");
        assert_rejects(factory, json!({"queueThresholdTokens": "big"}), "queueThresholdTokens");
        assert_rejects(factory, json!({"queueTresholdTokens": 10}), "queueTresholdTokens");
    }
}
