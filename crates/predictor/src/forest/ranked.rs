//! The vector kernel: rows as byte ranks, 32 rows walking a tree together in the byte lanes of AVX2
//! registers, where the CPU has AVX2 (checked at run time: the build targets baseline x86-64).
//!
//! Why: the scalar kernel's step is a chain of dependent loads (node → feature → value → compare → node)
//! per row and level, about 2 cycles a step on this machine's cores however the chains are interleaved,
//! which capped it below the 1,000,000 predictions/s. What makes a vector walk expensive is the
//! per-lane lookups, and bytes make them cheap: a feature's split thresholds are replaced by their
//! ranks among all the forest's thresholds on that feature (at most 255, which histogram-trained
//! models, ours and XGBoost's `hist`, always have), a row value by the count of thresholds `≤` it, and
//! then `x < threshold` is exactly `rank(x) ≤ rank(threshold)`. A tree's per-position features and
//! threshold ranks are byte tables `vpshufb` reads 32 lanes at a time, and a row's value for the
//! feature at its position is a blend over feature columns: over the 1, 2, 4 or 8 columns of the top
//! four levels' features (picked by the position's low bits), over all ≤ 16 below; a level of 32 rows
//! is 5 to 25 instructions. Leaf values are then summed per row, tree after tree, in the scalar kernel's order:
//! the predictions are bit for bit the scalar ones (the forest's tests and the xgboost equivalence
//! test check it).

use super::{Split, DEFAULT_LEFT};

mod wide;
pub(super) use wide::WIDE_LANES;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows walked together: one per byte lane of a 256-bit register.
pub(super) const LANES: usize = 32;
/// Forests whose rows have more features than this stay on the scalar kernel (a 4-level blend).
const MAX_FEATURES: usize = 16;
/// The most thresholds per feature (ranks 0..=255 must fit a byte).
const MAX_CUTS: usize = 255;

/// A forest's trees as byte tables for the vector kernel, built once by [`Forest::from_trees`].
///
/// Each tree is a heap of `leaves` positions from 1: position `p`'s children are `2p + 1` (left, `x <
/// threshold`) and `2p` (right), so a step is `p = 2p − mask`; bottom position `p` is leaf slot `p −
/// leaves`.
///
/// [`Forest::from_trees`]: super::Forest::from_trees
#[derive(Debug, Clone)]
pub(super) struct Ranked {
    /// Per feature, the distinct thresholds the forest splits it at, increasing, padded to 256 with NaN
    /// (which no `c ≤ x` counts), so a rank is a branch-free search of at most 8 steps.
    cuts: Vec<[f32; 256]>,
    /// Per feature, the first step of its rank search: half the smallest power of two above its number
    /// of cuts (0 for a feature no split reads), so a feature with few cuts takes few steps.
    first_steps: Vec<usize>,
    /// `n_trees × leaves` feature numbers per position (position 0 unused).
    features: Vec<u8>,
    /// `n_trees × leaves` threshold ranks per position.
    ranks: Vec<u8>,
    /// `n_trees × leaves` leaf values per slot.
    values: Vec<f32>,
}

