//! The training sample window: a sliding window stratified like llm-d's (llm-d/llm-d-latency-predictor:
//! training/training_server.py) by queue × KV × prefix buckets, each bucket keeping its newest
//! `per_bucket` samples, plus a held-out test set chosen by a hash of the sample.
//!
//! Why stratified: a plain sliding window fills with whatever the traffic did last (all idle at night,
//! all saturated in a burst) and the model forgets the rest; a per-bucket cap keeps rare regimes.

use std::collections::VecDeque;

/// Waiting-queue bucket bounds, llm-d's: 0, 1–2, 3–5, 6–10, 11+.
const QUEUE_BUCKETS: usize = 5;
/// KV-cache buckets of 5% each.
const KV_BUCKETS: usize = 20;
/// Prefix-score buckets of 0.25 each.
const PREFIX_BUCKETS: usize = 4;
/// Buckets per window.
pub const BUCKETS: usize = QUEUE_BUCKETS * KV_BUCKETS * PREFIX_BUCKETS;

/// One completed request: its feature row at dispatch and what was observed.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<const N: usize> {
    pub row: [f32; N],
    pub target: f32,
}

/// Which stratum a sample belongs to.
pub fn bucket(waiting: u32, kv_cache_percentage: f32, prefix_cache_score: f32) -> usize {
    let queue = match waiting {
        0 => 0,
        1..=2 => 1,
        3..=5 => 2,
        6..=10 => 3,
        _ => 4,
    };
    let index =
        |x: f32, n: usize| if x.is_nan() { 0 } else { ((x.clamp(0.0, 1.0) * n as f32) as usize).min(n - 1) };
    (queue * KV_BUCKETS + index(kv_cache_percentage, KV_BUCKETS)) * PREFIX_BUCKETS
        + index(prefix_cache_score, PREFIX_BUCKETS)
}

/// Training buckets plus a held-out test set, each capped; the oldest sample leaves first.
#[derive(Debug, Clone)]
pub struct StratifiedWindow<const N: usize> {
    per_bucket: usize,
    test_cap: usize,
    test_percent: u64,
    buckets: Vec<VecDeque<Sample<N>>>,
    test: VecDeque<Sample<N>>,
}

impl<const N: usize> StratifiedWindow<N> {
    /// llm-d's chart values are `per_bucket` 500, `test_cap` 1000, `test_percent` 10.
    pub fn new(per_bucket: usize, test_cap: usize, test_percent: u64) -> Self {
        StratifiedWindow {
            per_bucket,
            test_cap,
            test_percent: test_percent.min(100),
            buckets: vec![VecDeque::new(); BUCKETS],
            test: VecDeque::new(),
        }
    }

    /// Adds a sample to its bucket (or to the test set when its hash says so), evicting the oldest of
    /// that bucket past the cap. `bucket` comes from [`bucket`] (taken modulo [`BUCKETS`]).
    pub fn push(&mut self, bucket: usize, sample: Sample<N>) {
        let (queue, cap) = if fingerprint(&sample) % 100 < self.test_percent {
            (&mut self.test, self.test_cap)
        } else {
            (&mut self.buckets[bucket % BUCKETS], self.per_bucket)
        };
        if cap == 0 {
            return;
        }
        if queue.len() == cap {
            queue.pop_front();
        }
        queue.push_back(sample);
    }

    /// Training samples held.
    pub fn len(&self) -> usize {
        self.buckets.iter().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Samples per bucket (for the gauges).
    pub fn bucket_counts(&self) -> impl Iterator<Item = usize> + '_ {
        self.buckets.iter().map(VecDeque::len)
    }

    /// The held-out test samples.
    pub fn test(&self) -> impl Iterator<Item = &Sample<N>> {
        self.test.iter()
    }

    /// The training set as the trainer takes it: rows one after another, and their targets.
    pub fn training_set(&self, rows: &mut Vec<f32>, targets: &mut Vec<f32>) {
        rows.clear();
        targets.clear();
        for sample in self.buckets.iter().flatten() {
            rows.extend_from_slice(&sample.row);
            targets.push(sample.target);
        }
    }
}

/// FNV-1a over the sample's bits: the same sample always lands on the same side of the split.
fn fingerprint<const N: usize>(sample: &Sample<N>) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for bits in sample.row.iter().chain([&sample.target]).map(|x| x.to_bits()) {
        for byte in bits.to_le_bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_llmd_bounds() {
        assert_eq!(bucket(0, 0.0, 0.0), 0);
        assert_eq!(bucket(2, 0.0, 0.0), bucket(1, 0.0, 0.0));
        assert_ne!(bucket(3, 0.0, 0.0), bucket(2, 0.0, 0.0));
        assert_eq!(bucket(11, 0.0, 0.0), bucket(500, 0.0, 0.0));
        assert_eq!(bucket(0, 0.049, 0.0), bucket(0, 0.0, 0.0));
        assert_ne!(bucket(0, 0.05, 0.0), bucket(0, 0.0, 0.0));
        assert_eq!(bucket(0, 1.0, 1.0), bucket(0, 0.99, 0.8));
        assert_eq!(bucket(99, 1.0, 1.0), BUCKETS - 1);
        assert_eq!(bucket(0, f32::NAN, f32::NAN), 0);
    }

    #[test]
    fn each_bucket_keeps_its_newest_samples_up_to_the_cap() {
        let mut window = StratifiedWindow::<1>::new(3, 10, 0);
        for i in 0..10 {
            window.push(bucket(0, 0.0, 0.0), Sample { row: [i as f32], target: 1.0 });
        }
        window.push(bucket(20, 0.5, 0.5), Sample { row: [99.0], target: 2.0 });
        assert_eq!(window.len(), 4);
        assert_eq!(window.bucket_counts().filter(|&n| n > 0).count(), 2);
        let (mut rows, mut targets) = (Vec::new(), Vec::new());
        window.training_set(&mut rows, &mut targets);
        assert_eq!(rows, vec![7.0, 8.0, 9.0, 99.0], "the burst in bucket 0 did not crowd out the rare one");
        assert_eq!(targets, vec![1.0, 1.0, 1.0, 2.0]);
    }

    #[test]
    fn about_the_test_percent_is_held_out_and_capped() {
        let mut window = StratifiedWindow::<2>::new(10_000, 100_000, 10);
        for i in 0..10_000 {
            window.push(i % BUCKETS, Sample { row: [i as f32, 1.0], target: (i * 7) as f32 });
        }
        let held_out = window.test().count();
        assert!((800..1200).contains(&held_out), "{held_out} of 10,000 held out");
        assert_eq!(window.len() + held_out, 10_000);
        let mut capped = StratifiedWindow::<2>::new(10, 5, 100);
        for i in 0..20 {
            capped.push(0, Sample { row: [i as f32, 0.0], target: 0.0 });
        }
        assert_eq!((capped.test().count(), capped.len()), (5, 0));
        assert!(capped.is_empty());
    }
}
