//! Admission: whether a request may proceed to scheduling now.
//!
//! Without the `flowControl` feature gate this is the Go EPP's legacy rule: a sheddable request
//! (priority < 0) is rejected with 429 while the configured saturation detector reports the pool at or
//! above 1.0. The flow controller (queues by priority and fairness) plugs in here.

use std::sync::Arc;
use std::time::Instant;

use crate::error::RequestError;
use crate::scheduling::{Candidate, SchedulingRequest};

/// How full a set of endpoints is: 1.0 is the gating set point; values above 1.0 are allowed.
pub trait SaturationDetector: Send + Sync {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64;
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
