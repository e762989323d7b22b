//! What the producer remembers between a request's dispatch and its end: one record per dispatched
//! request (its captured features, prediction, objectives and response timing), and per endpoint the TPOT
//! objectives of the requests running there (llm-d's running-request TPOT-SLO min-heap,
//! llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/
//! running_request_tpot_slo_queue.go), whose minimum tightens the TPOT headroom of new requests.
//!
//! Records are keyed by the dispatch id (unique, where a client's `x-request-id` need not be) in sharded
//! maps, so concurrent streams rarely share a lock. The framework completes every dispatched request
//! exactly once, which removes its record; `contextTTL` (llm-d's context cache expiry) still forgets a
//! request running longer than that, so an endpoint's objectives cannot stay tightened forever.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::datastore::Endpoint;
use crate::predictor::features::Observation;
use crate::scheduling::{LatencyPrediction, PredictionLabels};

use super::super::endpoint_key::{endpoint_key, EndpointKey, IntBuildHasher};
use super::stream_clock::StreamClocks;

const SHARDS: usize = 16;
/// Expired records are looked for once every this many dispatches.
const SWEEP_EVERY: u64 = 1024;

/// One dispatched request.
#[derive(Debug, Clone)]
pub(super) struct Record {
    pub endpoint: Arc<Endpoint>,
    pub observation: Observation,
    pub prediction: Option<LatencyPrediction>,
    pub ttft_slo_ms: f64,
    /// The request's TPOT objective when it was registered on its endpoint (streaming mode only).
    pub running_tpot_slo_ms: Option<f64>,
    /// The client asked for a streamed response.
    pub stream: bool,
    pub dispatched_at: Instant,
    pub first_chunk_at: Option<Instant>,
    pub chunks: u64,
    /// The response's status was 2xx (`None` until its headers passed).
    pub status_2xx: Option<bool>,
    /// Its TTFT training row was sent at its first chunk, so its completion sends TPOT only.
    pub ttft_trained: bool,
    pub labels: PredictionLabels,
    /// What this request adds to its endpoint's [`PhaseLoad`] now: its uncached prompt tokens until its
    /// first chunk, then its prompt as decode context.
    pub phase: PhaseLoad,
}

/// Tokens epp has in flight on one endpoint, by phase: the prompt tokens still to be prefilled (the
/// uncached part of the prompts of requests with no first chunk yet) and the context of the requests
/// decoding (the prompts of requests past their first chunk). epp sees these the moment it dispatches and
/// the moment a first chunk passes, with no scrape delay, and they are what slows an engine's next steps:
/// chunked prefill stalls every decode on the replica, and each step's cost grows with the decode context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PhaseLoad {
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    /// Requests past their first chunk: the decodes a new request's prefill would stall.
    pub decode_requests: u64,
}

impl PhaseLoad {
    /// What a request holds from dispatch to its first chunk: the part of its prompt not cached there.
    pub(super) fn prefilling(observation: &Observation) -> Self {
        PhaseLoad { prefill_tokens: observation.uncached_tokens(), decode_tokens: 0, decode_requests: 0 }
    }

    /// What it holds once decoding: its prompt, as context every step reads.
    pub(super) fn decoding(observation: &Observation) -> Self {
        PhaseLoad {
            prefill_tokens: 0,
            decode_tokens: u64::from(observation.input_tokens),
            decode_requests: 1,
        }
    }

    fn add(&mut self, other: PhaseLoad) {
        self.prefill_tokens = self.prefill_tokens.saturating_add(other.prefill_tokens);
        self.decode_tokens = self.decode_tokens.saturating_add(other.decode_tokens);
        self.decode_requests = self.decode_requests.saturating_add(other.decode_requests);
    }

    /// Floored at zero, so a counter can never go negative.
    fn subtract(&mut self, other: PhaseLoad) {
        self.prefill_tokens = self.prefill_tokens.saturating_sub(other.prefill_tokens);
        self.decode_tokens = self.decode_tokens.saturating_sub(other.decode_tokens);
        self.decode_requests = self.decode_requests.saturating_sub(other.decode_requests);
    }

    fn is_zero(&self) -> bool {
        *self == PhaseLoad::default()
    }
}

/// The TPOT objectives running on each endpoint, as counts per objective (a multiset whose first key is
/// the minimum), and each endpoint's [`PhaseLoad`].
#[derive(Debug, Default)]
pub(super) struct RunningObjectives {
    by_endpoint: HashMap<EndpointKey, BTreeMap<u64, usize>, IntBuildHasher>,
    phases: HashMap<EndpointKey, PhaseLoad, IntBuildHasher>,
}

impl RunningObjectives {
    /// The tokens epp has in flight on `endpoint`, by phase.
    pub(super) fn phase_load(&self, endpoint: &Arc<Endpoint>) -> PhaseLoad {
        self.phases.get(&endpoint_key(endpoint)).copied().unwrap_or_default()
    }

    fn add_phase(&mut self, endpoint: &Arc<Endpoint>, load: PhaseLoad) {
        if !load.is_zero() {
            self.phases.entry(endpoint_key(endpoint)).or_default().add(load);
        }
    }

    fn remove_phase(&mut self, endpoint: &Arc<Endpoint>, load: PhaseLoad) {
        let key = endpoint_key(endpoint);
        if let Some(phase) = self.phases.get_mut(&key) {
            phase.subtract(load);
            if phase.is_zero() {
                self.phases.remove(&key);
            }
        }
    }

