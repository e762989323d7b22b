//! Quantile binning: each feature's values become a bin number (a `u8`), so finding a split scans 256
//! histogram slots instead of sorting rows, as XGBoost's `hist` method and LightGBM do.
//!
//! A feature's cut points are increasing; `bin(x)` is how many cuts are `≤ x`. Then `bin(x) ≤ b` exactly
//! when `x < cuts[b]`, so a split found on bins becomes the engine's `x < threshold` rule with
//! `threshold = cuts[b]` and no rounding in between. A missing value (NaN) is bin 0: it goes left at
//! every split, and the trained trees say so with `default_left`.

/// Bin numbers per row and feature, row-major, plus each feature's cut points.
pub(super) struct Binned {
    pub n_rows: usize,
    pub n_features: usize,
    /// `n_rows × n_features` bin numbers, row after row (a row's bins share a cache line).
    pub bins: Vec<u8>,
    /// Per feature, at most `max_bins − 1` increasing cut points.
    pub cuts: Vec<Vec<f32>>,
}

/// At most this many rows are sorted to find a feature's cuts; more rows add little to the quantiles.
const CUT_SAMPLE: usize = 65_536;

impl Binned {
    /// Bins `rows` (`n_features` values per row). `max_bins` is clamped to 2..=256.
    pub(super) fn new(rows: &[f32], n_features: usize, max_bins: usize) -> Self {
        let n_rows = rows.len().checked_div(n_features).unwrap_or(0);
        let max_bins = max_bins.clamp(2, 256);
        let stride = n_rows.div_ceil(CUT_SAMPLE).max(1);
        let cuts: Vec<Vec<f32>> = (0..n_features)
            .map(|f| {
                let mut values: Vec<f32> = (0..n_rows)
                    .step_by(stride)
                    .map(|r| rows[r * n_features + f])
                    .filter(|x| !x.is_nan())
                    .collect();
                feature_cuts(&mut values, max_bins)
            })
            .collect();
        let mut bins = vec![0u8; n_rows * n_features];
        for (row, out) in rows.chunks_exact(n_features.max(1)).zip(bins.chunks_exact_mut(n_features.max(1))) {
            for ((x, b), cuts) in row.iter().zip(out.iter_mut()).zip(&cuts) {
                // NaN compares false, so it counts no cut and lands in bin 0.
                *b = cuts.partition_point(|&c| c <= *x) as u8;
            }
        }
        Binned { n_rows, n_features, bins, cuts }
    }
}

/// Cut points for one feature's (non-NaN) values: midpoints between neighbours when there are few
/// distinct values, else quantiles of the sorted values.
fn feature_cuts(values: &mut [f32], max_bins: usize) -> Vec<f32> {
    values.sort_unstable_by(f32::total_cmp);
    let mut distinct: Vec<f32> = Vec::new();
    for &v in values.iter() {
        if distinct.last() != Some(&v) {
            distinct.push(v);
        }
    }
    if distinct.len() <= max_bins {
        // Midpoints generalise better than the values themselves; `hi` when rounding lands on `lo`.
        return distinct
            .windows(2)
            .map(|pair| {
                let mid = pair[0] + (pair[1] - pair[0]) / 2.0;
                if mid > pair[0] && mid.is_finite() {
                    mid
                } else {
                    pair[1]
                }
            })
            .collect();
    }
    let n = values.len();
    let mut cuts: Vec<f32> = Vec::with_capacity(max_bins - 1);
    for k in 1..max_bins {
        let cut = values[k * n / max_bins];
        // A cut at the minimum would leave its left side empty; repeats add nothing.
        if cut > values[0] && cuts.last().is_none_or(|&last| cut > last) {
            cuts.push(cut);
        }
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_order_matches_the_threshold_rule() {
        let rows: Vec<f32> = (0..1000).map(|i| (i % 300) as f32 * 0.37).collect();
        let binned = Binned::new(&rows, 1, 256);
        assert!(binned.cuts[0].len() <= 255);
        for (x, &bin) in rows.iter().zip(&binned.bins) {
            for (b, &cut) in binned.cuts[0].iter().enumerate() {
                assert_eq!(usize::from(bin) <= b, *x < cut, "x={x} bin={bin} cut[{b}]={cut}");
            }
        }
    }

    #[test]
    fn few_distinct_values_get_one_bin_each_and_nan_is_bin_zero() {
        let rows = [3.0, 1.0, f32::NAN, 2.0, 1.0, 3.0];
        let binned = Binned::new(&rows, 1, 256);
        assert_eq!(binned.cuts[0], vec![1.5, 2.5]);
        assert_eq!(binned.bins, vec![2, 0, 0, 1, 0, 2]);
    }

    #[test]
    fn constant_features_have_no_cuts() {
        let binned = Binned::new(&[4.0; 10], 2, 256);
        assert!(binned.cuts.iter().all(Vec::is_empty));
        assert_eq!(binned.n_rows, 5);
    }
}
