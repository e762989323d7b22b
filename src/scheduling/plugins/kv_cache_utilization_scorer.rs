//! `kv-cache-utilization-scorer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/kvcache_utilization.go):
//! prefers endpoints with free KV cache.

use std::sync::Arc;

use super::expect_no_params;
use crate::scheduling::{
    BuiltPlugin, Candidate, FactoryContext, PluginError, SchedulingRequest, Scorer, ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "kv-cache-utilization-scorer";

/// `score = 1 − kv_cache_usage` (the framework clamps to [0, 1]).
#[derive(Debug, Default, Clone, Copy)]
pub struct KvCacheUtilizationScorer;

impl Scorer for KvCacheUtilizationScorer {
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
            *score = 1.0 - candidates[i].telemetry.kv_cache_usage;
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).scorer(Arc::new(KvCacheUtilizationScorer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    #[test]
    fn one_minus_usage() {
        let c = candidates_with(&[0.0, 0.25, 1.0], |m, kv| m.kv_cache_usage = kv);
        let mut s = vec![f64::NAN; 3];
        KvCacheUtilizationScorer.score(&RequestFixture::empty().request(), &c, &[0, 1, 2], &mut s);
        assert_eq!(s, vec![1.0, 0.75, 0.0]);
    }

    #[test]
    fn rejects_parameters() {
        assert_rejects(factory, json!({"kvCacheUtilThreshold": 0.8}), "kvCacheUtilThreshold");
        assert_rejects(factory, json!(5), "parameters");
    }
}