    /// Forgets what `record` holds on its endpoint.
    fn release(&mut self, record: &Record) {
        if let Some(slo) = record.running_tpot_slo_ms {
            self.remove(&record.endpoint, slo);
        }
        self.remove_phase(&record.endpoint, record.phase);
    }

    /// The tightest TPOT objective running on `endpoint`, in ms.
    pub(super) fn min(&self, endpoint: &Arc<Endpoint>) -> Option<f64> {
        let set = self.by_endpoint.get(&endpoint_key(endpoint))?;
        set.keys().next().map(|bits| f64::from_bits(*bits))
    }

    fn add(&mut self, endpoint: &Arc<Endpoint>, slo_ms: f64) {
        // Positive finite floats order like their bit patterns.
        *self.by_endpoint.entry(endpoint_key(endpoint)).or_default().entry(slo_ms.to_bits()).or_insert(0) +=
            1;
    }

    fn remove(&mut self, endpoint: &Arc<Endpoint>, slo_ms: f64) {
        let key = endpoint_key(endpoint);
        let Some(set) = self.by_endpoint.get_mut(&key) else { return };
        if let Some(count) = set.get_mut(&slo_ms.to_bits()) {
            *count -= 1;
            if *count == 0 {
                set.remove(&slo_ms.to_bits());
            }
        }
        if set.is_empty() {
            self.by_endpoint.remove(&key);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.by_endpoint.values().flat_map(|s| s.values()).sum()
    }

    /// Endpoints with tokens in flight.
    pub(super) fn loaded_endpoints(&self) -> usize {
        self.phases.len()
    }
}

/// The records and the running objectives.
#[derive(Debug)]
pub(super) struct Tracker {
    shards: [Mutex<HashMap<u64, Record, IntBuildHasher>>; SHARDS],
    running: Mutex<RunningObjectives>,
    /// Each endpoint's engine step as its streamed tokens show it.
    pub(super) clocks: StreamClocks,
    ttl: Duration,
    dispatches: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tracker {
    pub(super) fn new(ttl: Duration) -> Self {
        Tracker {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
            running: Mutex::new(RunningObjectives::default()),
            clocks: StreamClocks::default(),
            ttl,
            dispatches: AtomicU64::new(0),
        }
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, HashMap<u64, Record, IntBuildHasher>> {
        lock(&self.shards[(id % SHARDS as u64) as usize])
    }

    /// The running objectives, locked for one request's candidates.
    pub(super) fn running(&self) -> MutexGuard<'_, RunningObjectives> {
        lock(&self.running)
    }

    /// Remembers a dispatched request (registering its TPOT objective on its endpoint), and now and then
    /// forgets requests older than the TTL at `now`.
    pub(super) fn insert(&self, id: u64, record: Record, now: Instant) {
        {
            let mut running = self.running();
            if let Some(slo) = record.running_tpot_slo_ms {
                running.add(&record.endpoint, slo);
            }
            running.add_phase(&record.endpoint, record.phase);
        }
        self.shard(id).insert(id, record);
        if self.dispatches.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep(now);
        }
    }

    /// The response's headers passed with `status`.
    pub(super) fn status(&self, id: u64, status: Option<u16>) {
        if let Some(record) = self.shard(id).get_mut(&id) {
            record.status_2xx = status.map(|s| (200..300).contains(&s));
        }
    }

    /// A response chunk of a running request: the first one moves its prompt from the endpoint's prefill
    /// tokens to its decode context. Returns the request's observation and TTFT when this was the first
    /// chunk of a streamed 2xx response, which is then marked as trained for TTFT.
    pub(super) fn chunk(&self, id: u64, first: bool, now: Instant) -> Option<(Observation, Duration)> {
        let mut shard = self.shard(id);
        let record = shard.get_mut(&id)?;
        record.chunks += 1;
        self.clocks.tick(&record.endpoint, now);
        if !first && record.first_chunk_at.is_some() {
            return None;
        }
        record.first_chunk_at.get_or_insert(now);
        let ttft = (record.stream && record.status_2xx == Some(true) && !record.ttft_trained).then(|| {
            record.ttft_trained = true;
            (record.observation, now.saturating_duration_since(record.dispatched_at))
        });
        let decoding = PhaseLoad::decoding(&record.observation);
        if record.phase != decoding {
            let mut running = self.running();
            running.remove_phase(&record.endpoint, record.phase);
            running.add_phase(&record.endpoint, decoding);
            record.phase = decoding;
        }
        ttft
    }

    /// Forgets a request (it ended); its record, if it was still remembered.
    pub(super) fn remove(&self, id: u64) -> Option<Record> {
        let record = self.shard(id).remove(&id)?;
        self.running().release(&record);
        Some(record)
    }

    /// Forgets every request dispatched more than the TTL before `now`.
    pub(super) fn sweep(&self, now: Instant) {
        for shard in &self.shards {
            let mut expired = Vec::new();
            lock(shard).retain(|_, r| {
                let keep = now.saturating_duration_since(r.dispatched_at) <= self.ttl;
                if !keep {
                    expired.push(r.clone());
                }
                keep
            });
            let mut running = self.running();
            for record in &expired {
                running.release(record);
            }
        }
    }

    /// Drops the running objectives of endpoints that left the pool (their records end with their
    /// requests).
    pub(super) fn forget_endpoints(&self, removed: &[Arc<Endpoint>]) {
        let mut running = self.running();
        for endpoint in removed {
            running.by_endpoint.remove(&endpoint_key(endpoint));
            running.phases.remove(&endpoint_key(endpoint));
        }
        drop(running);
        self.clocks.forget(removed);
    }

    /// Requests remembered.
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}
