//! Flow control's gate, as the lab's router asks it; the queue it guards is the simulation's `flow`
//! module.

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

impl FlowGate {
    /// The gate of a config with the `flowControl` gate on, around its saturation detector.
    pub(crate) fn of(loaded: &LoadedConfig) -> Result<Option<FlowGate>, String> {
        let Some(flow) = &loaded.flow_control else { return Ok(None) };
        Ok(Some(FlowGate { detector: detector_of(loaded)?, ceiling: flow.usage_limit.threshold }))
    }

    /// Whether the dispatch cycle would release a request now: the pool's saturation, with nothing pending
    /// (the lab schedules a released request at the instant it is released), is below the ceiling; NaN
    /// is full, as in the server.
    pub(crate) fn admits(&self, pool: &[Candidate], now: Instant) -> bool {
        let saturation = StageSaturation::of(self.detector.as_ref(), pool, now, PendingLoad::default());
        !saturation.effective.is_nan() && saturation.effective < self.ceiling
    }
}

/// The config's saturation detector, for flow control or (without it) legacy shedding: the loader always
/// names one (`saturationDetector.pluginRef`, else the `utilization-detector` it adds); the server falls
/// back to one of its own only when that plugin has no detector role, which the lab refuses instead.
pub(crate) fn detector_of(loaded: &LoadedConfig) -> Result<Arc<dyn SaturationDetector>, String> {
    let name = loaded.saturation_detector.as_deref().unwrap_or_default();
    loaded
        .pipeline
        .plugin(name)
        .and_then(|p| p.saturation_detector.clone())
        .ok_or_else(|| format!("the saturation detector {name:?} is not a detector"))
}
