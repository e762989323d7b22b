//! Where a request's candidates come from: the pool now, narrowed by the subset hint (503 when nothing
//! is left), less the endpoints that are stale or ejected (unless that would leave none: health fails
//! open).
//!
//! The common case is the whole pool. Each worker thread then keeps its candidates from one decision to
//! the next ([`CandidateSet`]): a decision over an unchanged pool neither clones the endpoints' `Arc`s
//! nor reloads the telemetry no scrape has replaced, which was half of a decision over 1,000 endpoints
//! (BENCHMARKS.md §"The decision at 1,000 endpoints"). A narrowed set is built afresh, as before. A
//! worker keeps at most one pool snapshot it has since stopped seeing, until its next decision.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use super::{Director, IncomingRequest, NO_CANDIDATES};
use crate::datastore::{locate, Endpoint, SubsetHint, SubsetMatch};
use crate::error::{DropReason, RequestError};
use crate::scheduling::{Candidate, CandidateSet};

thread_local! {
    /// This worker's candidates of the whole pool, kept between decisions.
    static KEPT: RefCell<CandidateSet> = RefCell::default();
}

/// A request's located endpoints: the whole pool snapshot, or the part of it the request may use.
pub(super) enum Located {
    Pool(Arc<Vec<Arc<Endpoint>>>),
    Narrowed(Vec<Arc<Endpoint>>),
}

impl Located {
    /// Runs `f` over the candidates of these endpoints (see the module docs). Synchronous: a worker's kept
    /// set is borrowed for the call, so `f` must not await.
    pub(super) fn with_candidates<R>(self, f: impl FnOnce(&mut [Candidate]) -> R) -> R {
        match self {
            Located::Pool(pool) => KEPT.with(|kept| match kept.try_borrow_mut() {
                Ok(mut kept) => f(kept.refresh(&pool)),
                // Only if `f` itself located candidates again on this thread: build them, as before.
                Err(_) => f(&mut pool.iter().cloned().map(Candidate::new).collect::<Vec<_>>()),
            }),
            Located::Narrowed(endpoints) => {
                f(&mut endpoints.into_iter().map(Candidate::new).collect::<Vec<_>>())
            }
        }
    }
}

impl Director {
    /// The candidates (see the module docs), as a fresh vector.
    pub fn candidates(&self, req: &IncomingRequest) -> Result<Vec<Candidate>, RequestError> {
        Ok(self.locate_candidates(req)?.with_candidates(|candidates| candidates.to_vec()))
    }

    /// The endpoints a request's candidates come from: 503 when the pool is empty or the subset hint
    /// leaves nothing.
    pub(super) fn locate_candidates(&self, req: &IncomingRequest) -> Result<Located, RequestError> {
        let pool = self.datastore.endpoints();
        if pool.is_empty() {
            return Err(RequestError::unavailable("no endpoints available in the pool")
                .dropped(DropReason::NoEndpoints));
        }
        let now = Instant::now();
        let whole_pool =
            matches!(req.subset, SubsetHint::Absent) || self.options.subset_match == SubsetMatch::Disabled;
        let admits_all = |endpoints: &[Arc<Endpoint>]| {
            self.health.as_ref().is_none_or(|health| endpoints.iter().all(|e| health.admits(e, now)))
        };
        if whole_pool && admits_all(&pool) {
            return Ok(Located::Pool(pool));
        }
        let mut located = self.located(req)?;
        if let Some(health) = &self.health {
            health.retain_admitted(&mut located, now);
        }
        Ok(Located::Narrowed(located))
    }

    /// The pool now, narrowed by the subset hint: 503 when the pool is empty or nothing is left.
    pub(super) fn located(&self, req: &IncomingRequest) -> Result<Vec<Arc<Endpoint>>, RequestError> {
        let pool = self.datastore.endpoints();
        if pool.is_empty() {
            return Err(RequestError::unavailable("no endpoints available in the pool")
                .dropped(DropReason::NoEndpoints));
        }
        let located = locate(&pool, &req.subset, self.options.subset_match);
        if located.is_empty() {
            return Err(RequestError::unavailable(NO_CANDIDATES).dropped(DropReason::NoEndpoints));
        }
        Ok(located)
    }
}
