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
    pub labels: PredictionLabels,
}

/// The TPOT objectives running on each endpoint, as counts per objective (a multiset whose first key is
/// the minimum).
#[derive(Debug, Default)]
pub(super) struct RunningObjectives {
    by_endpoint: HashMap<EndpointKey, BTreeMap<u64, usize>, IntBuildHasher>,
}

impl RunningObjectives {
    /// The tightest TPOT objective running on `endpoint`, in ms.
    pub fn min(&self, endpoint: &Arc<Endpoint>) -> Option<f64> {
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

    pub fn len(&self) -> usize {
        self.by_endpoint.values().flat_map(|s| s.values()).sum()
    }
}

/// The records and the running objectives.
#[derive(Debug)]
pub(super) struct Tracker {
    shards: [Mutex<HashMap<u64, Record, IntBuildHasher>>; SHARDS],
    running: Mutex<RunningObjectives>,
    ttl: Duration,
    dispatches: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tracker {
    pub fn new(ttl: Duration) -> Self {
        Tracker {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
            running: Mutex::new(RunningObjectives::default()),
            ttl,
            dispatches: AtomicU64::new(0),
        }
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, HashMap<u64, Record, IntBuildHasher>> {
        lock(&self.shards[(id % SHARDS as u64) as usize])
    }

    /// The running objectives, locked for one request's candidates.
    pub fn running(&self) -> MutexGuard<'_, RunningObjectives> {
        lock(&self.running)
    }

    /// Remembers a dispatched request (registering its TPOT objective on its endpoint), and now and then
    /// forgets requests older than the TTL at `now`.
    pub fn insert(&self, id: u64, record: Record, now: Instant) {
        if let Some(slo) = record.running_tpot_slo_ms {
            self.running().add(&record.endpoint, slo);
        }
        self.shard(id).insert(id, record);
        if self.dispatches.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep(now);
        }
    }

    /// Applies `f` to a running request's record.
    pub fn update(&self, id: u64, f: impl FnOnce(&mut Record)) {
        if let Some(record) = self.shard(id).get_mut(&id) {
            f(record);
        }
    }

    /// Forgets a request (it ended); its record, if it was still remembered.
    pub fn remove(&self, id: u64) -> Option<Record> {
        let record = self.shard(id).remove(&id)?;
        if let Some(slo) = record.running_tpot_slo_ms {
            self.running().remove(&record.endpoint, slo);
        }
        Some(record)
    }

    /// Forgets every request dispatched more than the TTL before `now`.
    pub fn sweep(&self, now: Instant) {
        for shard in &self.shards {
            let mut expired = Vec::new();
            lock(shard).retain(|_, r| {
                let keep = now.saturating_duration_since(r.dispatched_at) <= self.ttl;
                if !keep {
                    expired.push(r.clone());
                }
                keep
            });
            for record in expired {
                if let Some(slo) = record.running_tpot_slo_ms {
                    self.running().remove(&record.endpoint, slo);
                }
            }
        }
    }

    /// Drops the running objectives of endpoints that left the pool (their records end with their
    /// requests).
    pub fn forget_endpoints(&self, removed: &[Arc<Endpoint>]) {
        let mut running = self.running();
        for endpoint in removed {
            running.by_endpoint.remove(&endpoint_key(endpoint));
        }
    }

    /// Requests remembered.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}
