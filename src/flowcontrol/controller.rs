//! The flow controller's front half: enqueue, wait, and leave (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/flowcontrol/controller/controller.go).
//!
//! A request waits in [`FlowController::enqueue_and_wait`] on a oneshot channel the dispatcher answers
//! with a [`DispatchTicket`]. Every way out goes through one lock-protected removal from the queues, so the
//! queue gauges and capacity counts are undone exactly once:
//! - dispatched: the dispatcher removes the item and sends the ticket;
//! - TTL: the waiter's own timer (`defaultRequestTTL`, a per-item tokio deadline) fires and it removes
//!   itself; if the dispatcher got there first, the ticket is already in the channel and is used;
//! - client gone: the stream handler drops the routing future; the [`QueuedGuard`] inside it removes the
//!   item in `Drop`, at once. If the item had just been dispatched, the unreceived ticket is dropped with
//!   the channel, which releases its pending load.
//!
//! Pending load: a dispatched request is counted as pending (requests and estimated tokens) from the
//! moment it leaves the queue until its ticket is dropped, which the director does once the request is
//! scheduled and registered as running (or failed). Detectors that count load see it in
//! `saturation_with_pending`, so a burst released in one cycle cannot overshoot.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::metrics::FlowControlMetrics;
use super::outcome::{FlowError, Outcome, NOT_YET_FINALIZED};
use super::policies::{order_key, OrderingInputs};
use super::queue::{Queues, Slot};
use super::settings::FlowControlConfig;
use super::shared::{DispatchTicket, DispatchWaker, Shared, State, Waiter};
use super::{PendingLoad, SaturationDetector};
use crate::datastore::Datastore;
use crate::datastore::{SubsetHint, SubsetMatch};
use crate::metrics::RequestLabels;

/// What the controller is built from besides its settings.
pub struct FlowControllerParts {
    pub detector: Arc<dyn SaturationDetector>,
    /// The detector's plugin name (the `detector` label of the stale-endpoints gauge).
    pub detector_name: String,
    pub datastore: Arc<Datastore>,
    pub metrics: Arc<FlowControlMetrics>,
    /// How subset hints are matched, so dispatch gates on the same candidates the director will use.
    pub subset_match: SubsetMatch,
}

/// A request entering flow control.
#[derive(Debug, Clone, Copy)]
pub struct FlowRequest<'a> {
    /// Model names, fairness id (the flow) and priority (the band).
    pub labels: RequestLabels<'a>,
    /// The request body's size (queue byte limits).
    pub byte_size: u64,
    /// Estimated tokens (prompt + output): the pending load while dispatched but not yet running.
    pub tokens: u64,
    /// The gateway's subset hint: dispatch is gated on the saturation of these candidates.
    pub subset: &'a SubsetHint,
    /// When the request's headers arrived (SLO-deadline ordering).
    pub received_at: Instant,
    /// The request's TTFT objective (`x-slo-ttft-ms`), if any.
    pub slo_ttft: Option<Duration>,
}

/// Lives inside the waiting future: if the future is dropped while the request is queued (the client went
/// away), `Drop` takes the request out of the queue at once.
struct QueuedGuard {
    shared: Arc<Shared>,
    slot: Slot,
    rx: oneshot::Receiver<DispatchTicket>,
    /// The request's outcome has been decided; nothing is left to undo.
    settled: bool,
}

impl QueuedGuard {
    async fn wait(mut self, deadline: Option<Instant>) -> Result<DispatchTicket, FlowError> {
        let received = match deadline {
            Some(at) => tokio::time::timeout_at(at.into(), &mut self.rx).await.ok(),
            None => Some((&mut self.rx).await),
        };
        self.settled = true;
        match received {
            Some(Ok(ticket)) => Ok(ticket),
            Some(Err(_)) => Err(FlowError::EvictedOther("the flow controller stopped")),
            None if self.shared.evict(&self.slot, Outcome::EvictedTtl) => Err(FlowError::EvictedTtl),
            // Dispatched between the timer firing and the eviction: the ticket is in the channel.
            None => self.rx.try_recv().map_err(|_| FlowError::EvictedOther("the flow controller stopped")),
        }
    }
}

impl Drop for QueuedGuard {
    fn drop(&mut self) {
        if !self.settled {
            self.shared.evict(&self.slot, Outcome::EvictedContextCancelled);
        }
    }
}

/// Priority bands, fairness between flows, ordering within a flow, capacity limits, TTLs, and dispatch
/// gated by the saturation detector. Cheap to clone (one shared state).
#[derive(Clone)]
pub struct FlowController {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FlowController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (requests, bytes) = self.queued();
        f.debug_struct("FlowController")
            .field("queued_requests", &requests)
            .field("queued_bytes", &bytes)
            .field("pending", &self.pending())
            .finish()
    }
}

