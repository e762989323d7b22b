//! Admission: whether a request may proceed to scheduling now, is shed, or waits.
//!
//! Two modes (flow-control.md §1):
//! - **legacy** (no `flowControl` feature gate): the Go EPP's rule — a sheddable request (priority < 0)
//!   is rejected with 429 while the configured saturation detector reports its candidates at or above
//!   1.0; everything else goes straight to scheduling;
//! - **flow control** (`featureGates: [flowControl]`): the [`FlowController`] holds requests in epp's own
//!   queues — priority bands, fairness between flows, ordering within a flow — and releases them while
//!   the detector says their candidates have room, so excess load waits here instead of in the model
//!   servers' queues, and the queue metrics can drive autoscaling (including from zero).
//!
//! Layout: [`queue`] (bands, flows, capacity), [`policies`] (ordering keys, fairness), `controller`
//! (enqueue, wait, cancellation, pending load), `dispatch` (the event-driven dispatch cycle), `outcome`
//! (outcomes and their HTTP mapping), `fallback` (the detector used when none is configured).

mod controller;
mod dispatch;
mod fallback;
mod outcome;
pub mod policies;
pub mod queue;

use std::sync::Arc;
use std::time::Instant;

pub use controller::{DispatchTicket, DispatchWaker, FlowController, FlowControllerParts, FlowRequest};
pub use dispatch::SAFETY_TICK;
pub use fallback::{ObservedEndpointsDetector, OBSERVED_ENDPOINTS_DETECTOR};
pub use outcome::{FlowError, Outcome, NOT_YET_FINALIZED};

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

/// The admission stage: legacy shedding, or the flow controller.
#[derive(Clone, Default)]
pub struct Admission {
    detector: Option<Arc<dyn SaturationDetector>>,
    flow: Option<FlowController>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("detector", &self.detector.is_some())
            .field("flow", &self.flow)
            .finish()
    }
}

impl Admission {
    /// Legacy admission gated by `detector`; with no detector nothing is shed.
    pub fn legacy(detector: Option<Arc<dyn SaturationDetector>>) -> Self {
        Self { detector, flow: None }
    }

    /// Flow-control admission: requests queue in `controller` (the director calls
    /// [`FlowController::enqueue_and_wait`] before it looks for candidates).
    pub fn flow_control(controller: FlowController) -> Self {
        Self { detector: None, flow: Some(controller) }
    }

    /// The flow controller, in flow-control mode.
    pub fn flow_controller(&self) -> Option<&FlowController> {
        self.flow.as_ref()
    }

    /// The legacy rule: admits or sheds the request given its candidates. In flow-control mode this
    /// admits everything (negative priorities are queued, not shed).
    pub async fn admit(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
    ) -> Result<(), RequestError> {
        if req.priority >= 0 || self.flow.is_some() {
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

#[cfg(test)]
mod tests;
