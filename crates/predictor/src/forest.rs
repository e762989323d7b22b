//! The inference engine: a forest of regression trees flattened into two contiguous arrays, predicting a
//! whole candidate set in one pass with no allocation.
//!
//! Why this layout: every tree is stored as a *complete* binary tree of the forest's depth (a leaf above
//! the bottom is padded down by repeating its value), so node `i`'s children are `2i+1` and `2i+2`, a
//! prediction is exactly `depth` steps with no leaf test, and each step is a compare and an add that the
//! compiler keeps branch-free. Rows are walked through each tree in blocks of [`BLOCK`], two trees at a
//! time, so the 16 walks are independent chains the CPU overlaps, and a tree's nodes stay in cache while the block uses
//! them. Depth-6 trees take 63 splits × 8 bytes + 64 leaves × 4 bytes: 200 trees fit in 152 KB.
//!
//! That scalar kernel is the fallback. Forests of depth 4 to 6 over at most 16 features with at most 255
//! distinct thresholds per feature (every histogram-trained model) also get byte tables for the vector
//! kernel in [`ranked`], which walks 32 NaN-free rows at a time where the CPU has AVX2 (2–4× the
//! scalar kernel's rows per second), and 64 where it also has AVX-512 BW and VBMI (about 2× the AVX2
//! kernel's; BENCHMARKS.md §5), with bit-identical predictions.
//!
//! The split rule is XGBoost's: `x < threshold` goes left, a missing value (NaN) goes the node's default
//! way (dmlc/xgboost:src/predictor/predict_fn.h, `GetNextNode`). Features and thresholds are `f32`, as in
//! XGBoost, so the comparisons are the same ones it makes.

use super::error::ModelError;
use ranked::{Ranked, LANES, WIDE_LANES};

mod ranked;

/// The deepest tree the flattened layout accepts: 2^12 leaves per tree is 48 KB per tree.
pub const MAX_DEPTH: u32 = 12;
/// Rows walked through a tree together.
const BLOCK: usize = 8;
/// Rows of at most this many features take the fast path (llm-d's feature sets have 9 to 13).
const FAST_FEATURES: usize = 32;
/// The bit of [`Split::feature`] that says where a missing value goes.
const DEFAULT_LEFT: u32 = 1 << 31;

/// One node of a tree before flattening: what the XGBoost loader and the trainer both produce.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `x[feature] < threshold` goes to `left`, otherwise `right`; NaN goes left iff `default_left`.
    Split { feature: u32, threshold: f32, default_left: bool, left: u32, right: u32 },
    /// The value this tree adds to the prediction.
    Leaf(f32),
}

/// A split in the flattened layout. `feature` carries [`DEFAULT_LEFT`] in its top bit.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Split {
    threshold: f32,
    feature: u32,
}

/// A flattened forest: `prediction = base_score + Σ tree leaf values`.
#[derive(Debug, Clone)]
pub struct Forest {
    n_features: usize,
    depth: u32,
    n_trees: usize,
    base_score: f32,
    /// `n_trees × 2^depth` splits, tree after tree, each tree in breadth-first order; the last slot of
    /// each tree is unused, so a tree's splits and leaves are both power-of-two arrays the fast path
    /// indexes with a mask instead of a bounds check.
    splits: Vec<Split>,
    /// `n_trees × 2^depth` leaf values.
    leaves: Vec<f32>,
    /// The same trees for the vector kernel, when they fit it (see [`ranked`]).
    ranked: Option<Ranked>,
}

impl Forest {
    /// Flattens `trees` (each rooted at node 0). Fails when a child index points outside its tree, a
    /// feature is `≥ n_features`, or a tree is deeper than [`MAX_DEPTH`] (which also catches cycles).
    pub fn from_trees(n_features: usize, base_score: f32, trees: &[Vec<Node>]) -> Result<Self, ModelError> {
        let mut depth = 0;
        for (t, tree) in trees.iter().enumerate() {
            depth = depth.max(tree_depth(t, tree, n_features)?);
        }
        let n_leaves = 1usize << depth;
        let mut forest = Forest {
            n_features,
            depth,
            n_trees: trees.len(),
            base_score,
            splits: vec![Split { threshold: 0.0, feature: 0 }; n_leaves * trees.len()],
            leaves: vec![0.0; n_leaves * trees.len()],
            ranked: None,
        };
        for (t, tree) in trees.iter().enumerate() {
            let splits = &mut forest.splits[t * n_leaves..(t + 1) * n_leaves - 1];
            let leaves = &mut forest.leaves[t * n_leaves..(t + 1) * n_leaves];
            place(tree, 0, 0, splits, leaves);
        }
        forest.ranked = Ranked::new(n_features, depth, &forest.splits, &forest.leaves);
        Ok(forest)
    }