impl Ranked {
    /// The tables for trees of `2^depth` leaves in the scalar layout (`splits` with node `i`'s children
    /// at `2i + 1` and `2i + 2`, `leaves` per tree), or `None` when the forest does not fit the kernel:
    /// a depth outside 4..=6, more than 16 features, more than 255 thresholds on one feature.
    pub(super) fn new(n_features: usize, depth: u32, splits: &[Split], leaves: &[f32]) -> Option<Self> {
        if !(4..=6).contains(&depth) || n_features == 0 || n_features > MAX_FEATURES {
            return None;
        }
        let n_leaves = 1usize << depth;
        // Padding splits (under a leaf above the bottom) change nothing, but their threshold 0 would
        // count as a cut: only the splits whose subtrees differ are collected.
        let mut cuts = vec![Vec::new(); n_features];
        for (tree, tree_leaves) in splits.chunks_exact(n_leaves).zip(leaves.chunks_exact(n_leaves)) {
            for (i, split) in tree[..n_leaves - 1].iter().enumerate() {
                if !uniform(i, n_leaves, tree_leaves) {
                    cuts[(split.feature & !DEFAULT_LEFT) as usize].push(split.threshold);
                }
            }
        }
        for cuts in &mut cuts {
            cuts.sort_unstable_by(f32::total_cmp);
            // −0 and +0 are one threshold for `<`.
            cuts.dedup_by(|a, b| a == b);
            if cuts.len() > MAX_CUTS {
                return None;
            }
        }
        let first_steps = cuts.iter().map(|cuts| (cuts.len() + 1).next_power_of_two() / 2).collect();
        let padded = cuts.iter().map(|cuts| {
            let mut padded = [f32::NAN; 256];
            padded[..cuts.len()].copy_from_slice(cuts);
            padded
        });
        let size = splits.len();
        let (features, ranks, values) = (vec![0; size], vec![0; size], vec![0.0; size]);
        let mut ranked = Ranked { cuts: padded.collect(), first_steps, features, ranks, values };
        for (t, (tree, tree_leaves)) in
            splits.chunks_exact(n_leaves).zip(leaves.chunks_exact(n_leaves)).enumerate()
        {
            // (scalar node, heap position), breadth-first.
            let mut stack = vec![(0usize, 1usize)];
            while let Some((i, p)) = stack.pop() {
                let at = t * n_leaves;
                if i >= n_leaves - 1 {
                    ranked.values[at + p - n_leaves] = tree_leaves[i + 1 - n_leaves];
                    continue;
                }
                let Split { threshold, feature } = tree[i];
                let feature = (feature & !DEFAULT_LEFT) as usize;
                ranked.features[at + p] = feature as u8;
                // A padding threshold is not among the cuts; any rank does, both ways are the same.
                ranked.ranks[at + p] = cuts[feature].partition_point(|&c| c < threshold) as u8;
                stack.extend([(2 * i + 1, 2 * p + 1), (2 * i + 2, 2 * p)]);
            }
        }
        Some(ranked)
    }

