//! The trainer: histogram gradient boosting with second-order gradients, producing the same [`Forest`]
//! the engine predicts with. Single-threaded on purpose: a retrain runs beside the request path and must
//! not take more than the one core it is given.
//!
//! Why our own and not a crate: forust-ml measured ~80 ms for 100 trees on 10k × 8 on this machine and
//! brings rayon's thread pool; the perpetual pre-release failed to build on stable; lightgbm3 needs C++
//! and CMake ≥ 3.28. This one is ~500 lines, deterministic under a seed, and its figures are in
//! BENCHMARKS.md (200 trees on 200,000 rows, one core).
//!
//! Parameters mirror XGBoost's and default to llm-d's (llm-d/llm-d-latency-predictor:
//! training/training_server.py): 200 trees, depth 6, learning rate 0.05, subsample 0.8, colsample_bytree
//! 0.8, min_child_weight 5, gamma 0.2, reg_alpha 0.01, reg_lambda 0.1. The quantile objective follows
//! XGBoost's `reg:quantileerror`: pinball-loss gradients grow the tree, then each leaf is set to the
//! α-quantile of its rows' residuals (dmlc/xgboost:src/objective/adaptive.cc, `UpdateTreeLeaf`).

mod bins;
mod grow;

use thiserror::Error;

use super::forest::{Forest, Node};
use bins::Binned;
use grow::{grow, GrowInput, GrowNode};

/// What the trees are fitted to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    /// Squared error: predicts the mean.
    SquaredError,
    /// Pinball loss: predicts the `alpha` quantile (0 < alpha < 1).
    Quantile { alpha: f32 },
    /// Squared error on the logarithm of the target (floored at [`LOG_TARGET_FLOOR`]): the forest's
    /// output is ln(target), and [`Objective::output`] takes it back with `exp`. It predicts the
    /// geometric mean, the estimate that relative (percentage) error rewards: latencies spread over
    /// orders of magnitude (a 30 ms TTFT on an idle replica, 3 s behind a queue), and a squared error on
    /// milliseconds spends the trees on the slowest requests. XGBoost writes such a model as `reg:gamma`,
    /// whose log link predicts `exp(margin)` (dmlc/xgboost:src/objective/regression_obj.cu).
    LogSquaredError,
}

/// The smallest target a [`Objective::LogSquaredError`] model takes the logarithm of (a zero latency
/// would be ln 0).
pub const LOG_TARGET_FLOOR: f32 = 1e-3;

impl Objective {
    /// The prediction for a forest output (its margin): itself, or `exp` of it for a log-target model.
    #[inline]
    pub fn output(self, margin: f32) -> f32 {
        match self {
            Objective::LogSquaredError => margin.exp(),
            Objective::SquaredError | Objective::Quantile { .. } => margin,
        }
    }
}

/// Training parameters, named as in XGBoost.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub objective: Objective,
    pub n_trees: usize,
    pub max_depth: u32,
    pub learning_rate: f32,
    /// Fraction of rows each tree sees (drawn per tree).
    pub subsample: f32,
    /// Fraction of features each tree may split on (drawn per tree).
    pub colsample_bytree: f32,
    pub min_child_weight: f64,
    /// `min_split_loss`: the least gain a split must bring.
    pub gamma: f64,
    pub reg_alpha: f64,
    pub reg_lambda: f64,
    /// Histogram bins per feature, at most 256.
    pub max_bins: usize,
    pub seed: u64,
}

impl Default for Params {
    /// llm-d's XGBoost parameters with its code-default objective (quantile, α = 0.9).
    fn default() -> Self {
        Params {
            objective: Objective::Quantile { alpha: 0.9 },
            n_trees: 200,
            max_depth: 6,
            learning_rate: 0.05,
            subsample: 0.8,
            colsample_bytree: 0.8,
            min_child_weight: 5.0,
            gamma: 0.2,
            reg_alpha: 0.01,
            reg_lambda: 0.1,
            max_bins: 256,
            seed: 42,
        }
    }
}

