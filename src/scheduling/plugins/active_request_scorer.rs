//! `active-request-scorer`
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/scorer/activerequest/active_request.go):
//! prefers endpoints with fewer requests in flight from this EPP, as counted by `inflight-load-producer`
//! (added by default when none is declared). The P/D guide's decode profile picks with it: pure decode is
//! bound by concurrent requests, not by prefill throughput.
//!
//! ```text
//! score = 1                                     if requests ≤ idleThreshold
//! score = (max − requests) / max · maxBusyScore otherwise, max = the most requests on any candidate
//! ```
//!
//! Where llm-d logs and ignores an out-of-range `maxBusyScore` or a negative `idleThreshold`, epp refuses
//! them at startup. `requestTimeout`, deprecated and ignored upstream, is accepted with a warning.

use std::sync::Arc;

use serde::Deserialize;

use super::param_checks::{non_negative_int, unit_fraction};
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, PluginError, SchedulingRequest, Scorer,
    ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "active-request-scorer";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    idle_threshold: Option<i64>,
    max_busy_score: Option<f64>,
    request_timeout: Option<String>,
    /// llm-d names the producer whose counts it reads; epp has one in-flight producer per pipeline.
    in_flight_load_producer_name: Option<String>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct ActiveRequestScorer {
    idle_threshold: u64,
    max_busy_score: f64,
}

impl Scorer for ActiveRequestScorer {
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
        let requests = |i: usize| candidates[i].attrs.inflight.requests;
        let max = subset.iter().map(|&i| requests(i)).max().unwrap_or(0);
        for (score, &i) in scores.iter_mut().zip(subset) {
            let n = requests(i);
            *score = if u64::try_from(n).unwrap_or(0) <= self.idle_threshold || max <= 0 {
                1.0
            } else {
                (max - n) as f64 / max as f64 * self.max_busy_score
            };
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let idle_threshold =
        non_negative_int("idleThreshold", p.idle_threshold, 0).map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    let max_busy_score =
        unit_fraction("maxBusyScore", p.max_busy_score, 1.0).map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    if p.request_timeout.is_some() {
        tracing::warn!(plugin = name, "active-request-scorer: `requestTimeout` is deprecated and ignored");
    }
    if let Some(producer) = p.in_flight_load_producer_name {
        tracing::info!(plugin = name, producer, "active-request-scorer reads the pipeline's in-flight load");
    }
    let scorer = ActiveRequestScorer { idle_threshold, max_busy_score };
    Ok(BuiltPlugin::new(TYPE_NAME, name).scorer(Arc::new(scorer)).consumes(&[DataKey::InFlightLoad]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use crate::scheduling::InFlightLoad;
    use serde_json::json;

    fn scores(params: serde_json::Value, requests: &[i64]) -> Vec<f64> {
        let built = build(factory, params).unwrap();
        let mut c = candidates_with(requests, |_, _| {});
        for (c, &n) in c.iter_mut().zip(requests) {
            c.attrs.inflight = InFlightLoad { requests: n, tokens: 0 };
        }
        let subset: Vec<usize> = (0..c.len()).collect();
        let mut out = vec![0.0; c.len()];
        let f = RequestFixture::empty();
        built.scorer.unwrap().score(&f.request(), &c, &subset, &mut out);
        out
    }

    #[test]
    fn fewer_requests_score_higher() {
        assert_eq!(scores(json!({}), &[0, 2, 4]), [1.0, 0.5, 0.0]);
        assert_eq!(scores(json!({}), &[0, 0]), [1.0, 1.0]);
    }

    #[test]
    fn idle_endpoints_score_full_and_busy_ones_are_capped() {
        let s = scores(json!({"idleThreshold": 2, "maxBusyScore": 0.5}), &[2, 3, 6]);
        assert_eq!(s, [1.0, 0.25, 0.0]);
    }

    #[test]
    fn out_of_range_parameters_are_refused() {
        assert_rejects(factory, json!({"maxBusyScore": 1.5}), "maxBusyScore");
        assert_rejects(factory, json!({"idleThreshold": -1}), "idleThreshold");
        assert_rejects(factory, json!({"idleTreshold": 1}), "idleTreshold");
        assert!(build(factory, json!({"requestTimeout": "2m", "inFlightLoadProducerName": "x"})).is_ok());
    }
}
