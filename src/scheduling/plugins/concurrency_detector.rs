//! `concurrency-detector`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/flowcontrol/saturationdetector/concurrency/detector.go):
//! saturation from the work this EPP itself has dispatched and not yet seen finish. It reacts to a burst at
//! once, where telemetry lags a scrape interval behind, but it is open-loop: it cannot see what the server
//! really runs (KV-cache pressure, estimate drift).
//!
//! **Accounting** (its own; it needs no `inflight-load-producer`): `pre_request` adds one request and the
//! request's `estimated_tokens` to its primary target (`DispatchInfo::endpoint`); `on_complete`, which the
//! framework calls exactly once per dispatched request however it ends, subtracts exactly the same amounts
//! from the same endpoint. Both units are always counted; the mode chooses which one is judged. Counters
//! are atomics behind a map keyed by endpoint identity, floored at zero so that no interleaving can drive
//! them negative. An endpoint that leaves the pool takes its counters with it, and a late completion for
//! it finds nothing to release and creates nothing.
//!
//! **Gatekeeper** ([`SaturationDetector`]): one aggregate fraction over the candidates,
//!
//! ```text
//! saturation = (pending + Σ in-flight(e)) / Σ capacity(e)     1.0 when Σ capacity = 0 (no candidates)
//! ```
//!
//! in requests or in tokens per `concurrencyMode`, not clamped. `pending` is the load flow control has
//! released but that has not reached `pre_request` yet, so a burst released at once cannot overshoot.
//! Being a ratio of sums, it weighs endpoints by capacity (the utilization detector averages instead).
//!
//! **Traffic shaper** ([`Filter`], only when the plugin is also listed in a scheduling profile): keeps an
//! endpoint iff `in-flight(e) < trunc(capacity(e) · (1 + headroom))`. It does **not** fail open: when every
//! endpoint is full the profile fails and the request gets 429.
//!
//! Parameters (unknown keys are errors, unlike upstream): `concurrencyMode` ("requests" | "tokens",
//! default "requests"), `maxConcurrency` (int > 0, default 100), `maxTokenConcurrency` (int > 0, default
//! 1,000,000), `headroom` (≥ 0, default 0.0), and epp's per-endpoint capacities for heterogeneous pools:
//! `capacityLabel` (default "epp.io/max-concurrency"), `tokenCapacityLabel` (default
//! "epp.io/max-token-concurrency"), `endpointCapacities: [{address: "ip:port", maxConcurrency,
//! maxTokenConcurrency}]`; see [`super::concurrency_capacity`] for their precedence.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Instant;

use super::concurrency_capacity::Params;
pub use super::concurrency_capacity::{Capacity, CapacityOverride, ConcurrencyConfig, ConcurrencyMode};
use super::endpoint_key::{endpoint_key, EndpointKey, IntBuildHasher};
use super::param_checks::InvalidParameter;
use crate::datastore::Endpoint;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, Completion, DispatchInfo, EndpointListener, FactoryContext, Filter,
    InFlightLoad, PendingLoad, PluginError, PreRequest, ResponseHook, SaturationDetector, SchedulingRequest,
    SchedulingResult,
};

pub(crate) const TYPE_NAME: &str = "concurrency-detector";

/// In-flight work on one endpoint, with the capacity resolved when it was first dispatched to.
struct EndpointLoad {
    /// Keeps the endpoint's allocation (and so its map key) unique while the counters exist.
    endpoint: Arc<Endpoint>,
    capacity: Capacity,
    requests: AtomicI64,
    tokens: AtomicI64,
}

impl EndpointLoad {
    fn load(&self) -> InFlightLoad {
        InFlightLoad {
            requests: self.requests.load(Ordering::Acquire),
            tokens: self.tokens.load(Ordering::Acquire),
        }
    }

    fn in_mode(&self, mode: ConcurrencyMode) -> i64 {
        match mode {
            ConcurrencyMode::Requests => self.requests.load(Ordering::Acquire),
            ConcurrencyMode::Tokens => self.tokens.load(Ordering::Acquire),
        }
    }
}

/// Adds `delta`, saturating, and never below zero (the closure always returns `Some`, so it cannot fail).
fn add(counter: &AtomicI64, delta: i64) {
    let _ =
        counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| Some(v.saturating_add(delta).max(0)));
}

fn tokens_of(info: &DispatchInfo) -> i64 {
    i64::try_from(info.estimated_tokens).unwrap_or(i64::MAX)
}

type LoadMap = HashMap<EndpointKey, Arc<EndpointLoad>, IntBuildHasher>;

/// The concurrency detector: its own in-flight accounting, a saturation ratio and an endpoint filter.
pub struct ConcurrencyDetector {
    name: String,
    config: ConcurrencyConfig,
    loads: RwLock<LoadMap>,
}

impl std::fmt::Debug for ConcurrencyDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyDetector").field("name", &self.name).field("config", &self.config).finish()
    }
}

impl ConcurrencyDetector {
    /// `name` identifies the plugin instance in logs.
    pub fn new(name: &str, config: ConcurrencyConfig) -> Result<Self, InvalidParameter> {
        config.validate()?;
        Ok(Self { name: name.to_string(), config, loads: RwLock::new(HashMap::default()) })
    }

    pub fn config(&self) -> &ConcurrencyConfig {
        &self.config
    }

