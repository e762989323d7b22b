//! Admission: whether a request may proceed to scheduling now.
//!
//! Without the `flowControl` feature gate this is the Go EPP's legacy rule: a sheddable request
//! (priority < 0) is rejected with 429 while the configured saturation detector reports the pool at or
//! above 1.0. The flow controller (queues by priority and fairness) plugs in here.

use std::sync::Arc;
use std::time::Instant;

use crate::error::RequestError;
use crate::scheduling::{Candidate, SchedulingRequest};

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

/// The admission stage.
#[derive(Clone, Default)]
pub struct Admission {
    detector: Option<Arc<dyn SaturationDetector>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").field("detector", &self.detector.is_some()).finish()
    }
}

impl Admission {
    /// Legacy admission gated by `detector`; with no detector nothing is shed.
    pub fn legacy(detector: Option<Arc<dyn SaturationDetector>>) -> Self {
        Self { detector }
    }

    /// Admits or rejects the request. Asynchronous because a flow controller may hold it in a queue.
    pub async fn admit(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
    ) -> Result<(), RequestError> {
        if req.priority >= 0 {
            return Ok(());
        }
        match &self.detector {
            Some(d) if d.saturation(candidates, req.now) >= 1.0 => {
                Err(RequestError::exhausted("system saturated, sheddable request dropped"))
            }
            _ => Ok(()),
        }
    }
}