    /// Whether this CPU runs the kernel (std caches the CPUID answer: a load and a test).
    pub(super) fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Each row's sum of leaf values, tree after tree, for up to [`LANES`] NaN-free rows of
    /// `n_features` values (`block`); lanes past the rows hold garbage.
    ///
    /// # Panics
    /// When [`Ranked::available`] is false (a caller bug: the scalar kernel is the fallback).
    pub(super) fn sums(&self, block: &[f32], n_features: usize, depth: u32) -> [f32; LANES] {
        assert!(Self::available(), "the vector kernel needs AVX2");
        let columns = self.columns::<LANES>(block, n_features);
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: the CPU has AVX2 (asserted above), the only requirement of the kernels.
            unsafe {
                match depth {
                    4 => self.avx2_sums::<16>(&columns),
                    5 => self.avx2_sums::<32>(&columns),
                    _ => self.avx2_sums::<64>(&columns),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (depth, columns);
            unreachable!("no vector kernel on this architecture")
        }
    }

    /// `columns[f][r]`: row `r`'s rank for feature `f`, for up to `L` rows of `block`; features past
    /// `n_features`, and rows past the block, stay 0 and are never read.
    fn columns<const L: usize>(&self, block: &[f32], n_features: usize) -> [[u8; L]; MAX_FEATURES] {
        let mut columns = [[0u8; L]; MAX_FEATURES];
        for (r, row) in block.chunks_exact(n_features).enumerate() {
            for (((column, &x), cuts), &first) in
                columns.iter_mut().zip(row).zip(&self.cuts).zip(&self.first_steps)
            {
                column[r] = rank(cuts, x, first);
            }
        }
        columns
    }

    /// [`Ranked::sums`] for trees of `LEAVES` leaves (16, 32 or 64).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2_sums<const LEAVES: usize>(&self, columns: &[[u8; LANES]; MAX_FEATURES]) -> [f32; LANES] {
        const { assert!(LEAVES == 16 || LEAVES == 32 || LEAVES == 64) };
        let depth = LEAVES.trailing_zeros();
        let columns = columns.map(|column| load32(column));
        let (features, _) = self.features.as_chunks::<LEAVES>();
        let (ranks, _) = self.ranks.as_chunks::<LEAVES>();
        let (values, _) = self.values.as_chunks::<LEAVES>();
        let mut acc = [_mm256_setzero_ps(); 4];
        for ((f, t), v) in features.iter().zip(ranks).zip(values) {
            // `vpshufb` looks a byte up in 16 by the low 4 bits of each lane's position: positions 1..16
            // (levels 0-3) in the first table, 16..32 (level 4) in the second, 32..64 (level 5) in the
            // third or fourth.
            let fb = f;
            let f = tables(f);
            let t = tables(t);
            let mut p = _mm256_set1_epi8(1);
            for level in 0..depth {
                let (x, threshold) = match level {
                    // Positions 1..16: at most 8 per level, so the row's value is a blend over the
                    // columns of the level's features (read from the table as plain bytes), picked by
                    // the position's low bits, instead of over all 16 columns.
                    0..4 => (level_select(&columns, fb, p, level), _mm256_shuffle_epi8(t[0], p)),
                    4 => {
                        let feature = _mm256_shuffle_epi8(f[1], p);
                        (select(&columns, feature), _mm256_shuffle_epi8(t[1], p))
                    }
                    _ => {
                        // Bit 4 of the position picks the table; moved to the top bit for the blend.
                        let high = _mm256_slli_epi16::<3>(p);
                        let pick = |table: &[__m256i; 4]| {
                            let (low, high_table) =
                                (_mm256_shuffle_epi8(table[2], p), _mm256_shuffle_epi8(table[3], p));
                            _mm256_blendv_epi8(low, high_table, high)
                        };
                        (select(&columns, pick(&f)), pick(&t))
                    }
                };
                // Left when rank(x) ≤ rank(threshold), all-ones (−1): the odd child 2p + 1.
                let left = _mm256_cmpeq_epi8(_mm256_min_epu8(x, threshold), x);
                p = _mm256_sub_epi8(_mm256_add_epi8(p, p), left);
            }
            // The bottom positions are LEAVES..2·LEAVES: the mask subtracts LEAVES. Each quarter of
            // the lanes gathers its 8 leaf values.
            let slots = _mm256_and_si256(p, _mm256_set1_epi8(LEAVES as i8 - 1));
            let (low, high) = (_mm256_castsi256_si128(slots), _mm256_extracti128_si256::<1>(slots));
            let quarters = [low, _mm_srli_si128::<8>(low), high, _mm_srli_si128::<8>(high)];
            for (acc, quarter) in acc.iter_mut().zip(quarters) {
                // SAFETY: every index is masked below LEAVES, the length of `v`.
                let leaf = unsafe { _mm256_i32gather_ps::<4>(v.as_ptr(), _mm256_cvtepu8_epi32(quarter)) };
                *acc = _mm256_add_ps(*acc, leaf);
            }
        }
        let mut out = [0.0f32; LANES];
        for (out, acc) in out.chunks_exact_mut(8).zip(acc) {
            // SAFETY: each chunk holds the 8 values stored (unaligned store).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
        }
        out
    }
}

/// How many of `cuts` are `≤ x`: the cuts that are numbers come first and increase, and the NaN
/// padding counts for none, so the answer is the partition point, found by a branch-free search from
/// `first` (half a power of two above the number of cuts: the search reads only the first `2·first − 1`
/// entries, which hold every cut).
fn rank(cuts: &[f32; 256], x: f32, first: usize) -> u8 {
    let mut i = 0usize;
    let mut step = first;
    while step > 0 {
        i += if cuts[(i + step - 1) & 255] <= x { step } else { 0 };
        step >>= 1;
    }
    i as u8
}