    /// How many features a row has.
    pub fn n_features(&self) -> usize {
        self.n_features
    }

    /// How many trees the forest sums.
    pub fn n_trees(&self) -> usize {
        self.n_trees
    }

    /// The depth every tree is padded to.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The constant every prediction starts from.
    pub fn base_score(&self) -> f32 {
        self.base_score
    }

    /// Tree `t` as nodes again, numbered breadth-first from the root 0, with every subtree whose leaves all
    /// hold the same value (the layout's padding, or a split that changes nothing) folded into one leaf:
    /// it predicts bit for bit what the flattened tree predicts. This is how a model is written out.
    ///
    /// # Panics
    /// When `t >= n_trees()` (a caller bug).
    pub fn tree_nodes(&self, t: usize) -> Vec<Node> {
        let n_leaves = 1usize << self.depth;
        let n_splits = n_leaves - 1;
        let splits = &self.splits[t * n_leaves..(t + 1) * n_leaves - 1];
        let leaves = &self.leaves[t * n_leaves..(t + 1) * n_leaves];
        let mut nodes = Vec::new();
        let mut queue = std::collections::VecDeque::from([0usize]);
        while let Some(pos) = queue.pop_front() {
            let (mut first, mut last) = (pos, pos);
            while first < n_splits {
                first = 2 * first + 1;
                last = 2 * last + 2;
            }
            let under = &leaves[first - n_splits..=last - n_splits];
            if under.iter().all(|v| v.to_bits() == under[0].to_bits()) {
                nodes.push(Node::Leaf(under[0]));
                continue;
            }
            // Breadth-first: the nodes queued before this one's children are numbered first.
            let left = (nodes.len() + queue.len() + 1) as u32;
            let Split { threshold, feature } = splits[pos];
            nodes.push(Node::Split {
                feature: feature & !DEFAULT_LEFT,
                threshold,
                default_left: feature & DEFAULT_LEFT != 0,
                left,
                right: left + 1,
            });
            queue.extend([2 * pos + 1, 2 * pos + 2]);
        }
        nodes
    }

    /// The prediction for one row of `n_features` values.
    ///
    /// # Panics
    /// When `row.len() != n_features` (a caller bug, not a data condition).
    pub fn predict_one(&self, row: &[f32]) -> f32 {
        let mut out = [0.0];
        self.predict_batch(row, &mut out);
        out[0]
    }

    /// Predicts `out.len()` rows laid out one after another in `rows` (`n_features` values each) into
    /// `out`. Allocates nothing. A row with a NaN takes the missing-value path; others the fast one.
    ///
    /// # Panics
    /// When `rows.len() != out.len() × n_features` (a caller bug, not a data condition).
    pub fn predict_batch(&self, rows: &[f32], out: &mut [f32]) {
        let nf = self.n_features;
        assert_eq!(
            rows.len(),
            out.len() * nf,
            "predict_batch: rows hold {} values for {} rows of {nf}",
            rows.len(),
            out.len()
        );
        if nf == 0 {
            // No features: every tree is a single leaf, and `chunks_exact` cannot take empty rows.
            out.fill(self.walk::<1, false>(&[])[0]);
            return;
        }
        match self.ranked.as_ref().filter(|_| Ranked::available()) {
            Some(ranked) => {
                let lanes = if Ranked::wide_available() { WIDE_LANES } else { LANES };
                for (block, out) in rows.chunks(lanes * nf).zip(out.chunks_mut(lanes)) {
                    // A short tail is cheaper as one scalar block than as a mostly empty vector one,
                    // and up to 32 rows as one AVX2 walk than as a half-empty 64-lane one.
                    // The NaN test folds rather than stops at the first: the compiler vectorises it.
                    if out.len() <= BLOCK || block.iter().fold(false, |nan, x| nan | x.is_nan()) {
                        self.predict_scalar(block, out);
                    } else if out.len() <= LANES {
                        self.add_base(out, ranked.sums(block, nf, self.depth));
                    } else {
                        self.add_base(out, ranked.wide_sums(block, nf, self.depth));
                    }
                }
            }
            None => self.predict_scalar(rows, out),
        }
    }

