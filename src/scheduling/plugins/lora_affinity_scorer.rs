//! `lora-affinity-scorer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go):
//! prefers endpoints that already run the requested LoRA adapter, then those with room to load it, then those
//! where it is queued.

use std::sync::Arc;

use super::expect_no_params;
use crate::datastore::EndpointTelemetry;
use crate::scheduling::{
    BuiltPlugin, Candidate, FactoryContext, PluginError, SchedulingRequest, Scorer, ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "lora-affinity-scorer";

/// The first rule that applies wins; capacity is checked before "waiting", as in GIE.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoraAffinityScorer;

fn lora_score(target: &str, m: &EndpointTelemetry) -> f64 {
    if m.active_models.contains(target) {
        1.0
    } else if m.active_models.len() + m.waiting_models.len() < m.max_active_models {
        0.8
    } else if m.waiting_models.contains(target) {
        0.6
    } else {
        0.0
    }
}

impl Scorer for LoraAffinityScorer {
    fn category(&self) -> ScorerCategory {
        ScorerCategory::Affinity
    }

    fn score(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        scores: &mut [f64],
    ) {
        for (score, &i) in scores.iter_mut().zip(subset) {
            *score = lora_score(req.target_model, &candidates[i].telemetry);
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).scorer(Arc::new(LoraAffinityScorer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn metrics(active: &[&str], waiting: &[&str], max: usize) -> EndpointTelemetry {
        EndpointTelemetry {
            active_models: active.iter().map(std::string::ToString::to_string).collect(),
            waiting_models: waiting.iter().map(std::string::ToString::to_string).collect(),
            max_active_models: max,
            ..Default::default()
        }
    }

    #[test]
    fn rules_in_order() {
        assert_eq!(lora_score("a", &metrics(&["a", "b"], &[], 2)), 1.0);
        assert_eq!(lora_score("a", &metrics(&["b"], &[], 2)), 0.8);
        // Capacity wins over "waiting".
        assert_eq!(lora_score("a", &metrics(&[], &["a"], 2)), 0.8);
        assert_eq!(lora_score("a", &metrics(&["b"], &["a"], 2)), 0.6);
        assert_eq!(lora_score("a", &metrics(&["b"], &["c"], 2)), 0.0);
        // max 0 and empty sets: 0 < 0 is false.
        assert_eq!(lora_score("a", &metrics(&[], &[], 0)), 0.0);
    }

    #[test]
    fn scores_use_the_target_model() {
        let mut f = RequestFixture::empty();
        f.model = "lora-x".into();
        let c = vec![candidate(1, metrics(&["lora-x"], &[], 1)), candidate(2, metrics(&["y"], &[], 1))];
        let mut s = vec![f64::NAN; 2];
        LoraAffinityScorer.score(&f.request(), &c, &[0, 1], &mut s);
        assert_eq!(s, vec![1.0, 0.0]);
    }

    #[test]
    fn rejects_parameters() {
        assert_rejects(factory, json!({"weight": 2}), "weight");
        assert_rejects(factory, json!([1]), "parameters");
    }
}
