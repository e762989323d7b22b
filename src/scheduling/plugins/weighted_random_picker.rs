//! `weighted-random-picker` (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/picker/): sampling
//! without replacement in proportion to score, by A-Res (Efraimidis–Spirakis):
//!
//! ```text
//! key_i = U_i ^ (1 / w_i)   if w_i > 0   (U_i ~ Uniform[0,1), U_i == 0 → 1e-10)
//! key_i = 0                 if w_i ≤ 0
//! take the top N keys; if every score ≤ 0, pick uniformly (as random-picker)
//! ```
//! Endpoints with a non-positive score are only chosen after every positive one, in input order.

use std::cell::RefCell;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::Rng;

use super::pick::{max_num_of_endpoints, top_n_desc};
use super::random_picker::pick_uniform;
use crate::scheduling::{BuiltPlugin, FactoryContext, Picker, PluginError, ScoredCandidate};

pub(crate) const TYPE_NAME: &str = "weighted-random-picker";

thread_local! {
    /// (key, candidate index) per endpoint, reused across requests.
    static KEYS: RefCell<Vec<(f64, usize)>> = const { RefCell::new(Vec::new()) };
}

#[derive(Debug, Clone, Copy)]
pub struct WeightedRandomPicker {
    max_endpoints: usize,
}

impl WeightedRandomPicker {
    pub fn new(max_endpoints: usize) -> Self {
        Self { max_endpoints: max_endpoints.max(1) }
    }
}

/// The A-Res key of an endpoint with weight `w`, given a uniform draw `u` in [0, 1).
fn ares_key(w: f64, u: f64) -> f64 {
    if w > 0.0 {
        let u = if u == 0.0 { 1e-10 } else { u };
        u.powf(1.0 / w)
    } else {
        0.0
    }
}

impl Picker for WeightedRandomPicker {
    fn pick(&self, scored: &mut [ScoredCandidate], rng: &mut SmallRng, out: &mut Vec<usize>) {
        if !scored.iter().any(|s| s.score > 0.0) {
            pick_uniform(scored, self.max_endpoints, rng, out);
            return;
        }
        KEYS.with(|keys| {
            let mut keys = keys.borrow_mut();
            keys.clear();
            keys.extend(scored.iter().map(|s| {
                // No draw for non-positive (or NaN) weights: their key is 0 whatever U is.
                let key = if s.score > 0.0 { ares_key(s.score, rng.random::<f64>()) } else { 0.0 };
                (key, s.index)
            }));
            let n = top_n_desc(&mut keys, self.max_endpoints, |k| k.0);
            out.extend(keys[..n].iter().map(|k| k.1));
        });
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let n = max_num_of_endpoints(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).picker(Arc::new(WeightedRandomPicker::new(n))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn scored(scores: &[f64]) -> Vec<ScoredCandidate> {
        scores.iter().enumerate().map(|(index, &score)| ScoredCandidate { index, score }).collect()
    }

    fn frequencies(scores: &[f64], draws: u32) -> Vec<f64> {
        let mut r = rng();
        let mut counts = vec![0u32; scores.len()];
        let mut out = Vec::new();
        for _ in 0..draws {
            out.clear();
            WeightedRandomPicker::new(1).pick(&mut scored(scores), &mut r, &mut out);
            counts[out[0]] += 1;
        }
        counts.iter().map(|&c| f64::from(c) / f64::from(draws)).collect()
    }

    #[test]
    fn key_formula() {
        assert_eq!(ares_key(2.0, 0.25), 0.5);
        assert_eq!(ares_key(1.0, 0.0), 1e-10);
        assert_eq!(ares_key(0.0, 0.9), 0.0);
        assert_eq!(ares_key(-1.0, 0.9), 0.0);
    }

    #[test]
    fn frequencies_follow_weights() {
        let f = frequencies(&[1.0, 2.0, 3.0, 4.0], 20_000);
        for (i, expected) in [0.1, 0.2, 0.3, 0.4].iter().enumerate() {
            assert!((f[i] - expected).abs() < 0.015, "{f:?}");
        }
    }

    #[test]
    fn non_positive_scores_are_never_first_while_a_positive_exists() {
        let f = frequencies(&[0.0, 0.5, -1.0], 2_000);
        assert_eq!(f, vec![0.0, 1.0, 0.0]);
        let mut out = Vec::new();
        WeightedRandomPicker::new(3).pick(&mut scored(&[0.0, 0.5, 0.0]), &mut rng(), &mut out);
        assert_eq!(out[0], 1);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn all_non_positive_is_uniform() {
        let f = frequencies(&[0.0, 0.0, 0.0, 0.0], 20_000);
        for x in f {
            assert!((x - 0.25).abs() < 0.02);
        }
    }

    #[test]
    fn takes_n_distinct_by_weight() {
        let mut out = Vec::new();
        WeightedRandomPicker::new(2).pick(&mut scored(&[0.3, 0.3, 0.3]), &mut rng(), &mut out);
        assert_eq!(out.len(), 2);
        assert_ne!(out[0], out[1]);
    }

    #[test]
    fn parameters() {
        assert_rejects(factory, json!({"maxNumOfEndpoints": 0}), "maxNumOfEndpoints");
        assert_rejects(factory, json!({"maxNumOfEndpoints": true}), "maxNumOfEndpoints");
        assert_rejects(factory, json!({"temperature": 1}), "temperature");
    }
}
