//! The saturation contract: how full a set of endpoints is. Detectors are plugins (they may also filter
//! endpoints), and the admission stage in `flowcontrol` consumes them, so the contract lives here, below
//! both.

use std::time::Instant;

use super::Candidate;

/// Load that flow control has released for dispatch but that has not yet reached an endpoint (scheduling
/// and pre-request hooks have not run for it), so a burst released at once cannot overshoot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingLoad {
    pub requests: u64,
    pub tokens: u64,
}

/// How full a set of endpoints is: 1.0 is the gating set point; values above 1.0 are allowed.
pub trait SaturationDetector: Send + Sync {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64;

    /// Saturation counting `pending` load not yet visible on any endpoint. Detectors that count requests or
    /// tokens add it; telemetry-based detectors may ignore it (the default).
    fn saturation_with_pending(&self, candidates: &[Candidate], now: Instant, pending: PendingLoad) -> f64 {
        let _ = pending;
        self.saturation(candidates, now)
    }

    /// How many of `candidates` this detector treats as stale (for `llm_d_epp_flow_control_stale_endpoints`).
    fn stale_endpoints(&self, candidates: &[Candidate], now: Instant) -> usize {
        let _ = (candidates, now);
        0
    }
}
