//! Growing one regression tree depth-wise on binned features from first and second order gradients,
//! with XGBoost's split gain and leaf weight (dmlc/xgboost:src/tree/param.h, `CalcGain`/`CalcWeight`):
//! `gain(G, H) = T(G)² / (H + λ)`, `weight = −T(G) / (H + λ)` where `T` shrinks `G` towards 0 by `α`
//! (L1), a side lighter than `min_child_weight` in hessian is not allowed, and a split must gain at least
//! `γ` (`min_split_loss`).
//!
//! Rows are partitioned in place in one index array (each node owns a contiguous range of it), and only
//! the smaller child's histogram is built: the larger one is its parent's minus the smaller's.

use super::bins::Binned;
use super::Params;

/// Histogram slots per feature (one per possible `u8` bin).
const SLOTS: usize = 256;

/// A node of the tree being grown. A split sends `bin ≤ bin_split` left.
#[derive(Debug, Clone)]
pub(super) struct GrowNode {
    pub feature: usize,
    pub bin_split: u8,
    /// `None` for a leaf.
    pub children: Option<(usize, usize)>,
    pub value: f32,
    /// This node's range in the partitioned index array (meaningful for leaves).
    pub rows: (usize, usize),
}

/// Per-slot sums of gradient and hessian.
type Hist = Vec<[f64; 2]>;

/// What the tree is grown from: the binned rows, every row's gradient pair, and this tree's features.
pub(super) struct GrowInput<'a> {
    pub data: &'a Binned,
    pub grad: &'a [f32],
    pub hess: &'a [f32],
    pub features: &'a [usize],
    pub params: &'a Params,
}

struct Pending {
    node: usize,
    start: usize,
    end: usize,
    hist: Hist,
    sum: [f64; 2],
}

/// Grows a tree over the rows in `indices` (which it reorders: each leaf's rows end up contiguous, at
/// `GrowNode::rows`). Leaf values are XGBoost weights scaled by the learning rate.
pub(super) fn grow(input: &GrowInput<'_>, indices: &mut [u32]) -> Vec<GrowNode> {
    let p = input.params;
    let root_hist = build_hist(input, indices);
    let sum = indices
        .iter()
        .fold([0.0; 2], |s, &r| [s[0] + input.grad[r as usize] as f64, s[1] + input.hess[r as usize] as f64]);
    let mut nodes = vec![leaf(input, sum, (0, indices.len()))];
    let mut level = vec![Pending { node: 0, start: 0, end: indices.len(), hist: root_hist, sum }];
    for depth in 0..p.max_depth {
        let mut next = Vec::new();
        for pending in level {
            let Some((feature, bin, left_sum)) = best_split(input, &pending) else { continue };
            let right_sum = [pending.sum[0] - left_sum[0], pending.sum[1] - left_sum[1]];
            let mid =
                partition(input.data, &mut indices[pending.start..pending.end], feature, bin) + pending.start;
            let (left, right) = (nodes.len(), nodes.len() + 1);
            nodes.push(leaf(input, left_sum, (pending.start, mid)));
            nodes.push(leaf(input, right_sum, (mid, pending.end)));
            let parent = &mut nodes[pending.node];
            parent.feature = feature;
            parent.bin_split = bin;
            parent.children = Some((left, right));
            if depth + 1 == p.max_depth {
                continue; // the children stay leaves: no histograms needed
            }
            let (small, large) = if mid - pending.start <= pending.end - mid {
                ((left, pending.start, mid, left_sum), (right, mid, pending.end, right_sum))
            } else {
                ((right, mid, pending.end, right_sum), (left, pending.start, mid, left_sum))
            };
            let small_hist = build_hist(input, &indices[small.1..small.2]);
            let mut large_hist = pending.hist;
            for (l, s) in large_hist.iter_mut().zip(&small_hist) {
                l[0] -= s[0];
                l[1] -= s[1];
            }
            next.push(Pending {
                node: small.0,
                start: small.1,
                end: small.2,
                hist: small_hist,
                sum: small.3,
            });
            next.push(Pending {
                node: large.0,
                start: large.1,
                end: large.2,
                hist: large_hist,
                sum: large.3,
            });
        }
        level = next;
    }
    nodes
}

