//! The state the flow controller's waiters, their tickets and the dispatcher share: the queues behind one
//! lock, the pending-load counters, and the waker. Split from `controller` so that the dispatcher (which
//! releases items) and the controller (which enqueues and evicts them) both build on it without
//! importing each other.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

use super::metrics::{FlowControlMetrics, FlowQueueLabels};
use super::outcome::Outcome;
use super::queue::{Queues, Slot};
use super::{PendingLoad, SaturationDetector};
use crate::datastore::{Datastore, SubsetHint, SubsetMatch};
use crate::scheduling::{Candidate, StageSaturation};

/// Wakes the dispatcher: on completions, telemetry updates and anything else that may free capacity.
/// Wakes coalesce: many wakes while a cycle runs cause one more cycle.
#[derive(Clone, Debug, Default)]
pub struct DispatchWaker(Arc<Notify>);

impl DispatchWaker {
    pub fn wake(&self) {
        self.0.notify_one();
    }

    pub(super) async fn woken(&self) {
        self.0.notified().await;
    }
}

/// A queued request as the dispatcher sees it.
pub(super) struct Waiter {
    pub(super) tx: oneshot::Sender<DispatchTicket>,
    pub(super) labels: FlowQueueLabels,
    pub(super) tokens: u64,
    pub(super) subset: SubsetHint,
    pub(super) enqueued_at: Instant,
}

pub(super) struct State {
    pub(super) queues: Queues<Waiter>,
    pub(super) next_seq: u64,
    pub(super) closed: bool,
}

/// Everything the waiters, the tickets and the dispatcher share.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) pending_requests: AtomicU64,
    pub(super) pending_tokens: AtomicU64,
    pub(super) waker: DispatchWaker,
    pub(super) detector: Arc<dyn SaturationDetector>,
    pub(super) detector_name: String,
    pub(super) datastore: Arc<Datastore>,
    pub(super) metrics: Arc<FlowControlMetrics>,
    pub(super) subset_match: SubsetMatch,
    /// The static usage-limit ceiling, the same for every band.
    pub(super) ceiling: f64,
    pub(super) ttl: Option<Duration>,
}

impl Shared {
    /// The state lock. Every critical section is short and non-async; a panic inside one leaves the
    /// counts consistent (removal and accounting happen together), so a poisoned lock is still usable.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn pending(&self) -> PendingLoad {
        PendingLoad {
            requests: self.pending_requests.load(Ordering::Acquire),
            tokens: self.pending_tokens.load(Ordering::Acquire),
        }
    }

    /// Saturation of `candidates` with the current pending load; no candidate at all is saturated (the
    /// detectors fail closed, and this holds whichever detector is configured).
    /// How saturated `candidates` are, by P/D stage ([`StageSaturation`]); an empty set is full.
    pub(super) fn saturation(&self, candidates: &[Candidate], now: Instant) -> StageSaturation {
        if candidates.is_empty() {
            return StageSaturation { prefill: None, decode: 1.0, effective: 1.0 };
        }
        StageSaturation::of(self.detector.as_ref(), candidates, now, self.pending())
    }

    /// Dispatches the item at `slot`: counts its load as pending and hands the waiter its ticket.
    pub(super) fn release(self: &Arc<Self>, state: &mut State, slot: &Slot) {
        let Some((waiter, bytes)) = state.queues.take(slot) else { return };
        self.pending_requests.fetch_add(1, Ordering::AcqRel);
        self.pending_tokens.fetch_add(waiter.tokens, Ordering::AcqRel);
        let waited = waiter.enqueued_at.elapsed();
        self.metrics.flow_queue_remove(&waiter.labels, bytes);
        self.metrics.flow_outcome(&waiter.labels, Outcome::Dispatched.as_str(), waited);
        let ticket = DispatchTicket { shared: self.clone(), tokens: waiter.tokens, waited };
        // A waiter that went away at this instant drops the ticket with its channel (or here), which
        // releases the pending load again.
        let _ = waiter.tx.send(ticket);
    }

    /// Removes a still-queued item that leaves without dispatch; false if it is no longer queued.
    pub(super) fn evict(&self, slot: &Slot, outcome: Outcome) -> bool {
        let removed = {
            let mut state = self.lock();
            let removed = state.queues.remove(slot);
            if let Some((waiter, bytes)) = &removed {
                self.metrics.flow_queue_remove(&waiter.labels, *bytes);
                self.metrics.flow_outcome(&waiter.labels, outcome.as_str(), waiter.enqueued_at.elapsed());
            }
            removed
        };
        // The evicted item may have been the head that blocked its band.
        self.waker.wake();
        removed.is_some()
    }
}

/// Proof that a request left the queue for scheduling. Its load counts as pending until it is dropped:
/// drop it once the request is registered as running, or when routing fails.
pub struct DispatchTicket {
    pub(super) shared: Arc<Shared>,
    pub(super) tokens: u64,
    pub(super) waited: Duration,
}

impl DispatchTicket {
    /// How long the request waited in the queue.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl std::fmt::Debug for DispatchTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchTicket").field("tokens", &self.tokens).field("waited", &self.waited).finish()
    }
}

impl Drop for DispatchTicket {
    fn drop(&mut self) {
        self.shared.pending_requests.fetch_sub(1, Ordering::AcqRel);
        self.shared.pending_tokens.fetch_sub(self.tokens, Ordering::AcqRel);
        self.shared.waker.wake();
    }
}