    /// The work in flight on `endpoint` (zero when it has none).
    pub fn load(&self, endpoint: &Arc<Endpoint>) -> InFlightLoad {
        self.read().get(&endpoint_key(endpoint)).map(|l| l.load()).unwrap_or_default()
    }

    /// The capacity of `endpoint` in both units.
    pub fn capacity(&self, endpoint: &Arc<Endpoint>) -> Capacity {
        match self.read().get(&endpoint_key(endpoint)) {
            Some(l) => l.capacity,
            None => self.config.capacity_of(endpoint),
        }
    }

    /// The filter's limit for an endpoint of `capacity` (in the mode's unit): truncated, as upstream.
    pub fn limit(&self, capacity: i64) -> i64 {
        (capacity as f64 * (1.0 + self.config.headroom)) as i64
    }

    /// Number of endpoints with counters.
    pub fn tracked_endpoints(&self) -> usize {
        self.read().len()
    }

    fn read(&self) -> RwLockReadGuard<'_, LoadMap> {
        // A panic elsewhere while holding the lock leaves the map consistent (every update is one call).
        self.loads.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// In-flight work and capacity of `endpoint` in the mode's unit, under a held read guard.
    fn load_and_capacity(&self, map: &LoadMap, endpoint: &Arc<Endpoint>) -> (i64, i64) {
        let mode = self.config.mode;
        match map.get(&endpoint_key(endpoint)) {
            Some(l) => (l.in_mode(mode), l.capacity.of(mode)),
            // Never dispatched to (or removed): nothing in flight.
            None => (0, self.config.capacity_of(endpoint).of(mode)),
        }
    }

    fn get(&self, endpoint: &Arc<Endpoint>) -> Option<Arc<EndpointLoad>> {
        self.read().get(&endpoint_key(endpoint)).cloned()
    }

    fn get_or_create(&self, endpoint: &Arc<Endpoint>) -> Arc<EndpointLoad> {
        if let Some(l) = self.get(endpoint) {
            return l;
        }
        let mut map = self.loads.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = map.get(&endpoint_key(endpoint)) {
            return l.clone();
        }
        // A new endpoint is rare: a good moment to drop idle counters of endpoints that left the pool
        // while a request to them was being dispatched (nothing else references them any more).
        map.retain(|_, l| Arc::strong_count(&l.endpoint) > 1 || l.load() != InFlightLoad::default());
        let load = Arc::new(EndpointLoad {
            endpoint: endpoint.clone(),
            capacity: self.config.resolve(endpoint, Some(&self.name)),
            requests: AtomicI64::new(0),
            tokens: AtomicI64::new(0),
        });
        map.insert(endpoint_key(endpoint), load.clone());
        load
    }
}

impl SaturationDetector for ConcurrencyDetector {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64 {
        self.saturation_with_pending(candidates, now, PendingLoad::default())
    }

    fn saturation_with_pending(&self, candidates: &[Candidate], _now: Instant, pending: PendingLoad) -> f64 {
        let pending = match self.config.mode {
            ConcurrencyMode::Requests => pending.requests,
            ConcurrencyMode::Tokens => pending.tokens,
        };
        let mut inflight = i64::try_from(pending).unwrap_or(i64::MAX);
        let mut capacity: i64 = 0;
        let map = self.read();
        for c in candidates {
            let (load, cap) = self.load_and_capacity(&map, &c.endpoint);
            inflight = inflight.saturating_add(load);
            capacity = capacity.saturating_add(cap);
        }
        if capacity <= 0 {
            return 1.0;
        }
        inflight as f64 / capacity as f64
    }
}

impl Filter for ConcurrencyDetector {
    fn filter(&self, _: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        let map = self.read();
        // No fail-open: an empty result fails the profile, and the request gets 429.
        kept.retain(|&i| {
            let (load, capacity) = self.load_and_capacity(&map, &candidates[i].endpoint);
            load < self.limit(capacity)
        });
    }
}

impl PreRequest for ConcurrencyDetector {
    fn pre_request(&self, _: &SchedulingRequest<'_>, _: &SchedulingResult, info: &DispatchInfo) {
        let l = self.get_or_create(&info.endpoint);
        add(&l.requests, 1);
        add(&l.tokens, tokens_of(info));
    }
}

impl ResponseHook for ConcurrencyDetector {
    fn on_complete(&self, info: &DispatchInfo, _: &Completion) {
        // Counters dropped with a removed endpoint are not recreated: there is nothing left to release.
        if let Some(l) = self.get(&info.endpoint) {
            add(&l.requests, -1);
            add(&l.tokens, -tokens_of(info));
        }
    }
}

impl EndpointListener for ConcurrencyDetector {
    fn on_endpoints_removed(&self, removed: &[Arc<Endpoint>]) {
        let mut map = self.loads.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ep in removed {
            map.remove(&endpoint_key(ep));
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let config = ConcurrencyConfig::from_params(name, p).map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    let detector =
        Arc::new(ConcurrencyDetector::new(name, config).map_err(|e| e.for_plugin(name, TYPE_NAME))?);
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .filter(detector.clone())
        .saturation_detector(detector.clone())
        .pre_request(detector.clone())
        .response(detector.clone())
        .endpoint_listener(detector))
}

#[cfg(test)]
#[path = "concurrency_detector_tests.rs"]
mod tests;
