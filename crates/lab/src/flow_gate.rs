//! Admission as the lab's router runs it: flow control's gate (the queue it guards is the simulation's
//! `flow` module), or legacy shedding.

use std::sync::Arc;
use std::time::Instant;

use epp::config::LoadedConfig;
use epp::scheduling::{Candidate, PendingLoad, SaturationDetector, StageSaturation};

/// What flow control's dispatch cycle asks before it releases a request: the saturation detector over
/// the whole pool, against the usage limit's ceiling (src/flowcontrol/dispatch.rs).
pub(crate) struct FlowGate {
    detector: Arc<dyn SaturationDetector>,
    ceiling: f64,
}

/// The server's two admission modes (src/flowcontrol/mod.rs), around the config's saturation detector.
pub(crate) enum Admission {
    /// Without the `flowControl` gate: a sheddable request (priority < 0) is refused with 429 while the
    /// detector says the pool is full.
    Shedding(Arc<dyn SaturationDetector>),
    /// With it: requests wait in the simulation's queue while the gate says the pool is full.
    FlowControl(FlowGate),
}

impl Admission {
    pub(crate) fn of(loaded: &LoadedConfig) -> Result<Admission, String> {
        let detector = detector_of(loaded)?;
        Ok(match &loaded.flow_control {
            None => Admission::Shedding(detector),
            Some(flow) => Admission::FlowControl(FlowGate { detector, ceiling: flow.usage_limit.threshold }),
        })
    }

    /// The detector legacy admission sheds on (`None` under flow control, which held the request before).
    pub(crate) fn shedding(&self) -> Option<&dyn SaturationDetector> {
        match self {
            Admission::Shedding(detector) => Some(detector.as_ref()),
            Admission::FlowControl(_) => None,
        }
    }

    pub(crate) fn flow_gate(&self) -> Option<&FlowGate> {
        match self {
            Admission::FlowControl(gate) => Some(gate),
            Admission::Shedding(_) => None,
        }
    }
}

impl FlowGate {
    /// Whether the dispatch cycle would release a request now: the pool's saturation, with nothing pending
    /// (the lab schedules a released request at the instant it is released), is below the ceiling; NaN
    /// is full, as in the server.
    pub(crate) fn admits(&self, pool: &[Candidate], now: Instant) -> bool {
        let saturation = StageSaturation::of(self.detector.as_ref(), pool, now, PendingLoad::default());
        !saturation.effective.is_nan() && saturation.effective < self.ceiling
    }
}

/// The config's saturation detector: the loader always names one (`saturationDetector.pluginRef`, else the
/// `utilization-detector` it adds); the server falls back to one of its own only when that plugin has no
/// detector role, which the lab refuses instead.
fn detector_of(loaded: &LoadedConfig) -> Result<Arc<dyn SaturationDetector>, String> {
    let name = loaded.saturation_detector.as_deref().unwrap_or_default();
    loaded
        .pipeline
        .plugin(name)
        .and_then(|p| p.saturation_detector.clone())
        .ok_or_else(|| format!("the saturation detector {name:?} is not a detector"))
}
