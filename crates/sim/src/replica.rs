//! One simulated vLLM replica in real time: an [`Engine`] behind a mutex, a driver task that steps it
//! and sleeps for each step's duration (divided by the time scale), and per-request channels that
//! carry the engine's events to the HTTP handlers.
//!
//! Why the clock works this way: all request timings (TTFT, queue time, ...) are taken on a simulated
//! clock, `wall time since start × time_scale`, so `/metrics` reports what vLLM would report at any time
//! scale. Sleeping to a deadline chained from the previous one keeps timer granularity from adding up
//! over thousands of steps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};

use super::engine::{
    AddRequestError, Engine, EngineConfig, EngineStats, FinishReason, RequestEvent, SimRequest,
};
use super::exposition::RequestMetrics;
use super::kv_events::KvPublisher;

/// How late (real time) a step may end before the replica warns that the host cannot keep up.
const LAG_WARNING: Duration = Duration::from_millis(50);

/// What a handler receives about its request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Delivery {
    First { cached_tokens: u32 },
    Token,
    Finished { output_tokens: u32, reason: FinishReason },
}

/// Simulated timestamps of one live request.
struct Live {
    sink: mpsc::UnboundedSender<Delivery>,
    /// The client set no `max_tokens`: the default length ends it as a natural stop.
    natural_stop: bool,
    arrival: f64,
    scheduled: Option<f64>,
    first_token: Option<f64>,
    last_token: f64,
}

struct Inner {
    engine: Engine,
    live: HashMap<u64, Live>,
    requests: RequestMetrics,
}

pub(crate) struct Replica {
    pub name: String,
    time_scale: f64,
    started: Instant,
    inner: Mutex<Inner>,
    wake: Notify,
    next_id: AtomicU64,
    /// Where the engine's KV events go, when published.
    kv_events: Option<KvPublisher>,
}

/// A snapshot for `/metrics`.
pub(crate) struct Snapshot {
    pub stats: EngineStats,
    pub requests: RequestMetrics,
    pub config: EngineConfig,
}

