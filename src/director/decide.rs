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
use crate::error::{DropReason, ErrorCode, RequestError};
use crate::scheduling::profile::{NoTrace, ProfileTrace};
use crate::scheduling::{
    Candidate, DispatchInfo, Observer, PendingLoad, Pipeline, PluginId, SaturationDetector, SchedulingError,
    SchedulingRequest, SchedulingResult, StageSaturation,
};
use crate::wire::PREFER_HEADER;

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
    /// `Prefer: if-available` and the chosen decode pod holds none of the prompt (llm-d's conditional
    /// decode; its coordinator then runs the whole pipeline).
    #[error("no decode worker has the requested KV cache")]
    CacheMiss,
}

impl Refusal {
    /// The error the client gets: 429 for load (shed, nothing schedulable), 500 for the rest.
    pub fn into_request_error(self) -> RequestError {
        match self {
            Refusal::Shed | Refusal::NoEndpoint(_) | Refusal::NotAdmitted { load: true, .. } => {
                RequestError::exhausted(self.to_string()).dropped(DropReason::Saturated)
            }
            Refusal::NotAdmitted { load: false, .. } | Refusal::NoTarget => {
                RequestError::internal(self.to_string())
            }
            Refusal::CacheMiss => RequestError::new(ErrorCode::PreconditionFailed, self.to_string()),
        }
    }
}

/// What a traced decision reports besides its outcome: the route probe's explanation. Every method
/// defaults to ignoring it, so [`decide`], which traces into [`NoTrace`], pays nothing for it.
pub(super) trait DecisionTrace: ProfileTrace {
    /// Explaining rather than routing: go on past a refusal, to show what the admitters and scheduling
    /// would have made of the request, and skip the pre-request hooks, so nothing lasting happens.
    fn explaining(&self) -> bool {
        false
    }
    /// Legacy shedding's verdict (only with a shedding detector).
    fn shed(&mut self, _shed: bool) {}
    /// One admitter's verdict, in order.
    fn admitter(&mut self, _plugin: &PluginId, _verdict: &Result<(), String>) {}
    /// The scheduling cycle's outcome, whatever refusal came before it.
    fn scheduled(&mut self, _result: &Result<SchedulingResult, SchedulingError>) {}
}

impl DecisionTrace for NoTrace {}

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
    decide_traced(pipeline, shedding, req, candidates, rng, observer, scheduled, &mut NoTrace)
}

/// [`decide`], telling `trace` each step. The route probe is this function with an explaining trace: the
/// same checks in the same order, the same random draws, so its pick is `decide`'s.
#[allow(clippy::too_many_arguments)]
pub(super) fn decide_traced<T: DecisionTrace + ?Sized>(
    pipeline: &Pipeline,
    shedding: Option<&dyn SaturationDetector>,
    req: &SchedulingRequest<'_>,
    candidates: &mut [Candidate],
    rng: &mut SmallRng,
    observer: &dyn Observer,
    scheduled: &mut dyn FnMut(Option<&Arc<Endpoint>>),
    trace: &mut T,
) -> Result<Decision, Refusal> {
    let explaining = trace.explaining();
    // The first refusal wins; explaining goes on past it (returning it at the end), routing stops.
    let mut refusal = None;
    let mut refuse = |why: Refusal| {
        if !explaining {
            return Err(why);
        }
        refusal.get_or_insert(why);
        Ok(())
    };
    if let Some(detector) = shedding {
        // A P/D pool sheds when either stage is full (StageSaturation); an aggregated pool is one stage.
        let saturation = StageSaturation::of(detector, candidates, req.now, PendingLoad::default());
        let shed = req.priority < 0 && saturation.effective >= 1.0;
        trace.shed(shed);
        if shed {
            refuse(Refusal::Shed)?;
        }
    }
    pipeline.prepare(req, candidates, observer);
    let admitted =
        pipeline.admit_traced(req, candidates, observer, explaining, &mut |id, v| trace.admitter(id, v));
    if let Err((id, reason, load)) = admitted {
        refuse(Refusal::NotAdmitted { plugin: id.name, reason, load })?;
    }
    let result = pipeline.schedule_traced(req, candidates, rng, observer, trace);
    trace.scheduled(&result);
    let result = match result {
        Ok(result) => result,
        Err(e) => {
            scheduled(None);
            return Err(refusal.unwrap_or(Refusal::NoEndpoint(e.to_string())));
        }
    };
    if let Some(why) = refusal {
        return Err(why);
    }
    let endpoint = result.targets().first().cloned().ok_or(Refusal::NoTarget)?;
    if conditional_decode(req) && !holds_prefix(candidates, &endpoint) {
        scheduled(None);
        return Err(Refusal::CacheMiss);
    }
    scheduled(Some(&endpoint));
    let dispatch = dispatch_info(req, candidates, endpoint, result.extras.prefill.clone());
    if !explaining {
        pipeline.pre_request(req, &result, &dispatch, observer);
    }
    Ok(Decision { result, dispatch })
}

/// Whether the request says `Prefer: if-available` (RFC 7240: a comma list of preferences, each with
/// optional `;` parameters; llm-d/llm-d-router:pkg/common/routing/common.go `IsConditionalDecode`).
fn conditional_decode(req: &SchedulingRequest<'_>) -> bool {
    req.headers.get(PREFER_HEADER).is_some_and(|v| {
        v.split(',').any(|p| p.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("if-available"))
    })
}

/// Whether the producers found any of the prompt cached on `endpoint`.
fn holds_prefix(candidates: &[Candidate], endpoint: &Arc<Endpoint>) -> bool {
    candidates
        .iter()
        .find(|c| Arc::ptr_eq(&c.endpoint, endpoint))
        .and_then(|c| c.attrs.prefix)
        .is_some_and(|m| m.match_blocks > 0)
}

/// The dispatch record of `req` to `endpoint`, with the attributes the producers wrote for it.
fn dispatch_info(
    req: &SchedulingRequest<'_>,
    candidates: &[Candidate],
    endpoint: Arc<Endpoint>,
    prefill_endpoint: Option<Arc<Endpoint>>,
) -> DispatchInfo {
    let attrs =
        candidates.iter().find(|c| Arc::ptr_eq(&c.endpoint, &endpoint)).map(|c| c.attrs).unwrap_or_default();
    DispatchInfo {
        dispatch_id: NEXT_DISPATCH.fetch_add(1, Ordering::Relaxed),
        request_id: req.request_id.to_string(),
        target_model: req.target_model.to_string(),
        fairness_id: req.fairness_id.to_string(),
        priority: req.priority,
        endpoint,
        prefill_endpoint,
        input_tokens: req.input_tokens,
        estimated_tokens: req.estimated_tokens,
        // The decision's instant (decide reads no clock): the lab's virtual time, the server's start of
        // processing.
        dispatched_at: req.now,
        attrs,
    }
}
