//! Request policies that can change while epp runs: InferenceObjective priorities and model-name
//! rewrites, from the config file and, in InferencePool mode, from the cluster's `InferenceObjective`
//! and `InferenceModelRewrite` objects (`crate::discovery` watches them).
//!
//! Why a lock-free swap: the request path reads these on every request, and the cluster changes them
//! rarely; a reader takes a guard from an [`ArcSwap`] (a few atomic operations, no lock), the watcher
//! builds a whole new [`Policies`] and swaps it in. The config's entries are the base layer; the
//! cluster's replace those with the same name (objectives) or the same matched model (rewrites), as the
//! cluster is the live source of truth where it has an answer.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use rand::Rng;

/// Requests for one model are served as one of `targets` (model, relative weight), chosen by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedRewrite {
    /// Where the rule comes from (the config rule's or the InferenceModelRewrite's name), for metrics.
    pub name: String,
    pub targets: Vec<(String, f64)>,
}

impl WeightedRewrite {
    /// Picks a target by weight (cumulative weights; a zero or non-finite total: a uniform pick).
    pub fn pick<'a>(&'a self, rng: &mut impl Rng) -> Option<&'a str> {
        let total: f64 = self.targets.iter().map(|(_, w)| w.max(0.0)).sum();
        if self.targets.is_empty() {
            return None;
        }
        if total <= 0.0 || !total.is_finite() {
            return Some(self.targets[rng.random_range(0..self.targets.len())].0.as_str());
        }
        let mut roll = rng.random::<f64>() * total;
        for (model, weight) in &self.targets {
            if roll < weight.max(0.0) {
                return Some(model.as_str());
            }
            roll -= weight.max(0.0);
        }
        self.targets.last().map(|(m, _)| m.as_str())
    }
}

/// Priorities by objective name, and rewrites by matched model plus an optional catch-all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policies {
    /// InferenceObjective name (the `x-gateway-inference-objective` header) → priority.
    pub objectives: HashMap<String, i32>,
    /// Incoming model → its rewrite (an `Exact` match).
    pub rewrites: HashMap<String, WeightedRewrite>,
    /// The rewrite for every model no exact rule matches (an InferenceModelRewrite rule without
    /// `matches`).
    pub fallback: Option<WeightedRewrite>,
}

impl Policies {
    /// The priority of `objective`, if it is known.
    pub fn priority(&self, objective: &str) -> Option<i32> {
        self.objectives.get(objective).copied()
    }

    /// The rewrite that applies to `model`: its exact rule, else the catch-all.
    pub fn rewrite_for(&self, model: &str) -> Option<&WeightedRewrite> {
        self.rewrites.get(model).or(self.fallback.as_ref())
    }

    /// `self` with `over`'s entries replacing those with the same key.
    fn layered(&self, over: &Policies) -> Policies {
        let mut out = self.clone();
        out.objectives.extend(over.objectives.iter().map(|(k, v)| (k.clone(), *v)));
        out.rewrites.extend(over.rewrites.iter().map(|(k, v)| (k.clone(), v.clone())));
        out.fallback = over.fallback.clone().or(out.fallback);
        out
    }
}

/// The current policies: the config's, with the cluster's laid over them.
#[derive(Debug)]
pub struct PolicyStore {
    config: Policies,
    current: ArcSwap<Policies>,
}

impl Default for PolicyStore {
    /// No objectives, no rewrites.
    fn default() -> Self {
        Self::new(Policies::default())
    }
}

impl PolicyStore {
    /// A store holding the config's policies (the cluster has said nothing yet).
    pub fn new(config: Policies) -> Self {
        let current = ArcSwap::from_pointee(config.clone());
        Self { config, current }
    }

    /// The policies now; cheap, lock-free, for the request path.
    pub fn load(&self) -> Guard<Arc<Policies>> {
        self.current.load()
    }

    /// Replaces the cluster's layer (all of it: what it no longer lists is gone).
    pub fn set_cluster(&self, cluster: &Policies) {
        self.current.store(Arc::new(self.config.layered(cluster)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn rewrite(name: &str, targets: &[(&str, f64)]) -> WeightedRewrite {
        WeightedRewrite {
            name: name.into(),
            targets: targets.iter().map(|(m, w)| (m.to_string(), *w)).collect(),
        }
    }

    #[test]
    fn the_cluster_layer_replaces_same_keys_and_keeps_the_rest_of_the_config() {
        let config = Policies {
            objectives: HashMap::from([("critical".into(), 10), ("batch".into(), -1)]),
            rewrites: HashMap::from([("m".into(), rewrite("cfg", &[("m-v1", 1.0)]))]),
            fallback: None,
        };
        let store = PolicyStore::new(config);
        assert_eq!(store.load().priority("critical"), Some(10));
        let cluster = Policies {
            objectives: HashMap::from([("critical".into(), 100)]),
            rewrites: HashMap::from([("m".into(), rewrite("crd", &[("m-v2", 1.0)]))]),
            fallback: Some(rewrite("any", &[("base", 1.0)])),
        };
        store.set_cluster(&cluster);
        let now = store.load();
        assert_eq!((now.priority("critical"), now.priority("batch")), (Some(100), Some(-1)));
        assert_eq!(now.rewrite_for("m").map(|r| r.name.as_str()), Some("crd"));
        assert_eq!(now.rewrite_for("other").map(|r| r.name.as_str()), Some("any"));
        // The cluster's objects go away: the config's entries are back.
        store.set_cluster(&Policies::default());
        let now = store.load();
        assert_eq!(now.priority("critical"), Some(10));
        assert_eq!(now.rewrite_for("m").map(|r| r.name.as_str()), Some("cfg"));
        assert!(now.rewrite_for("other").is_none());
    }

    #[test]
    fn picks_follow_the_weights() {
        let rule = rewrite("r", &[("a", 3.0), ("b", 1.0), ("c", 0.0)]);
        let mut rng = SmallRng::seed_from_u64(7);
        let a = (0..8000).filter(|_| rule.pick(&mut rng) == Some("a")).count();
        assert!((5500..6500).contains(&a), "{a}");
        assert!((0..1000).all(|_| rule.pick(&mut rng) != Some("c")));
        let uniform = rewrite("u", &[("a", 0.0), ("b", 0.0)]);
        let a = (0..1000).filter(|_| uniform.pick(&mut rng) == Some("a")).count();
        assert!((400..600).contains(&a), "{a}");
        assert_eq!(rewrite("none", &[]).pick(&mut rng), None);
    }
}
