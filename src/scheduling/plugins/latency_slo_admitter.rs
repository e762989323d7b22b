//! `latency-slo-admitter` (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/admitter/latencyslo/
//! plugin.go): sheds a sheddable request (priority < 0) with SLO headers when no endpoint is predicted
//! to meet its objectives — unless some endpoint is idle (nothing running) or cold (KV cache under 2%,
//! where predictions are least reliable), or there are no predictions at all (warm-up: fail open).
//!
//! The denial is a 429 with the reason, where GIE answers 500: the request was refused for load, which a
//! client should retry later, not a server fault.

use std::sync::Arc;

use serde::Deserialize;

use crate::scheduling::{
    parse_params, Admitter, BuiltPlugin, Candidate, DataKey, FactoryContext, PluginError, SchedulingRequest,
};

pub(crate) const TYPE_NAME: &str = "latency-slo-admitter";

/// The reason a shed request gets.
pub(crate) const REJECTION: &str = "no endpoint is predicted to meet the SLO";

/// Below this KV-cache utilisation an endpoint counts as cold (llm-d's 0.02).
const COLD_KV: f64 = 0.02;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    /// Which producer's predictions to read; epp has one predictor per pipeline, so any name is accepted.
    #[allow(dead_code)]
    producer_name: Option<String>,
    #[allow(dead_code)]
    predicted_latency_producer_name: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct LatencySloAdmitter;

impl Admitter for LatencySloAdmitter {
    fn admit(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate]) -> Result<(), String> {
        if req.priority >= 0 || !req.slo.any() {
            return Ok(());
        }
        let (mut predicted, mut valid, mut idle, mut cold) = (false, false, false, false);
        for c in candidates {
            cold |= c.telemetry.kv_cache_usage < COLD_KV;
            idle |= c.telemetry.running_requests == 0;
            if let Some(l) = &c.attrs.latency {
                predicted = true;
                valid |= l.is_valid();
            }
        }
        if !predicted || valid || idle || cold {
            return Ok(());
        }
        Err(REJECTION.to_string())
    }

    fn denial_is_load(&self) -> bool {
        true
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let _: Params = parse_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .admitter(Arc::new(LatencySloAdmitter))
        .consumes(&[DataKey::LatencyPrediction]))
}
