//! The dispatcher (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/flowcontrol/controller/internal/processor.go
//! (dispatchCycle)): one task that releases queued requests while the pool has room.
//!
//! Event-driven rather than Go's 1 ms ticker: a cycle runs when something may have changed the answer —
//! an enqueue, a request completing, a ticket released, an eviction (all through the [`DispatchWaker`]),
//! new telemetry (the scrapers' `on_update`), or a change of the endpoint list. A coarse safety tick
//! ([`SAFETY_TICK`]) also runs a cycle, because saturation can change with nothing happening: telemetry
//! going stale turns an endpoint saturated, and a detector may be time-based. TTLs do not depend on the
//! tick; each waiter has its own tokio deadline.
//!
//! A cycle dispatches as many requests as fit, not one: it loops while the detector, counting the load
//! already released but not yet running, says the head request's candidates are below the ceiling.
//! Differences from Go, on purpose:
//! - each request is gated on its own candidate set, with the gateway's subset hint applied (Go gates on
//!   the whole pool, so a request pinned to a full subset can be released into it);
//! - the head-of-line rule is kept: when the best request of the highest non-empty band is over its
//!   ceiling, the cycle stops (no priority inversion), even if a lower band's request would fit.
//!
//! [`DispatchWaker`]: super::DispatchWaker

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;

use super::shared::Shared;
use crate::datastore::locate;
use crate::scheduling::{Candidate, CandidateSet};

/// The period of the safety re-evaluation (staleness-based saturation, gauges while idle).
pub const SAFETY_TICK: Duration = Duration::from_millis(100);

pub(super) async fn run(shared: Arc<Shared>) {
    let mut endpoints = shared.datastore.subscribe();
    let mut endpoints_open = true;
    let mut tick = tokio::time::interval(SAFETY_TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut cycle = Cycle::default();
    loop {
        let ticked = tokio::select! {
            _ = shared.waker.woken() => false,
            changed = endpoints.changed(), if endpoints_open => {
                endpoints_open = changed.is_ok();
                false
            }
            _ = tick.tick() => true,
        };
        cycle.run(&shared, ticked);
    }
}

/// Buffers reused across cycles, and when the idle gauges were last refreshed.
#[derive(Default)]
pub(super) struct Cycle {
    /// The whole pool's candidates, kept between cycles (refreshed, not rebuilt, while the pool is the same).
    pool: CandidateSet,
    narrowed: Vec<Candidate>,
    gauges_at: Option<Instant>,
}

impl Cycle {
    /// One dispatch cycle. `ticked`: run by the safety tick (always refreshes the gauges).
    pub(super) fn run(&mut self, shared: &Arc<Shared>, ticked: bool) {
        let started = Instant::now();
        let mut state = shared.lock();
        let idle = state.queues.is_empty();
        // While nothing is queued, telemetry wakes (one per scrape per endpoint) only refresh the
        // saturation gauges, and at most once per tick.
        if idle && !ticked && self.gauges_at.is_some_and(|at| started.duration_since(at) < SAFETY_TICK) {
            return;
        }
        let endpoints = shared.datastore.endpoints();
        let pool: &[Candidate] = self.pool.refresh(&endpoints);
        let stages = shared.saturation(pool, started);
        shared.metrics.set_flow_pool_saturation(&stages);
        let mut pool_saturation = stages.effective;
        let stale = shared.detector.stale_endpoints(pool, started);
        shared.metrics.set_flow_stale_endpoints(&shared.detector_name, stale);
        self.gauges_at = Some(started);
        if idle {
            return;
        }
        while let Some(slot) = state.queues.select() {
            let Some(waiter) = state.queues.get(&slot) else { break };
            let saturation = if waiter.subset.narrows(shared.subset_match) {
                let located = locate(&endpoints, &waiter.subset, shared.subset_match);
                self.narrowed.clear();
                self.narrowed.extend(located.into_iter().map(Candidate::new));
                shared.saturation(&self.narrowed, started).effective
            } else {
                pool_saturation
            };
            // Head of line: the best request of the highest band does not fit, so nothing goes. NaN from
            // a detector counts as saturated (fail closed).
            if saturation.is_nan() || saturation >= shared.ceiling {
                break;
            }
            shared.release(&mut state, &slot);
            // The released load is now pending: re-evaluate before the next one.
            pool_saturation = shared.saturation(pool, started).effective;
        }
        drop(state);
        shared.metrics.observe_flow_dispatch_cycle(started.elapsed());
    }
}