impl FlowController {
    pub fn new(config: &FlowControlConfig, parts: FlowControllerParts) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { queues: Queues::new(config), next_seq: 0, closed: false }),
            pending_requests: AtomicU64::new(0),
            pending_tokens: AtomicU64::new(0),
            waker: DispatchWaker::default(),
            detector: parts.detector,
            detector_name: parts.detector_name,
            datastore: parts.datastore,
            metrics: parts.metrics,
            subset_match: parts.subset_match,
            ceiling: config.usage_limit.threshold,
            ttl: config.default_request_ttl,
        });
        Self { shared }
    }

    /// Starts the dispatcher. It runs until the handle is aborted (it keeps dispatching during a graceful
    /// shutdown so queued requests can still drain).
    pub fn spawn_dispatcher(&self) -> JoinHandle<()> {
        tokio::spawn(super::dispatch::run(self.shared.clone()))
    }

    /// The handle that wakes the dispatcher (completions, telemetry updates).
    pub fn waker(&self) -> DispatchWaker {
        self.shared.waker.clone()
    }

    /// Queued requests and bytes.
    pub fn queued(&self) -> (u64, u64) {
        let state = self.shared.lock();
        (state.queues.len(), state.queues.bytes())
    }

    /// Load dispatched but not yet running.
    pub fn pending(&self) -> PendingLoad {
        self.shared.pending()
    }

    /// Stops admitting: every queued request fails with `EvictedOther` (500) and later ones with
    /// `RejectedOther`. For shutdown, after the grace period.
    pub fn close(&self) {
        let drained = {
            let mut state = self.shared.lock();
            state.closed = true;
            let drained = state.queues.drain();
            for (waiter, bytes) in &drained {
                self.shared.metrics.flow_queue_remove(&waiter.labels, *bytes);
                let waited = waiter.enqueued_at.elapsed();
                self.shared.metrics.flow_outcome(&waiter.labels, Outcome::EvictedOther.as_str(), waited);
            }
            drained
        };
        // Dropping the senders wakes every waiter with `EvictedOther`.
        drop(drained);
    }

    /// Queues the request and waits until it is dispatched (the ticket), rejected or expired. Dropping
    /// the returned future while it waits removes the request from the queue (`EvictedContextCancelled`).
    pub async fn enqueue_and_wait(&self, req: FlowRequest<'_>) -> Result<DispatchTicket, FlowError> {
        let shared = &self.shared;
        let enqueued_at = Instant::now();
        let labels = shared.metrics.flow_queue_labels(req.labels);
        let (tx, rx) = oneshot::channel();
        let pushed = {
            let mut state = shared.lock();
            if state.closed {
                drop(state);
                let outcome = Outcome::RejectedOther.as_str();
                shared.metrics.flow_enqueue_duration(&labels, outcome, enqueued_at.elapsed());
                shared.metrics.flow_outcome(&labels, outcome, enqueued_at.elapsed());
                return Err(FlowError::RejectedOther(super::outcome::SHUTTING_DOWN));
            }
            let seq = state.next_seq;
            state.next_seq += 1;
            let priority = req.labels.priority;
            let inputs = OrderingInputs {
                enqueued_at,
                received_at: req.received_at,
                ttl: shared.ttl,
                slo_ttft: req.slo_ttft,
            };
            let key = order_key(state.queues.band_settings(priority).ordering, &inputs, seq);
            let waiter = Waiter {
                tx,
                labels: labels.clone(),
                tokens: req.tokens,
                subset: req.subset.clone(),
                enqueued_at,
            };
            let pushed = state.queues.push(priority, req.labels.fairness_id, key, req.byte_size, waiter);
            if pushed.is_ok() {
                // Under the lock, so the dispatcher's decrement can never come first.
                shared.metrics.flow_queue_add(&labels, req.byte_size);
            }
            pushed
        };
        let took = enqueued_at.elapsed();
        let slot = match pushed {
            Ok(slot) => slot,
            Err(full) => {
                let outcome = Outcome::RejectedCapacity.as_str();
                shared.metrics.flow_enqueue_duration(&labels, outcome, took);
                shared.metrics.flow_outcome(&labels, outcome, took);
                return Err(full.into());
            }
        };
        shared.metrics.flow_enqueue_duration(&labels, NOT_YET_FINALIZED, took);
        shared.waker.wake();
        let guard = QueuedGuard { shared: shared.clone(), slot, rx, settled: false };
        guard.wait(shared.ttl.and_then(|ttl| enqueued_at.checked_add(ttl))).await
    }
}
