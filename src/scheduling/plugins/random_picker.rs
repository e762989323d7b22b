//! `random-picker` (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/picker/): endpoints
//! chosen uniformly at random, ignoring scores.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use super::pick::{emit, max_num_of_endpoints};
use crate::scheduling::{BuiltPlugin, FactoryContext, Picker, PluginError, ScoredCandidate};

pub(crate) const TYPE_NAME: &str = "random-picker";

#[derive(Debug, Clone, Copy)]
pub struct RandomPicker {
    max_endpoints: usize,
}

impl RandomPicker {
    pub fn new(max_endpoints: usize) -> Self {
        Self { max_endpoints: max_endpoints.max(1) }
    }
}

/// Shuffles `scored` and takes the first `n`: the uniform choice both this picker and the weighted one
/// (when no endpoint has a positive score) make.
pub(crate) fn pick_uniform(
    scored: &mut [ScoredCandidate],
    n: usize,
    rng: &mut SmallRng,
    out: &mut Vec<usize>,
) {
    let n = n.min(scored.len());
    let (chosen, _) = scored.partial_shuffle(rng, n);
    emit(chosen, n, out);
}

impl Picker for RandomPicker {
    fn pick(&self, scored: &mut [ScoredCandidate], rng: &mut SmallRng, out: &mut Vec<usize>) {
        pick_uniform(scored, self.max_endpoints, rng, out);
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let n = max_num_of_endpoints(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).picker(Arc::new(RandomPicker::new(n))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    #[test]
    fn uniform_regardless_of_score() {
        let mut r = rng();
        let mut counts = [0u32; 4];
        for _ in 0..20_000 {
            let mut s: Vec<_> = [0.0, 1.0, 0.5, 0.9]
                .iter()
                .enumerate()
                .map(|(index, &score)| ScoredCandidate { index, score })
                .collect();
            let mut out = Vec::new();
            RandomPicker::new(1).pick(&mut s, &mut r, &mut out);
            counts[out[0]] += 1;
        }
        for c in counts {
            assert!((f64::from(c) / 20_000.0 - 0.25).abs() < 0.02, "{counts:?}");
        }
    }

    #[test]
    fn takes_n_distinct() {
        let mut s: Vec<_> = (0..5).map(|index| ScoredCandidate { index, score: 0.0 }).collect();
        let mut out = Vec::new();
        RandomPicker::new(3).pick(&mut s, &mut rng(), &mut out);
        out.sort();
        out.dedup();
        assert_eq!(out.len(), 3);
        out.clear();
        RandomPicker::new(9).pick(&mut s, &mut rng(), &mut out);
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn parameters() {
        assert_rejects(factory, json!({"maxNumOfEndpoints": -1}), "maxNumOfEndpoints");
        assert_rejects(factory, json!({"maxNumOfEndpoints": 1.5}), "maxNumOfEndpoints");
        assert_rejects(factory, json!({"seed": 1}), "seed");
    }
}
