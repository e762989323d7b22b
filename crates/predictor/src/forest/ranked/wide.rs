//! The same walk as [`Ranked::sums`] over 64 rows, in the byte lanes of AVX-512 registers, where the
//! CPU has AVX-512 BW and VBMI (checked at run time).
//!
//! Why it is more than twice the lanes: VBMI's `vpermb` looks a byte up in 64, so a depth-6 tree's
//! per-position features and threshold ranks are one register each, read for all 64 lanes in one
//! instruction at any level (the AVX2 kernel splits them into 16-byte `vpshufb` tables and blends);
//! the column blends take a mask register (`vptestmb`) instead of a shifted byte per `vpblendvb`; and a
//! tree's 64 leaf values sit in four registers, read with two-register permutes instead of gathers.
//! Leaf values are summed per row, tree after tree, in the scalar kernel's order, so the predictions
//! are bit for bit the scalar (and AVX2) ones; the forest's tests check it on CPUs that have it.

use super::{Ranked, MAX_FEATURES};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows walked together: one per byte lane of a 512-bit register.
pub(in crate::forest) const WIDE_LANES: usize = 64;

impl Ranked {
    /// Whether this CPU runs the 64-lane kernel (std caches the CPUID answers).
    pub(in crate::forest) fn wide_available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vbmi")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// [`Ranked::sums`] for up to [`WIDE_LANES`] NaN-free rows; lanes past the rows hold garbage.
    ///
    /// # Panics
    /// When [`Ranked::wide_available`] is false (a caller bug: the AVX2 kernel is the fallback).
    pub(in crate::forest) fn wide_sums(
        &self,
        block: &[f32],
        n_features: usize,
        depth: u32,
    ) -> [f32; WIDE_LANES] {
        assert!(Self::wide_available(), "the 64-lane kernel needs AVX-512 BW and VBMI");
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: the CPU has AVX-512 F, BW and VBMI (asserted above), the kernels' only requirement.
            unsafe {
                let columns = self.avx512_columns(block, n_features);
                match depth {
                    4 => self.avx512_sums::<16>(&columns),
                    5 => self.avx512_sums::<32>(&columns),
                    _ => self.avx512_sums::<64>(&columns),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (block, n_features, depth);
            unreachable!("no vector kernel on this architecture")
        }
    }

    /// [`Ranked::columns`] for 64 rows, 16 rows at a time: each lane's branch-free search of the
    /// feature's cuts with gathers (a comparison that is false for NaN, as the scalar `≤`), so the rank
    /// of a row costs a gather per step instead of a dependent load.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn avx512_columns(&self, block: &[f32], n_features: usize) -> [[u8; WIDE_LANES]; MAX_FEATURES] {
        let mut columns = [[0u8; WIDE_LANES]; MAX_FEATURES];
        let rows = block.len() / n_features;
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let stride = _mm512_set1_epi32(n_features as i32);
        for q in 0..WIDE_LANES / 16 {
            let present = rows.saturating_sub(16 * q).min(16);
            if present == 0 {
                break;
            }
            let valid: __mmask16 = if present == 16 { !0 } else { (1u16 << present) - 1 };
            // Row r's first value is at r · n_features.
            let starts = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(16 * q as i32)), stride);
            for (f, (cuts, &first)) in self.cuts.iter().zip(&self.first_steps).enumerate().take(n_features) {
                if first == 0 {
                    continue;
                }
                let index = _mm512_add_epi32(starts, _mm512_set1_epi32(f as i32));
                // SAFETY: only the present rows' lanes are read, each inside `block`.
                let x = unsafe {
                    _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), valid, index, block.as_ptr())
                };
                let mut rank = _mm512_setzero_si512();
                let mut step = first as i32;
                while step > 0 {
                    let at = _mm512_add_epi32(rank, _mm512_set1_epi32(step - 1));
                    // SAFETY: `at` ≤ 2·first − 2 ≤ 254, inside the 256 padded cuts.
                    let cut = unsafe { _mm512_i32gather_ps::<4>(at, cuts.as_ptr()) };
                    let below = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(cut, x);
                    rank = _mm512_mask_add_epi32(rank, below, rank, _mm512_set1_epi32(step));
                    step >>= 1;
                }
                let bytes = _mm512_cvtepi32_epi8(rank);
                // SAFETY: stores the 16 bytes into the column's quarter q.
                unsafe { _mm_storeu_si128(columns[f][16 * q..].as_mut_ptr().cast(), bytes) };
            }
        }
        columns
    }

    /// [`Ranked::wide_sums`] for trees of `LEAVES` leaves (16, 32 or 64).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    fn avx512_sums<const LEAVES: usize>(
        &self,
        columns: &[[u8; WIDE_LANES]; MAX_FEATURES],
    ) -> [f32; WIDE_LANES] {
        const { assert!(LEAVES == 16 || LEAVES == 32 || LEAVES == 64) };
        let depth = LEAVES.trailing_zeros();
        // SAFETY: each load reads the 64 bytes of one column.
        let columns = columns.map(|column| unsafe { _mm512_loadu_si512(column.as_ptr().cast()) });
        let (features, _) = self.features.as_chunks::<LEAVES>();
        let (ranks, _) = self.ranks.as_chunks::<LEAVES>();
        let (values, _) = self.values.as_chunks::<LEAVES>();
        // The first LEAVES bytes of a 64-byte register; the rest zero (positions a tree does not have).
        let byte_mask: __mmask64 = if LEAVES == 64 { !0 } else { (1u64 << LEAVES) - 1 };
        let one = _mm512_set1_epi8(1);
        let mut acc = [_mm512_setzero_ps(); 4];
        for ((f, t), v) in features.iter().zip(ranks).zip(values) {
            // SAFETY: masked loads read only the tree's LEAVES bytes (masked-off bytes are not accessed).
            let (feature_table, rank_table) = unsafe {
                (
                    _mm512_maskz_loadu_epi8(byte_mask, f.as_ptr().cast()),
                    _mm512_maskz_loadu_epi8(byte_mask, t.as_ptr().cast()),
                )
            };
            let mut p = one;
            for level in 0..depth {
                let x = if level < 4 {
                    level_select(&columns, f, p, level)
                } else {
                    select(&columns, _mm512_permutexvar_epi8(p, feature_table))
                };
                let threshold = _mm512_permutexvar_epi8(p, rank_table);
                // Left (the odd child 2p + 1) when rank(x) ≤ rank(threshold).
                let left = _mm512_cmple_epu8_mask(x, threshold);
                let doubled = _mm512_add_epi8(p, p);
                p = _mm512_mask_add_epi8(doubled, left, doubled, one);
            }
            // The bottom positions are LEAVES..2·LEAVES: the mask subtracts LEAVES.
            let slots = _mm512_and_si512(p, _mm512_set1_epi8(LEAVES as i8 - 1));
            let leaves = leaf_registers(v);
            let quarters = [
                _mm512_extracti32x4_epi32::<0>(slots),
                _mm512_extracti32x4_epi32::<1>(slots),
                _mm512_extracti32x4_epi32::<2>(slots),
                _mm512_extracti32x4_epi32::<3>(slots),
            ];
            for (acc, quarter) in acc.iter_mut().zip(quarters) {
                let index = _mm512_cvtepu8_epi32(quarter);
                let low = _mm512_permutex2var_ps(leaves[0], index, leaves[1]);
                let high = _mm512_permutex2var_ps(leaves[2], index, leaves[3]);
                let upper = _mm512_test_epi32_mask(index, _mm512_set1_epi32(32));
                *acc = _mm512_add_ps(*acc, _mm512_mask_blend_ps(upper, low, high));
            }
        }
        let mut out = [0.0f32; WIDE_LANES];
        for (out, acc) in out.chunks_exact_mut(16).zip(acc) {
            // SAFETY: each chunk holds the 16 values stored (unaligned store).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
        }
        out
    }
}