    /// Each row's prediction from its sum of leaf values (lanes past `out` are dropped).
    fn add_base<const L: usize>(&self, out: &mut [f32], sums: [f32; L]) {
        for (out, sum) in out.iter_mut().zip(sums) {
            *out = sum + self.base_score;
        }
    }

    /// [`Forest::predict_batch`] on the scalar kernels, for `n_features > 0`.
    fn predict_scalar(&self, rows: &[f32], out: &mut [f32]) {
        let nf = self.n_features;
        for (block, out) in rows.chunks(BLOCK * nf).zip(out.chunks_mut(BLOCK)) {
            if nf > FAST_FEATURES || block.iter().any(|x| x.is_nan()) {
                for (row, out) in block.chunks_exact(nf).zip(out.iter_mut()) {
                    *out = self.walk::<1, true>(row)[0];
                }
            } else {
                let predictions = self.walk_block(block);
                out.copy_from_slice(&predictions[..out.len()]);
            }
        }
    }

    /// Up to [`BLOCK`] NaN-free rows of at most [`FAST_FEATURES`] features, transposed so that a
    /// feature's values sit together, through the kernel for this forest's depth.
    fn walk_block(&self, block: &[f32]) -> [f32; BLOCK] {
        let mut xs = [[0.0f32; BLOCK]; FAST_FEATURES];
        for (r, row) in block.chunks_exact(self.n_features).enumerate() {
            for (column, &x) in xs.iter_mut().zip(row) {
                column[r] = x;
            }
        }
        match self.depth {
            0 => self.walk_fast::<1>(&xs),
            1 => self.walk_fast::<2>(&xs),
            2 => self.walk_fast::<4>(&xs),
            3 => self.walk_fast::<8>(&xs),
            4 => self.walk_fast::<16>(&xs),
            5 => self.walk_fast::<32>(&xs),
            6 => self.walk_fast::<64>(&xs),
            7 => self.walk_fast::<128>(&xs),
            8 => self.walk_fast::<256>(&xs),
            _ => {
                let mut out = [0.0; BLOCK];
                for (row, out) in block.chunks_exact(self.n_features).zip(out.iter_mut()) {
                    *out = self.walk::<1, false>(row)[0];
                }
                out
            }
        }
    }

    /// The fast kernel: `LEAVES = 2^depth` is a constant, so each tree is a pair of fixed-size arrays,
    /// the loop over levels unrolls, and every index is masked into range (no bounds checks). The
    /// feature mask also drops [`DEFAULT_LEFT`]: rows here have no NaN, so the default way is unused.
    #[inline(always)]
    fn walk_fast<const LEAVES: usize>(&self, xs: &[[f32; BLOCK]; FAST_FEATURES]) -> [f32; BLOCK] {
        let depth = LEAVES.trailing_zeros();
        let mut acc = [0.0f32; BLOCK];
        let (splits, _) = self.splits.as_chunks::<LEAVES>();
        let (leaves, _) = self.leaves.as_chunks::<LEAVES>();
        // Two trees at a time: twice the independent walks for the CPU to overlap.
        let mut pairs = splits.chunks_exact(2).zip(leaves.chunks_exact(2));
        for (splits, leaves) in pairs.by_ref() {
            let (mut a, mut b) = ([0usize; BLOCK], [0usize; BLOCK]);
            for _ in 0..depth {
                for r in 0..BLOCK {
                    let (sa, sb) = (splits[0][a[r] & (LEAVES - 1)], splits[1][b[r] & (LEAVES - 1)]);
                    let xa = xs[sa.feature as usize & (FAST_FEATURES - 1)][r];
                    let xb = xs[sb.feature as usize & (FAST_FEATURES - 1)][r];
                    // Equal to `!(x < threshold)` here: x is not NaN, nor is any threshold.
                    a[r] = 2 * a[r] + 1 + usize::from(xa >= sa.threshold);
                    b[r] = 2 * b[r] + 1 + usize::from(xb >= sb.threshold);
                }
            }
            for r in 0..BLOCK {
                acc[r] += leaves[0][a[r].wrapping_sub(LEAVES - 1) & (LEAVES - 1)];
                acc[r] += leaves[1][b[r].wrapping_sub(LEAVES - 1) & (LEAVES - 1)];
            }
        }
        let rest = splits.len() - splits.len() % 2;
        for (splits, leaves) in splits[rest..].iter().zip(&leaves[rest..]) {
            let mut node = [0usize; BLOCK];
            for _ in 0..depth {
                for r in 0..BLOCK {
                    let split = splits[node[r] & (LEAVES - 1)];
                    let x = xs[split.feature as usize & (FAST_FEATURES - 1)][r];
                    node[r] = 2 * node[r] + 1 + usize::from(x >= split.threshold);
                }
            }
            for r in 0..BLOCK {
                acc[r] += leaves[node[r].wrapping_sub(LEAVES - 1) & (LEAVES - 1)];
            }
        }
        acc.map(|sum| sum + self.base_score)
    }

