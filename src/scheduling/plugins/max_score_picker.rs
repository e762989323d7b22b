//! `max-score-picker` (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/picker/): the
//! highest-scoring endpoints, ties broken at random.
//!
//! GIE shuffles, then stable-sorts by score descending and takes the top N. Here the shuffle is followed
//! by a linear top-N selection, which picks the same distribution (uniform among ties) without sorting
//! the whole pool.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use super::pick::{emit, max_num_of_endpoints, top_n_desc};
use crate::scheduling::{BuiltPlugin, FactoryContext, Picker, PluginError, ScoredCandidate};

pub(crate) const TYPE_NAME: &str = "max-score-picker";

#[derive(Debug, Clone, Copy)]
pub struct MaxScorePicker {
    max_endpoints: usize,
}

impl MaxScorePicker {
    /// Takes the best `max_endpoints` (at least 1).
    pub fn new(max_endpoints: usize) -> Self {
        Self { max_endpoints: max_endpoints.max(1) }
    }
}

impl Picker for MaxScorePicker {
    fn pick(&self, scored: &mut [ScoredCandidate], rng: &mut SmallRng, out: &mut Vec<usize>) {
        scored.shuffle(rng);
        let n = top_n_desc(scored, self.max_endpoints, |s| s.score);
        emit(scored, n, out);
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let n = max_num_of_endpoints(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).picker(Arc::new(MaxScorePicker::new(n))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn scored(scores: &[f64]) -> Vec<ScoredCandidate> {
        scores.iter().enumerate().map(|(index, &score)| ScoredCandidate { index, score }).collect()
    }

    #[test]
    fn picks_highest_scores_in_order() {
        let mut out = Vec::new();
        MaxScorePicker::new(2).pick(&mut scored(&[0.1, 0.9, 0.5, 0.7]), &mut rng(), &mut out);
        assert_eq!(out, vec![1, 3]);
        out.clear();
        MaxScorePicker::new(10).pick(&mut scored(&[0.1, 0.9]), &mut rng(), &mut out);
        assert_eq!(out, vec![1, 0]);
    }

    #[test]
    fn ties_are_broken_uniformly() {
        let mut r = rng();
        let mut counts = [0u32; 4];
        for _ in 0..20_000 {
            let mut out = Vec::new();
            MaxScorePicker::new(1).pick(&mut scored(&[1.0, 1.0, 1.0, 0.2]), &mut r, &mut out);
            counts[out[0]] += 1;
        }
        assert_eq!(counts[3], 0);
        for c in &counts[..3] {
            assert!((f64::from(*c) / 20_000.0 - 1.0 / 3.0).abs() < 0.02, "{counts:?}");
        }
    }

    #[test]
    fn parameters() {
        assert!(build(factory, json!({"maxNumOfEndpoints": 3})).is_ok());
        assert_rejects(factory, json!({"maxNumOfEndpoints": 0}), "maxNumOfEndpoints");
        assert_rejects(factory, json!({"maxNumOfEndpoints": "two"}), "maxNumOfEndpoints");
        assert_rejects(factory, json!({"maxEndpoints": 2}), "maxEndpoints");
    }
}
