//! `slo-headroom-tier-filter` (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/filter/
//! sloheadroomtier/plugin.go): keeps the endpoints predicted to meet both objectives (the positive tier),
//! and with probability `epsilonExploreNeg` (default 0.01) the others instead, so endpoints that look
//! too slow still get the occasional request that shows whether they still are.
//!
//! Endpoints without a prediction count as negative; with no prediction at all (warm-up) or only one
//! tier present, the filter keeps what there is. Without SLO headers every endpoint is negative (its
//! headroom is minus its prediction), so the filter does nothing. The draw comes from the request id
//! (see `request_hash`), which keeps the filter pure.

use std::sync::Arc;

use serde::Deserialize;

use super::param_checks::unit_fraction;
use super::request_hash::uniform;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, Filter, PluginError, SchedulingRequest,
};

pub(crate) const TYPE_NAME: &str = "slo-headroom-tier-filter";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    epsilon_explore_neg: Option<f64>,
}

#[derive(Debug)]
pub(crate) struct SloHeadroomTierFilter {
    name: String,
    epsilon: f64,
}

impl SloHeadroomTierFilter {
    pub(crate) fn new(name: &str, epsilon: f64) -> Self {
        Self { name: name.to_string(), epsilon }
    }
}

/// Predicted to meet both objectives.
pub(crate) fn positive(c: &Candidate) -> bool {
    c.attrs.latency.is_some_and(|l| l.ttft_headroom_ms >= 0.0 && l.tpot_headroom_ms >= 0.0)
}

impl Filter for SloHeadroomTierFilter {
    fn filter(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        if !kept.iter().any(|&i| candidates[i].attrs.latency.is_some()) {
            return;
        }
        let positives = kept.iter().filter(|&&i| positive(&candidates[i])).count();
        if positives == 0 || positives == kept.len() {
            return;
        }
        let keep_positive = uniform(req.request_id, &self.name) >= self.epsilon;
        kept.retain(|&i| positive(&candidates[i]) == keep_positive);
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let epsilon = unit_fraction("epsilonExploreNeg", p.epsilon_explore_neg, 0.01)
        .map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .filter(Arc::new(SloHeadroomTierFilter::new(name, epsilon)))
        .consumes(&[DataKey::LatencyPrediction]))
}