    /// Walks `B` rows (`block` holds `B × n_features` values) through every tree. `MISSING` selects the
    /// NaN-aware comparison; without it a NaN would always go right, so callers pass NaN-free rows only.
    #[inline(always)]
    fn walk<const B: usize, const MISSING: bool>(&self, block: &[f32]) -> [f32; B] {
        let nf = self.n_features;
        let n_leaves = 1usize << self.depth;
        let n_splits = n_leaves - 1;
        let mut acc = [0.0f32; B];
        for (splits, leaves) in self.splits.chunks_exact(n_leaves).zip(self.leaves.chunks_exact(n_leaves)) {
            let mut node = [0usize; B];
            {
                for _ in 0..self.depth {
                    for r in 0..B {
                        let split = splits[node[r]];
                        let x = block[r * nf + (split.feature & !DEFAULT_LEFT) as usize];
                        let go_right = if MISSING && x.is_nan() {
                            split.feature & DEFAULT_LEFT == 0
                        } else {
                            // Equal to `!(x < threshold)` here: x is not NaN, nor is any threshold.
                            x >= split.threshold
                        };
                        node[r] = 2 * node[r] + 1 + usize::from(go_right);
                    }
                }
            }
            for r in 0..B {
                acc[r] += leaves[node[r] - n_splits];
            }
        }
        acc.map(|sum| sum + self.base_score)
    }
}

/// The depth of `tree` from node 0, checking indices and features on the way.
fn tree_depth(t: usize, tree: &[Node], n_features: usize) -> Result<u32, ModelError> {
    if tree.is_empty() {
        return Err(ModelError::Tree { tree: t, node: 0, message: "the tree has no nodes".into() });
    }
    // Iterative, so a malicious file cannot overflow the stack: (node, depth) pairs still to visit.
    let mut stack = vec![(0usize, 0u32)];
    let mut deepest = 0;
    while let Some((i, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(ModelError::TooDeep { tree: t, max: MAX_DEPTH });
        }
        deepest = deepest.max(depth);
        if let Node::Split { feature, threshold, left, right, .. } = tree[i] {
            if feature as usize >= n_features || feature & DEFAULT_LEFT != 0 {
                let message = format!("split on feature {feature}, but rows have {n_features} features");
                return Err(ModelError::Tree { tree: t, node: i, message });
            }
            if threshold.is_nan() {
                return Err(ModelError::Tree {
                    tree: t,
                    node: i,
                    message: "the split threshold is NaN".into(),
                });
            }
            for child in [left, right] {
                if child as usize >= tree.len() || child as usize == i {
                    let message = format!("child {child} is not a node of this {}-node tree", tree.len());
                    return Err(ModelError::Tree { tree: t, node: i, message });
                }
                stack.push((child as usize, depth + 1));
            }
        }
    }
    Ok(deepest)
}

/// Writes the subtree rooted at `tree[i]` at complete-layout position `pos`, padding a
/// leaf above the bottom level down to it.
fn place(tree: &[Node], i: usize, pos: usize, splits: &mut [Split], leaves: &mut [f32]) {
    let n_splits = splits.len();
    match tree[i] {
        Node::Split { feature, threshold, default_left, left, right } => {
            let flag = if default_left { DEFAULT_LEFT } else { 0 };
            splits[pos] = Split { threshold, feature: feature | flag };
            place(tree, left as usize, 2 * pos + 1, splits, leaves);
            place(tree, right as usize, 2 * pos + 2, splits, leaves);
        }
        Node::Leaf(value) => {
            // Every bottom position under `pos` gets the value; the padding splits keep their zeroed
            // feature 0, and whichever way they send a row it reaches the same value.
            let (mut first, mut last) = (pos, pos);
            while first < n_splits {
                first = 2 * first + 1;
                last = 2 * last + 2;
            }
            leaves[first - n_splits..=last - n_splits].fill(value);
        }
    }
}

#[cfg(test)]
mod tests;
