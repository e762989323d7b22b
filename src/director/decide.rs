//! The decision: given a request and its candidates' telemetry snapshot, which endpoint serves it.
//!
//! Synchronous, with no I/O and no clock but the request's `now`, over the candidates' telemetry snapshot,
//! so the same function runs in the server (between flow control and the answer) and in the virtual-time
//! lab (at simulated time). In order: legacy shedding (a sheddable request while the detector reports
//! saturation), the data producers, the admitters, the scheduling profiles and picker, then the
//! pre-request hooks — the only step with lasting effects: they record the dispatch in the plugins' own
//! state (in-flight counts, the prefix index), so a decision must be followed by `Director::finish` (or,
//! in the lab, by the response hooks), whose `ActiveRequest` releases that state when the request ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;

use crate::datastore::Endpoint;
use crate::error::RequestError;
use crate::scheduling::{
    Candidate, DispatchInfo, Observer, Pipeline, SaturationDetector, SchedulingRequest, SchedulingResult,
};

/// Numbers dispatches: unique in the process, so per-request plugin state never collides.
static NEXT_DISPATCH: AtomicU64 = AtomicU64::new(1);

/// A decided request: the scheduling result and the dispatch record the response hooks will see.
#[derive(Debug)]
pub struct Decision {
    pub result: SchedulingResult,
    pub dispatch: DispatchInfo,
}

impl Decision {
    /// The endpoint the request goes to first.
    pub fn primary(&self) -> &Arc<Endpoint> {
        &self.dispatch.endpoint
    }
}

/// Why no endpoint was decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Legacy admission: a sheddable request while its candidates are saturated.
    #[error("system saturated, sheddable request dropped")]
    Shed,
    /// An admitter plugin refused the request; `load` when the admitter's denials mean load (429).
    #[error("request cannot be admitted by {plugin}: {reason}")]
    NotAdmitted { plugin: String, reason: String, load: bool },
    /// Every candidate was filtered out, or none could be picked.
    #[error("failed to find target endpoint: {0}")]
    NoEndpoint(String),
    /// The pipeline finished without a target (a plugin bug, not the request's fault).
    #[error("scheduler returned no target")]
    NoTarget,
}

impl Refusal {
    /// The error the client gets: 429 for load (shed, nothing schedulable), 500 for the rest.
    pub fn into_request_error(self) -> RequestError {
        match self {
            Refusal::Shed | Refusal::NoEndpoint(_) | Refusal::NotAdmitted { load: true, .. } => {
                RequestError::exhausted(self.to_string())
            }
            Refusal::NotAdmitted { load: false, .. } | Refusal::NoTarget => {
                RequestError::internal(self.to_string())
            }
        }
    }
}

/// Decides where `req` goes among `candidates` (whose per-request attributes the producers fill in).
/// `shedding` is the legacy admission detector, `None` with flow control (which queued the request
/// instead) or when nothing is shed. `scheduled` is told the outcome of the scheduling cycle — the picked
/// endpoint, or `None` when nothing could be picked — as soon as it is known, before the pre-request
/// hooks run (the server times scheduling with it; the lab passes `&mut |_| {}`).
pub fn decide(
    pipeline: &Pipeline,
    shedding: Option<&dyn SaturationDetector>,
    req: &SchedulingRequest<'_>,
    candidates: &mut [Candidate],
    rng: &mut SmallRng,
    observer: &dyn Observer,
    scheduled: &mut dyn FnMut(Option<&Arc<Endpoint>>),
) -> Result<Decision, Refusal> {
    if let Some(detector) = shedding {
        if req.priority < 0 && detector.saturation(candidates, req.now) >= 1.0 {
            return Err(Refusal::Shed);
        }
    }
    pipeline.prepare(req, candidates, observer);
    pipeline.admit(req, candidates, observer).map_err(|(id, reason, load)| Refusal::NotAdmitted {
        plugin: id.name,
        reason,
        load,
    })?;
    let result = match pipeline.schedule(req, candidates, rng, observer) {
        Ok(result) => result,
        Err(e) => {
            scheduled(None);
            return Err(Refusal::NoEndpoint(e.to_string()));
        }
    };
    let endpoint = result.targets().first().cloned().ok_or(Refusal::NoTarget)?;
    scheduled(Some(&endpoint));
    let attrs =
        candidates.iter().find(|c| Arc::ptr_eq(&c.endpoint, &endpoint)).map(|c| c.attrs).unwrap_or_default();
    let dispatch = DispatchInfo {
        dispatch_id: NEXT_DISPATCH.fetch_add(1, Ordering::Relaxed),
        request_id: req.request_id.to_string(),
        target_model: req.target_model.to_string(),
        fairness_id: req.fairness_id.to_string(),
        priority: req.priority,
        endpoint,
        input_tokens: req.input_tokens,
        estimated_tokens: req.estimated_tokens,
        // The decision's instant (decide reads no clock): the lab's virtual time, the server's start of
        // processing.
        dispatched_at: req.now,
        attrs,
    };
    pipeline.pre_request(req, &result, &dispatch, observer);
    Ok(Decision { result, dispatch })
}
