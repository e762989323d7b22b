//! `running-requests-size-scorer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/scorer/runningrequests/runningrequest.go):
//! prefers endpoints running fewer requests, min-max normalised over the endpoints being scored.

use std::sync::Arc;

use super::{expect_no_params, min_max_scores};
use crate::scheduling::{
    BuiltPlugin, Candidate, FactoryContext, PluginError, SchedulingRequest, Scorer, ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "running-requests-size-scorer";

/// `score = (maxR − r) / (maxR − minR)`, or 1 when every endpoint runs the same number.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunningRequestsSizeScorer;

impl Scorer for RunningRequestsSizeScorer {
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
        min_max_scores(subset.iter().map(|&i| candidates[i].telemetry.running_requests), scores);
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).scorer(Arc::new(RunningRequestsSizeScorer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn scores(running: &[u64], subset: &[usize]) -> Vec<f64> {
        let c = candidates_with(running, |m, r| m.running_requests = r);
        let mut s = vec![f64::NAN; subset.len()];
        RunningRequestsSizeScorer.score(&RequestFixture::empty().request(), &c, subset, &mut s);
        s
    }

    #[test]
    fn min_max_over_running_requests() {
        assert_eq!(scores(&[0, 10, 5], &[0, 1, 2]), vec![1.0, 0.0, 0.5]);
        assert_eq!(scores(&[2, 6, 4], &[0, 1, 2]), vec![1.0, 0.0, 0.5]);
    }

    #[test]
    fn normalises_over_the_subset_only() {
        // Endpoint 0 (0 running) was filtered out: the range is 5..10.
        assert_eq!(scores(&[0, 10, 5], &[1, 2]), vec![0.0, 1.0]);
    }

    #[test]
    fn equal_counts_all_score_one() {
        assert_eq!(scores(&[3, 3], &[0, 1]), vec![1.0, 1.0]);
        assert_eq!(scores(&[7], &[0]), vec![1.0]);
    }

    #[test]
    fn rejects_parameters() {
        assert_rejects(factory, json!({"threshold": 1}), "threshold");
        assert_rejects(factory, json!("fast"), "parameters");
    }
}