/// Training input or parameters that cannot produce a model.
#[derive(Debug, Error, PartialEq)]
pub enum TrainError {
    #[error("no training rows")]
    Empty,
    #[error("{values} feature values do not make rows of {n_features} for {targets} targets")]
    Shape { values: usize, n_features: usize, targets: usize },
    #[error("target {index} is {value}, not a finite number")]
    Target { index: usize, value: f32 },
    #[error("parameter {name} = {value} is out of range")]
    Param { name: &'static str, value: String },
}

/// Trains a forest on `rows` (`n_features` values per row, row after row) and one target per row.
pub fn train(
    params: &Params,
    rows: &[f32],
    n_features: usize,
    targets: &[f32],
) -> Result<Forest, TrainError> {
    check(params, rows, n_features, targets)?;
    if params.objective == Objective::LogSquaredError {
        let logs: Vec<f32> = targets.iter().map(|&y| y.max(LOG_TARGET_FLOOR).ln()).collect();
        let params = Params { objective: Objective::SquaredError, ..params.clone() };
        return train(&params, rows, n_features, &logs);
    }
    let data = Binned::new(rows, n_features, params.max_bins);
    let n = data.n_rows;
    let base_score = match params.objective {
        // LogSquaredError arrives here with the logarithms as targets (above).
        Objective::SquaredError | Objective::LogSquaredError => {
            (targets.iter().map(|&y| f64::from(y)).sum::<f64>() / n as f64) as f32
        }
        Objective::Quantile { alpha } => quantile(&mut targets.to_vec(), alpha),
    };
    let mut rng = SplitMix64(params.seed);
    let mut pred = vec![base_score; n];
    let (mut grad, mut hess) = (vec![0.0f32; n], vec![1.0f32; n]);
    let mut indices: Vec<u32> = Vec::with_capacity(n);
    let mut grown = vec![false; n];
    let mut residuals: Vec<f32> = Vec::new();
    let mut features: Vec<usize> = (0..n_features).collect();
    let n_cols = ((params.colsample_bytree * n_features as f32).round() as usize).clamp(1, n_features.max(1));
    let mut trees = Vec::with_capacity(params.n_trees);
    for _ in 0..params.n_trees {
        for ((g, h), (&p, &y)) in grad.iter_mut().zip(hess.iter_mut()).zip(pred.iter().zip(targets)) {
            (*g, *h) = match params.objective {
                Objective::SquaredError | Objective::LogSquaredError => (p - y, 1.0),
                Objective::Quantile { alpha } => (if y >= p { -alpha } else { 1.0 - alpha }, 1.0),
            };
        }
        indices.clear();
        let keep = (f64::from(params.subsample) * (u64::MAX as f64)) as u64;
        indices.extend((0..n as u32).filter(|_| params.subsample >= 1.0 || rng.next() <= keep));
        // Partial Fisher–Yates: the first `n_cols` entries become this tree's features.
        for i in 0..n_cols.min(n_features) {
            let j = i + (rng.next() % (n_features - i) as u64) as usize;
            features.swap(i, j);
        }
        let mut tree_features = features[..n_cols.min(n_features)].to_vec();
        tree_features.sort_unstable();
        let input = GrowInput { data: &data, grad: &grad, hess: &hess, features: &tree_features, params };
        let mut nodes = grow(&input, &mut indices);
        if let Objective::Quantile { alpha } = params.objective {
            for node in nodes.iter_mut().filter(|node| node.children.is_none() && node.rows.1 > node.rows.0) {
                residuals.clear();
                residuals.extend(
                    indices[node.rows.0..node.rows.1].iter().map(|&r| targets[r as usize] - pred[r as usize]),
                );
                node.value = quantile(&mut residuals, alpha) * params.learning_rate;
            }
        }
        // The rows the tree was grown on already sit in their leaf's range of `indices` (the same `≤`
        // rule placed them); only the rows left out of the subsample walk the tree.
        grown.fill(false);
        for leaf in nodes.iter().filter(|node| node.children.is_none()) {
            for &r in &indices[leaf.rows.0..leaf.rows.1] {
                pred[r as usize] += leaf.value;
                grown[r as usize] = true;
            }
        }
        for (r, p) in pred.iter_mut().enumerate().filter(|(r, _)| !grown[*r]) {
            *p += leaf_value(&nodes, &data.bins[r * n_features..(r + 1) * n_features]);
        }
        trees.push(to_nodes(&nodes, &data.cuts));
    }
    Forest::from_trees(n_features, base_score, &trees)
        .map_err(|e| TrainError::Param { name: "max_depth", value: e.to_string() })
}

fn check(p: &Params, rows: &[f32], n_features: usize, targets: &[f32]) -> Result<(), TrainError> {
    if targets.is_empty() {
        return Err(TrainError::Empty);
    }
    if rows.len() != targets.len() * n_features {
        return Err(TrainError::Shape { values: rows.len(), n_features, targets: targets.len() });
    }
    if let Some((index, &value)) = targets.iter().enumerate().find(|(_, y)| !y.is_finite()) {
        return Err(TrainError::Target { index, value });
    }
    let out_of_range = |name: &'static str, value: String| Err(TrainError::Param { name, value });
    if let Objective::Quantile { alpha } = p.objective {
        if !(alpha > 0.0 && alpha < 1.0) {
            return out_of_range("alpha", alpha.to_string());
        }
    }
    if p.max_depth > super::forest::MAX_DEPTH {
        return out_of_range("max_depth", p.max_depth.to_string());
    }
    if !(p.subsample > 0.0 && p.subsample <= 1.0) {
        return out_of_range("subsample", p.subsample.to_string());
    }
    if !(p.colsample_bytree > 0.0 && p.colsample_bytree <= 1.0) {
        return out_of_range("colsample_bytree", p.colsample_bytree.to_string());
    }
    if !(p.learning_rate > 0.0 && p.learning_rate.is_finite()) {
        return out_of_range("learning_rate", p.learning_rate.to_string());
    }
    if !(p.reg_lambda >= 0.0 && p.reg_alpha >= 0.0 && p.gamma >= 0.0 && p.min_child_weight >= 0.0) {
        return out_of_range("reg_lambda/reg_alpha/gamma/min_child_weight", format!("{p:?}"));
    }
    Ok(())
}

/// XGBoost's quantile with linear interpolation between order statistics at `alpha·(n+1)`
/// (dmlc/xgboost:src/common/stats.h, `Quantile`). Reorders `values`; 0 for none.
///
/// Selection, not sorting: the k-th order statistic by `select_nth_unstable` and the (k+1)-th as the
/// least of what lies above it, O(n) instead of O(n log n). The quantile objective refits every leaf of
/// every tree this way, and sorting there made quantile training ~1.8× slower than squared error.
fn quantile(values: &mut [f32], alpha: f32) -> f32 {
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    let (a, nf) = (f64::from(alpha), n as f64);
    if a <= 1.0 / (nf + 1.0) {
        return least(values);
    }
    if a >= nf / (nf + 1.0) {
        return values.iter().copied().fold(values[0], |m, v| std::cmp::max_by(m, v, f32::total_cmp));
    }
    let x = a * (nf + 1.0);
    let k = x.floor() as usize - 1;
    let d = x - 1.0 - k as f64;
    let (_, &mut kth, above) = values.select_nth_unstable_by(k, f32::total_cmp);
    let next = if above.is_empty() { kth } else { least(above) };
    let (v0, v1) = (f64::from(kth), f64::from(next));
    (v0 + d * (v1 - v0)) as f32
}

/// The least of `values` in `total_cmp` order (what sorting would put first); `values` is not empty.
fn least(values: &[f32]) -> f32 {
    values.iter().copied().fold(values[0], |m, v| std::cmp::min_by(m, v, f32::total_cmp))
}

/// The leaf a row of bins reaches in a grown tree.
fn leaf_value(nodes: &[GrowNode], bins: &[u8]) -> f32 {
    let mut i = 0;
    while let Some((left, right)) = nodes[i].children {
        i = if bins[nodes[i].feature] <= nodes[i].bin_split { left } else { right };
    }
    nodes[i].value
}

/// A grown tree in the engine's terms: a bin split `≤ b` is `x < cuts[b]`; NaN (bin 0) goes left.
fn to_nodes(nodes: &[GrowNode], cuts: &[Vec<f32>]) -> Vec<Node> {
    nodes
        .iter()
        .map(|node| match node.children {
            Some((left, right)) => Node::Split {
                feature: node.feature as u32,
                threshold: cuts[node.feature][usize::from(node.bin_split)],
                default_left: true,
                left: left as u32,
                right: right as u32,
            },
            None => Node::Leaf(node.value),
        })
        .collect()
}

/// SplitMix64 (Steele, Lea, Flood 2014): a seeded generator that is the same on every platform and
/// version, so a seed reproduces a model exactly.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests;
