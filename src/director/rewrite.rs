//! Model-name rewrites: the client's `x-gateway-model-name-rewrite` header, then weighted rules from the
//! config (the InferenceModelRewrite equivalent).

use rand::Rng;

/// A weighted rewrite rule: requests for `match_model` are served as one of `targets`.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteRule {
    pub name: String,
    pub match_model: String,
    pub targets: Vec<(String, f64)>,
}

impl RewriteRule {
    /// Picks a target by weight (cumulative weights; a zero total means a uniform pick).
    pub fn pick<'a>(&'a self, rng: &mut impl Rng) -> Option<&'a str> {
        if self.targets.is_empty() {
            return None;
        }
        let total: f64 = self.targets.iter().map(|(_, w)| w.max(0.0)).sum();
        if total <= 0.0 || !total.is_finite() {
            let i = rng.random_range(0..self.targets.len());
            return Some(self.targets[i].0.as_str());
        }
        let mut roll = rng.random::<f64>() * total;
        for (model, w) in &self.targets {
            let w = w.max(0.0);
            if roll < w {
                return Some(model.as_str());
            }
            roll -= w;
        }
        self.targets.last().map(|(m, _)| m.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    #[test]
    fn weights_are_respected() {
        let rule = RewriteRule {
            name: "r".into(),
            match_model: "m".into(),
            targets: vec![("a".into(), 3.0), ("b".into(), 1.0), ("c".into(), 0.0)],
        };
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = [0usize; 3];
        for _ in 0..8000 {
            match rule.pick(&mut rng) {
                Some("a") => counts[0] += 1,
                Some("b") => counts[1] += 1,
                _ => counts[2] += 1,
            }
        }
        assert_eq!(counts[2], 0);
        assert!(counts[0] > 5500 && counts[0] < 6500, "{counts:?}");
    }

    #[test]
    fn zero_total_is_uniform() {
        let rule = RewriteRule {
            name: "r".into(),
            match_model: "m".into(),
            targets: vec![("a".into(), 0.0), ("b".into(), 0.0)],
        };
        let mut rng = SmallRng::seed_from_u64(1);
        let a = (0..1000).filter(|_| rule.pick(&mut rng) == Some("a")).count();
        assert!(a > 400 && a < 600);
    }
}