impl Replica {
    /// Creates the replica and spawns its driver task on the current runtime.
    pub(crate) fn start(
        name: String,
        config: EngineConfig,
        time_scale: f64,
        kv_events: Option<KvPublisher>,
    ) -> Arc<Self> {
        let mut engine = Engine::new(config);
        if kv_events.is_some() {
            engine.enable_kv_events();
        }
        let replica = Arc::new(Self {
            name,
            time_scale,
            started: Instant::now(),
            kv_events,
            inner: Mutex::new(Inner { engine, live: HashMap::new(), requests: RequestMetrics::default() }),
            wake: Notify::new(),
            next_id: AtomicU64::new(1),
        });
        tokio::spawn(Arc::clone(&replica).drive());
        replica
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The engine's KV block size in tokens.
    pub(crate) fn block_size(&self) -> usize {
        self.lock().engine.config().block_size
    }

    /// Simulated seconds since the replica started.
    pub(crate) fn sim_now(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * self.time_scale
    }

    /// Real time that `simulated_seconds` take at this replica's time scale.
    pub(crate) fn real_duration(&self, simulated_seconds: f64) -> Duration {
        Duration::from_secs_f64((simulated_seconds / self.time_scale).clamp(0.0, 1e9))
    }

    /// Queues a request; events arrive on the returned receiver. The guard aborts it when dropped early.
    pub(crate) fn submit(
        self: &Arc<Self>,
        prompt: Vec<u32>,
        max_output_tokens: u32,
        lora: Option<String>,
        natural_stop: bool,
        transferred: bool,
    ) -> Result<(RequestGuard, mpsc::UnboundedReceiver<Delivery>), AddRequestError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sink, events) = mpsc::unbounded_channel();
        {
            let mut inner = self.lock();
            let request = SimRequest { id, prompt, max_output_tokens, lora };
            if transferred {
                inner.engine.try_add_transferred(request)?;
            } else {
                inner.engine.try_add_request(request)?;
            }
            let now = self.sim_now();
            let live = Live {
                sink,
                natural_stop,
                arrival: now,
                scheduled: None,
                first_token: None,
                last_token: now,
            };
            inner.live.insert(id, live);
        }
        self.wake.notify_one();
        Ok((RequestGuard { replica: Arc::clone(self), id, finished: false }, events))
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let inner = self.lock();
        Snapshot {
            stats: inner.engine.stats(),
            requests: inner.requests.clone(),
            config: inner.engine.config().clone(),
        }
    }

    fn abort(&self, id: u64) {
        let mut inner = self.lock();
        if inner.live.remove(&id).is_some() {
            inner.engine.abort(id);
            inner.requests.count_finished(FinishReason::Abort);
        }
    }

    /// The driver: step, sleep for the step, deliver its events; park while there is no work.
    async fn drive(self: Arc<Self>) {
        let mut deadline = Instant::now();
        // Whether the previous step ran right before this one (no idle wait in between).
        let mut busy = false;
        let mut last_lag_warning: Option<Instant> = None;
        loop {
            let step = {
                let mut inner = self.lock();
                if inner.engine.has_work() {
                    let start = self.sim_now();
                    let step = inner.engine.step();
                    let Inner { engine, live, .. } = &mut *inner;
                    for id in engine.last_step_admitted() {
                        if let Some(request) = live.get_mut(id) {
                            request.scheduled.get_or_insert(start);
                        }
                    }
                    // Published when the step has run, as vLLM publishes after each engine step.
                    Some((step, engine.take_kv_events()))
                } else {
                    None
                }
            };
            let Some((step, kv_events)) = step else {
                busy = false;
                self.wake.notified().await;
                continue;
            };
            // Back to back, a step starts when the previous one was due to end, not when this task woke
            // up and stepped the engine: otherwise every step runs long by the wake-up latency plus the
            // stepping time (~1 ms each, measured: 11% on a lone H100 decode step). After an idle wait
            // the clock restarts from now.
            let start = if busy { deadline } else { Instant::now() };
            deadline = start + self.real_duration(step.duration);
            busy = true;
            tokio::time::sleep_until(deadline.into()).await;
            let late = Instant::now().saturating_duration_since(deadline);
            if late > LAG_WARNING && last_lag_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                // Simulated time runs on the wall clock: a host that cannot keep up inflates every latency.
                tracing::warn!(replica = %self.name, late_ms = late.as_millis(), "epp-sim cannot keep up; lower --time-scale");
                last_lag_warning = Some(Instant::now());
            }
            if let Some(publisher) = &self.kv_events {
                publisher.publish(super::server::unix_now(), kv_events);
            }
            self.deliver(step.events);
        }
    }

    fn deliver(&self, events: Vec<RequestEvent>) {
        let now = self.sim_now();
        let mut inner = self.lock();
        let Inner { live, requests, .. } = &mut *inner;
        for event in events {
            match event {
                RequestEvent::FirstToken { id, cached_tokens } => {
                    if let Some(request) = live.get_mut(&id) {
                        requests.ttft.observe(now - request.arrival);
                        request.first_token = Some(now);
                        request.last_token = now;
                        let _ = request.sink.send(Delivery::First { cached_tokens });
                    }
                }
                RequestEvent::Token { id } => {
                    if let Some(request) = live.get_mut(&id) {
                        requests.inter_token.observe(now - request.last_token);
                        request.last_token = now;
                        let _ = request.sink.send(Delivery::Token);
                    }
                }
                RequestEvent::Finished { id, output_tokens, reason } => {
                    let Some(request) = live.remove(&id) else { continue };
                    let reason = match reason {
                        FinishReason::Length if request.natural_stop => FinishReason::Stop,
                        other => other,
                    };
                    requests.count_finished(reason);
                    record_phases(requests, &request, now, output_tokens);
                    let _ = request.sink.send(Delivery::Finished { output_tokens, reason });
                }
            }
        }
    }
}

/// vLLM's per-request phase histograms, observed when a request finishes.
fn record_phases(requests: &mut RequestMetrics, request: &Live, now: f64, output_tokens: u32) {
    requests.e2e.observe(now - request.arrival);
    let scheduled = request.scheduled.unwrap_or(request.arrival);
    requests.queue.observe(scheduled - request.arrival);
    requests.inference.observe(now - scheduled);
    if let Some(first) = request.first_token {
        requests.prefill.observe(first - scheduled);
        requests.decode.observe(now - first);
        if output_tokens > 1 {
            requests.request_tpot.observe((now - first) / f64::from(output_tokens - 1));
        }
    }
}

/// Aborts its request in the engine when dropped before [`RequestGuard::finish`]: a client that hangs
/// up frees its batch slot and KV blocks, as in vLLM.
pub(crate) struct RequestGuard {
    replica: Arc<Replica>,
    id: u64,
    finished: bool,
}

impl RequestGuard {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.replica.abort(self.id);
        }
    }
}
