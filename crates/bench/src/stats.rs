//! Exact latency statistics over every sample: percentiles by the nearest-rank method on the sorted
//! values, plus mean, min and max.
//!
//! Why exact rather than a histogram: a benchmark run holds at most a few million values, sorting them
//! costs milliseconds, and exact figures make two runs comparable without bucket-edge artefacts. Nearest
//! rank always returns a value that was actually measured.

use serde::Serialize;

/// The value at percentile `p` (0–100) of `sorted` (ascending): the smallest value with at least `p`%
/// of the samples at or below it. `None` for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(sorted.len() - 1)])
}

/// Summary of one latency metric, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl LatencySummary {
    /// Summarises `values` (any order; NaNs dropped). `None` when nothing is left.
    pub fn from_values(mut values: Vec<f64>) -> Option<Self> {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        Self::from_sorted(&values)
    }

    /// Summarises values already sorted ascending.
    pub fn from_sorted(sorted: &[f64]) -> Option<Self> {
        let count = sorted.len();
        let at = |p| percentile(sorted, p);
        Some(Self {
            count,
            mean: sorted.iter().sum::<f64>() / count.max(1) as f64,
            min: *sorted.first()?,
            p50: at(50.0)?,
            p90: at(90.0)?,
            p99: at(99.0)?,
            max: *sorted.last()?,
        })
    }
}

/// `numerator / denominator`, or `None` when the denominator is not positive.
pub fn ratio(numerator: f64, denominator: f64) -> Option<f64> {
    (denominator > 0.0 && numerator.is_finite()).then(|| numerator / denominator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 90.0), Some(90.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&values, 99.5), Some(100.0));
        assert_eq!(percentile(&values, 0.0), Some(1.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        // Small sets: p50 of 4 values is the 2nd, p99 the 4th.
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), Some(4.0));
    }

    #[test]
    fn summary_sorts_and_drops_nan() {
        let s = LatencySummary::from_values(vec![3.0, f64::NAN, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(s.count, 4);
        assert_eq!((s.min, s.p50, s.p99, s.max), (1.0, 2.0, 10.0, 10.0));
        assert_eq!(s.mean, 4.0);
        assert!(LatencySummary::from_values(vec![]).is_none());
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
    }
}