/// A tree's leaf values in four registers of 16, zeros past `LEAVES`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn leaf_registers<const LEAVES: usize>(values: &[f32; LEAVES]) -> [__m512; 4] {
    let mut out = [_mm512_setzero_ps(); 4];
    for (out, chunk) in out.iter_mut().zip(values.chunks(16)) {
        let mask: __mmask16 = if chunk.len() == 16 { !0 } else { (1u16 << chunk.len()) - 1 };
        // SAFETY: the masked load reads only the chunk's values.
        *out = unsafe { _mm512_maskz_loadu_ps(mask, chunk.as_ptr()) };
    }
    out
}

/// Each lane's rank for the feature at its position at `level` (0..4), positions `2^level..2^(level+1)`:
/// a blend over those positions' features' columns, bit `b` of the position picking at stage `b`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn level_select<const LEAVES: usize>(
    columns: &[__m512i; MAX_FEATURES],
    features: &[u8; LEAVES],
    p: __m512i,
    level: u32,
) -> __m512i {
    let first = 1usize << level;
    let mut candidates = [_mm512_setzero_si512(); 8];
    for (candidate, &feature) in candidates.iter_mut().zip(&features[first..2 * first]) {
        *candidate = columns[usize::from(feature) % MAX_FEATURES];
    }
    for stage in 0..level {
        let bit = _mm512_test_epi8_mask(p, _mm512_set1_epi8(1 << stage));
        for i in 0..(first >> (stage + 1)) {
            candidates[i] = _mm512_mask_blend_epi8(bit, candidates[2 * i], candidates[2 * i + 1]);
        }
    }
    candidates[0]
}

/// Each lane's rank for the feature in that lane: a blend tree over the feature number's 4 bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn select(columns: &[__m512i; MAX_FEATURES], feature: __m512i) -> __m512i {
    let mut stage = *columns;
    let mut width = MAX_FEATURES;
    for b in 0..4 {
        let bit = _mm512_test_epi8_mask(feature, _mm512_set1_epi8(1 << b));
        width /= 2;
        for i in 0..width {
            stage[i] = _mm512_mask_blend_epi8(bit, stage[2 * i], stage[2 * i + 1]);
        }
    }
    stage[0]
}