/// Whether every leaf under scalar node `i` (of a tree with `n_leaves` leaves) holds the same value:
/// the node is padding or a split that changes nothing.
fn uniform(i: usize, n_leaves: usize, leaves: &[f32]) -> bool {
    let (mut first, mut last) = (i, i);
    while first < n_leaves - 1 {
        first = 2 * first + 1;
        last = 2 * last + 2;
    }
    let under = &leaves[first + 1 - n_leaves..=last + 1 - n_leaves];
    under.iter().all(|v| v.to_bits() == under[0].to_bits())
}

/// 32 bytes into a register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn load32(bytes: [u8; LANES]) -> __m256i {
    // SAFETY: reads the 32 bytes of `bytes` (unaligned load).
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// A tree's byte table as up to four 16-byte lookup tables, each in both halves of a register (as
/// `vpshufb` wants); the tables past `LEAVES` are unused zeros.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn tables<const LEAVES: usize>(table: &[u8; LEAVES]) -> [__m256i; 4] {
    let mut out = [_mm256_setzero_si256(); 4];
    for (out, chunk) in out.iter_mut().zip(table.chunks_exact(16)) {
        // SAFETY: `chunk` holds the 16 bytes read (unaligned load).
        *out = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) });
    }
    out
}

/// Each lane's rank for the feature at its position at `level` (0..4), where the positions are
/// `2^level..2^(level+1)`: the candidates are the columns of those positions' features, and bit `b` of
/// the position picks between pairs at stage `b`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn level_select<const LEAVES: usize>(
    columns: &[__m256i; MAX_FEATURES],
    features: &[u8; LEAVES],
    p: __m256i,
    level: u32,
) -> __m256i {
    let first = 1usize << level;
    let mut candidates = [_mm256_setzero_si256(); 8];
    for (candidate, &feature) in candidates.iter_mut().zip(&features[first..2 * first]) {
        *candidate = columns[usize::from(feature) % MAX_FEATURES];
    }
    for stage in 0..level {
        let bit = match stage {
            0 => _mm256_slli_epi16::<7>(p),
            1 => _mm256_slli_epi16::<6>(p),
            _ => _mm256_slli_epi16::<5>(p),
        };
        for i in 0..(first >> (stage + 1)) {
            candidates[i] = _mm256_blendv_epi8(candidates[2 * i], candidates[2 * i + 1], bit);
        }
    }
    candidates[0]
}

/// Each lane's rank for the feature in that lane: a blend tree over the feature number's 4 bits (bit
/// `b` shifted to the top of its byte picks between the two halves at stage `b`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn select(columns: &[__m256i; MAX_FEATURES], feature: __m256i) -> __m256i {
    let pick = |pairs: &[__m256i], bit: __m256i| -> [__m256i; 8] {
        let mut out = [_mm256_setzero_si256(); 8];
        for (out, pair) in out.iter_mut().zip(pairs.chunks_exact(2)) {
            *out = _mm256_blendv_epi8(pair[0], pair[1], bit);
        }
        out
    };
    let stage = pick(columns, _mm256_slli_epi16::<7>(feature));
    let stage = pick(&stage[..8], _mm256_slli_epi16::<6>(feature));
    let stage = pick(&stage[..4], _mm256_slli_epi16::<5>(feature));
    pick(&stage[..2], _mm256_slli_epi16::<4>(feature))[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_counts_the_cuts_at_or_below_a_value() {
        for n in [0, 1, 2, 3, 4, 7, 8, 100, 127, 128, 254, 255] {
            let real: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let mut cuts = [f32::NAN; 256];
            cuts[..n].copy_from_slice(&real);
            let first = (n + 1).next_power_of_two() / 2;
            for x in [-10.0, -3.0, -2.75, 0.0, 1.0, 49.5, 200.0, f32::INFINITY, f32::NEG_INFINITY] {
                let expected = real.partition_point(|&c| c <= x);
                assert_eq!(usize::from(rank(&cuts, x, first)), expected, "{n} cuts, x = {x}");
                // The full 8-step search agrees.
                assert_eq!(usize::from(rank(&cuts, x, 128)), expected, "{n} cuts, x = {x}, 8 steps");
            }
        }
    }
}
