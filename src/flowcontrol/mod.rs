//! Admission: whether a request may proceed to scheduling now, is shed, or waits.
//!
//! Two modes (upstream kubernetes-sigs/gateway-api-inference-extension:pkg/epp/requestcontrol/admission.go):
//! - **legacy** (no `flowControl` feature gate): the Go EPP's rule — a sheddable request (priority < 0)
//!   is rejected with 429 while the configured saturation detector reports its candidates at or above
//!   1.0; everything else goes straight to scheduling;
//! - **flow control** (`featureGates: [flowControl]`): the [`FlowController`] holds requests in epp's own
//!   queues — priority bands, fairness between flows, ordering within a flow — and releases them while
//!   the detector says their candidates have room, so excess load waits here instead of in the model
//!   servers' queues, and the queue metrics can drive autoscaling (including from zero).
//!
//! Layout: [`settings`] (bands, limits, policies, as the config loader builds them), [`queue`] (bands,
//! flows, capacity), [`policies`] (ordering keys, fairness), `shared` (the lock-protected state, pending
//! load, tickets and the waker), `controller` (enqueue, wait, cancellation), `dispatch` (the event-driven
//! dispatch cycle), `outcome` (outcomes and their HTTP mapping), `fallback` (the detector used when none
//! is configured), `metrics` (the flow-control families).

mod controller;
mod dispatch;
mod fallback;
mod metrics;
mod outcome;
pub(crate) mod policies;
pub(crate) mod queue;
pub(crate) mod settings;
mod shared;

use std::sync::Arc;

pub use controller::{FlowController, FlowControllerParts, FlowRequest};
pub use dispatch::SAFETY_TICK;
pub use fallback::{ObservedEndpointsDetector, OBSERVED_ENDPOINTS_DETECTOR};
pub use metrics::{FlowControlMetrics, FlowQueueLabels};
pub use outcome::{FlowError, Outcome, NOT_YET_FINALIZED};
pub use settings::{
    FairnessPolicy, FlowControlConfig, OrderingPolicy, PriorityBand, UsageLimitPolicy, DEFAULT_BAND_MAX_BYTES,
};
pub use shared::{DispatchTicket, DispatchWaker};

/// The detector contracts are scheduling's (detectors are plugins); re-exported for flow control's users.
pub use crate::scheduling::{PendingLoad, SaturationDetector};

/// The admission stage: one of two exclusive modes.
#[derive(Clone)]
pub enum Admission {
    /// Legacy shedding: a sheddable request is rejected while `detector` says its candidates are full;
    /// with no detector nothing is shed.
    Legacy { detector: Option<Arc<dyn SaturationDetector>> },
    /// Flow control: requests queue in the controller (the director calls
    /// [`FlowController::enqueue_and_wait`] before it looks for candidates).
    FlowControl(FlowController),
}

impl Default for Admission {
    fn default() -> Self {
        Admission::Legacy { detector: None }
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Admission::Legacy { detector } => {
                f.debug_struct("Legacy").field("detector", &detector.is_some()).finish()
            }
            Admission::FlowControl(controller) => f.debug_tuple("FlowControl").field(controller).finish(),
        }
    }
}

impl Admission {
    /// Legacy admission gated by `detector`; with no detector nothing is shed.
    pub fn legacy(detector: Option<Arc<dyn SaturationDetector>>) -> Self {
        Admission::Legacy { detector }
    }

    /// Flow-control admission through `controller`.
    pub fn flow_control(controller: FlowController) -> Self {
        Admission::FlowControl(controller)
    }

    /// The flow controller, in flow-control mode.
    pub fn flow_controller(&self) -> Option<&FlowController> {
        match self {
            Admission::FlowControl(controller) => Some(controller),
            Admission::Legacy { .. } => None,
        }
    }

    /// The detector legacy admission sheds with (`director::decide` applies the rule); `None` with flow
    /// control, which queues sheddable requests instead, or when no detector is configured.
    pub fn shedding_detector(&self) -> Option<&dyn SaturationDetector> {
        match self {
            Admission::Legacy { detector } => detector.as_deref(),
            Admission::FlowControl(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
