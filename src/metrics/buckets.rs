//! The value kinds the families are built from: histogram bucket layouts (as in the Go EPP except where
//! noted), histogram families over one layout, and the float gauge.
//!
//! The Go `32778` bucket (a typo for 32768) in the response-size and token histograms is `32768` here, and
//! the EPP-overhead histograms use finer buckets (10µs … 1s, a superset of the Go scheduler buckets)
//! because epp's own overhead is measured in microseconds.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// A gauge holding a float (averages, standard deviations).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// A histogram family whose series share one bucket layout.
pub type HistogramFamily<L> = Family<L, Histogram, Buckets>;

/// Builds each new series of a [`HistogramFamily`] with a fixed bucket layout.
#[derive(Debug, Clone, Copy)]
pub struct Buckets(pub &'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

impl Buckets {
    pub fn family<L: Clone + std::hash::Hash + Eq>(self) -> HistogramFamily<L> {
        Family::new_with_constructor(self)
    }
    pub fn histogram(self) -> Histogram {
        self.new_metric()
    }
}

/// GIE "general latency" buckets, 5ms … 1h.
pub const GENERAL_LATENCY: Buckets = Buckets(&[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0,
    20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0,
    3600.0,
]);
/// `llm_d_epp_request_ttft_seconds`: the general buckets cut at 120s.
pub const LLMD_TTFT: Buckets = Buckets(&[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0,
    20.0, 30.0, 45.0, 60.0, 120.0,
]);
/// Request body sizes: 64 B … 1 GiB in powers of two.
pub const REQUEST_BYTES: Buckets = Buckets(&[
    64.0,
    128.0,
    256.0,
    512.0,
    1024.0,
    2048.0,
    4096.0,
    8192.0,
    16384.0,
    32768.0,
    65536.0,
    131072.0,
    262144.0,
    524288.0,
    1048576.0,
    2097152.0,
    4194304.0,
    8388608.0,
    16777216.0,
    33554432.0,
    67108864.0,
    134217728.0,
    268435456.0,
    536870912.0,
    1073741824.0,
]);
/// Response body sizes. Go has `32778` (sic) in place of 32768.
pub const RESPONSE_BYTES: Buckets = Buckets(&[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    65536.0,
]);
/// Input and cached prompt tokens. Go has `32778` (sic) in place of 32768.
pub const INPUT_TOKENS: Buckets = Buckets(&[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    65536.0, 131072.0, 262144.0, 524288.0, 1048576.0,
]);
pub const OUTPUT_TOKENS: Buckets =
    Buckets(&[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0]);
/// Normalized time per output token.
pub const NTPOT: Buckets =
    Buckets(&[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]);
/// Scheduler end-to-end and plugin durations, 100µs … 100ms.
pub const SCHEDULER: Buckets = Buckets(&[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1]);
/// EPP request/response processing overhead, 10µs … 1s (includes every Go scheduler bucket).
pub const OVERHEAD: Buckets = Buckets(&[
    0.00001, 0.000025, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25,
    0.5, 1.0,
]);
pub const HIT_RATIO: Buckets = Buckets(&[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]);
pub const HIT_BYTES: Buckets = Buckets(&[
    0.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0,
]);
