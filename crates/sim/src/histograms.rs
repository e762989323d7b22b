//! The request-level histograms and counters a simulated replica keeps, with vLLM's bucket bounds.
//!
//! Why separate from the page renderer: the replica records into these as requests progress (simulated
//! seconds); [`crate::exposition`] only reads them. Bucket bounds are vLLM V1's (upstream
//! vllm-project/vllm:vllm/v1/metrics/loggers.py).

use crate::engine::FinishReason;

/// vLLM's TTFT buckets.
pub(crate) const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's per-token latency buckets (TPOT, ITL, per-request TPOT).
pub(crate) const TOKEN_LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
/// vLLM's request-phase buckets (e2e, queue, inference, prefill, decode).
pub(crate) const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];

/// A Prometheus histogram: per-bucket counts (the last is `+Inf`), sum and count.
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    pub(crate) bounds: &'static [f64],
    pub(crate) counts: Vec<u64>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 }
    }

    pub(crate) fn observe(&mut self, value: f64) {
        let value = value.max(0.0);
        let bucket = self.bounds.iter().position(|&b| value <= b).unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }
}

/// The request-level series a replica records as its requests progress (simulated seconds).
#[derive(Debug, Clone)]
pub(crate) struct RequestMetrics {
    pub ttft: Histogram,
    /// Every gap between two tokens; vLLM feeds both `time_per_output_token` and `inter_token_latency`.
    pub inter_token: Histogram,
    pub request_tpot: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    pub inference: Histogram,
    pub prefill: Histogram,
    pub decode: Histogram,
    /// Finished requests by reason: stop, length, abort.
    pub success: [u64; 3],
}

impl Default for RequestMetrics {
    fn default() -> Self {
        Self {
            ttft: Histogram::new(TTFT_BUCKETS),
            inter_token: Histogram::new(TOKEN_LATENCY_BUCKETS),
            request_tpot: Histogram::new(TOKEN_LATENCY_BUCKETS),
            e2e: Histogram::new(REQUEST_LATENCY_BUCKETS),
            queue: Histogram::new(REQUEST_LATENCY_BUCKETS),
            inference: Histogram::new(REQUEST_LATENCY_BUCKETS),
            prefill: Histogram::new(REQUEST_LATENCY_BUCKETS),
            decode: Histogram::new(REQUEST_LATENCY_BUCKETS),
            success: [0; 3],
        }
    }
}

impl RequestMetrics {
    pub(crate) fn count_finished(&mut self, reason: FinishReason) {
        let slot = match reason {
            FinishReason::Stop => 0,
            FinishReason::Length => 1,
            FinishReason::Abort => 2,
        };
        self.success[slot] += 1;
    }
}