/// A leaf with XGBoost's weight for these sums, times the learning rate.
fn leaf(input: &GrowInput<'_>, sum: [f64; 2], rows: (usize, usize)) -> GrowNode {
    let p = input.params;
    let weight = if sum[1] < p.min_child_weight || sum[1] <= 0.0 {
        0.0
    } else {
        -shrink(sum[0], p.reg_alpha) / (sum[1] + p.reg_lambda)
    };
    GrowNode {
        feature: 0,
        bin_split: 0,
        children: None,
        value: (weight * f64::from(p.learning_rate)) as f32,
        rows,
    }
}

/// `T(G)`: the gradient sum shrunk towards zero by the L1 penalty.
fn shrink(g: f64, alpha: f64) -> f64 {
    if g > alpha {
        g - alpha
    } else if g < -alpha {
        g + alpha
    } else {
        0.0
    }
}

fn gain(sum: [f64; 2], p: &Params) -> f64 {
    if sum[1] < p.min_child_weight {
        return 0.0;
    }
    let t = shrink(sum[0], p.reg_alpha);
    t * t / (sum[1] + p.reg_lambda)
}

/// The best split of a node: (feature, last bin going left, left sums), or `None` when no split gains
/// at least `γ` (and more than a rounding error).
fn best_split(input: &GrowInput<'_>, node: &Pending) -> Option<(usize, u8, [f64; 2])> {
    let p = input.params;
    let parent_gain = gain(node.sum, p);
    let mut best: Option<(f64, usize, u8, [f64; 2])> = None;
    for &f in input.features {
        let n_bins = input.data.cuts[f].len() + 1;
        let hist = &node.hist[f * SLOTS..f * SLOTS + n_bins];
        let mut left = [0.0f64; 2];
        for (b, slot) in hist[..n_bins - 1].iter().enumerate() {
            left[0] += slot[0];
            left[1] += slot[1];
            let right = [node.sum[0] - left[0], node.sum[1] - left[1]];
            if left[1] < p.min_child_weight || right[1] < p.min_child_weight {
                continue;
            }
            let change = gain(left, p) + gain(right, p) - parent_gain;
            if best.as_ref().is_none_or(|b| change > b.0) {
                best = Some((change, f, b as u8, left));
            }
        }
    }
    best.filter(|b| b.0 > 1e-6 && b.0 >= p.gamma).map(|(_, f, b, left)| (f, b, left))
}

/// Gradient and hessian sums per (feature, bin) over `rows`, for this tree's features.
fn build_hist(input: &GrowInput<'_>, rows: &[u32]) -> Hist {
    let nf = input.data.n_features;
    let mut hist = vec![[0.0f64; 2]; nf * SLOTS];
    for &r in rows {
        let r = r as usize;
        let (g, h) = (f64::from(input.grad[r]), f64::from(input.hess[r]));
        let bins = &input.data.bins[r * nf..(r + 1) * nf];
        for &f in input.features {
            let slot = &mut hist[f * SLOTS + usize::from(bins[f])];
            slot[0] += g;
            slot[1] += h;
        }
    }
    hist
}

/// Reorders `rows` so those going left (`bin ≤ split`) come first; returns how many go left.
///
/// Branch-free Lomuto: every row is swapped into `mid` and `mid` advances only for a left one (a right one
/// lands where the right rows already are). Which way a row goes is as good as random to the branch
/// predictor, so a branch here mispredicted about every other row.
fn partition(data: &Binned, rows: &mut [u32], feature: usize, split: u8) -> usize {
    let nf = data.n_features;
    let mut mid = 0;
    for i in 0..rows.len() {
        let r = rows[i];
        let left = data.bins[r as usize * nf + feature] <= split;
        rows[i] = rows[mid];
        rows[mid] = r;
        mid += usize::from(left);
    }
    mid
}
