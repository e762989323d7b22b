//! `inflight-load-producer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/producer.go):
//! counts the requests and tokens this EPP has dispatched to each endpoint and not yet seen finish, and
//! writes them into every candidate's `attrs.inflight`.
//!
//! `pre_request` adds one request and the request's tokens to the primary target; `on_complete`, which the
//! framework calls exactly once per dispatched request with the same [`DispatchInfo`], subtracts exactly
//! the same amounts (computed from that `DispatchInfo` by the same rule). Subtraction is floored at zero,
//! so a counter can never go negative even if an endpoint was dropped and re-added in between.
//!
//! Tokens counted (parameter `addEstimatedOutputTokens`, from llm-d-router):
//! - unset (default) or `true`: `estimated_tokens` (prompt + estimated output), GIE's `Estimate(req)`;
//! - `false`: `input_tokens` only, llm-d-router's default.
//!
//! The GIE default wins when unset because `token-load-scorer`'s threshold (4194304 = "128 requests @ 32K")
//! is calibrated on it.
//!
//! A disaggregated request (P/D) also loads its prefill pod: one request and its prompt tokens, from
//! dispatch until the prefill leg is over. The decode sidecar answers only after the prefill leg returned,
//! so the response's headers mark its end; a request that ends before any (cancelled, the prefill pod
//! dead) releases it on completion. Either way exactly once.
//!
//! Counters are atomics read lock-free per candidate under a read lock of the endpoint map; the gauges
//! `set_inflight` are published under a per-endpoint mutex after each change, so the last value
//! published is always the current one.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::Deserialize;

use super::endpoint_key::{endpoint_key, EndpointKey, IntBuildHasher};
use crate::datastore::Endpoint;
use crate::scheduling::InflightMetrics;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, Completion, DataKey, DataProducer, DispatchInfo, EndpointListener,
    FactoryContext, InFlightLoad, PluginError, PreRequest, ResponseHook, SchedulingRequest, SchedulingResult,
};

pub(crate) const TYPE_NAME: &str = "inflight-load-producer";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    add_estimated_output_tokens: Option<bool>,
}

/// Which token estimate a dispatched request adds to its endpoint's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenBasis {
    /// Prompt plus estimated output (`DispatchInfo::estimated_tokens`).
    PromptAndOutput,
    /// Prompt only (`DispatchInfo::input_tokens`).
    PromptOnly,
}

impl TokenBasis {
    fn tokens(self, info: &DispatchInfo) -> i64 {
        let t = match self {
            TokenBasis::PromptAndOutput => info.estimated_tokens,
            TokenBasis::PromptOnly => info.input_tokens,
        };
        i64::try_from(t).unwrap_or(i64::MAX)
    }
}

struct Counters {
    /// Keeps the endpoint's allocation (and so its map key) unique while the counters exist.
    endpoint: Arc<Endpoint>,
    requests: AtomicI64,
    tokens: AtomicI64,
    publish: Mutex<()>,
}

impl Counters {
    fn load(&self) -> InFlightLoad {
        InFlightLoad {
            requests: self.requests.load(Ordering::Acquire),
            tokens: self.tokens.load(Ordering::Acquire),
        }
    }
}

fn add(counter: &AtomicI64, delta: i64) {
    // Saturating, and floored at zero: the closure always returns Some, so the update cannot fail.
    let _ =
        counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| Some(v.saturating_add(delta).max(0)));
}

pub struct InFlightLoadProducer {
    name: String,
    basis: TokenBasis,
    counters: RwLock<HashMap<EndpointKey, Arc<Counters>, IntBuildHasher>>,
    /// Dispatches whose prefill leg still counts on their prefill pod.
    prefilling: Mutex<HashSet<u64>>,
    metrics: Arc<InflightMetrics>,
}

impl std::fmt::Debug for InFlightLoadProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightLoadProducer").field("name", &self.name).field("basis", &self.basis).finish()
    }
}

impl InFlightLoadProducer {
    /// `name` labels the exported gauges.
    pub fn new(name: &str, basis: TokenBasis, metrics: Arc<InflightMetrics>) -> Self {
        Self {
            name: name.to_string(),
            basis,
            counters: RwLock::new(HashMap::default()),
            prefilling: Mutex::new(HashSet::new()),
            metrics,
        }
    }

    /// The current in-flight load of `endpoint` (zero when it has none).
    pub fn load(&self, endpoint: &Arc<Endpoint>) -> InFlightLoad {
        self.get(endpoint).map(|c| c.load()).unwrap_or_default()
    }

    /// Number of endpoints with counters.
    pub fn tracked_endpoints(&self) -> usize {
        self.counters.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    fn get(&self, endpoint: &Arc<Endpoint>) -> Option<Arc<Counters>> {
        self.counters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&endpoint_key(endpoint))
            .cloned()
    }

    fn get_or_create(&self, endpoint: &Arc<Endpoint>) -> Arc<Counters> {
        if let Some(c) = self.get(endpoint) {
            return c;
        }
        let mut map = self.counters.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A new endpoint is rare: a good moment to drop counters of endpoints that left the pool while a
        // request to them was still being dispatched (nobody else references them; they are idle).
        map.retain(|_, c| {
            let gone = Arc::strong_count(&c.endpoint) == 1 && c.load() == InFlightLoad::default();
            if gone {
                self.metrics.remove_endpoint(&c.endpoint);
            }
            !gone
        });
        map.entry(endpoint_key(endpoint))
            .or_insert_with(|| {
                Arc::new(Counters {
                    endpoint: endpoint.clone(),
                    requests: AtomicI64::new(0),
                    tokens: AtomicI64::new(0),
                    publish: Mutex::new(()),
                })
            })
            .clone()
    }

    fn publish(&self, c: &Counters) {
        let _serialised = c.publish.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let load = c.load();
        self.metrics.set(&c.endpoint, &self.name, load.requests, load.tokens);
    }
}

impl DataProducer for InFlightLoadProducer {
    fn produces(&self) -> &'static [DataKey] {
        &[DataKey::InFlightLoad]
    }

    fn prepare(&self, _: &SchedulingRequest<'_>, candidates: &mut [Candidate]) {
        let map = self.counters.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        for c in candidates.iter_mut() {
            c.attrs.inflight = if map.is_empty() {
                InFlightLoad::default()
            } else {
                map.get(&endpoint_key(&c.endpoint)).map(|n| n.load()).unwrap_or_default()
            };
        }
    }
}

impl InFlightLoadProducer {
    fn acquire(&self, endpoint: &Arc<Endpoint>, tokens: i64) {
        let c = self.get_or_create(endpoint);
        add(&c.requests, 1);
        add(&c.tokens, tokens);
        self.publish(&c);
    }

    fn release(&self, endpoint: &Arc<Endpoint>, tokens: i64) {
        // Counters dropped with a removed endpoint are not recreated: there is nothing left to release.
        if let Some(c) = self.get(endpoint) {
            add(&c.requests, -1);
            add(&c.tokens, -tokens);
            self.publish(&c);
        }
    }

    /// Ends the prefill leg's load, if it still counts.
    fn prefill_done(&self, info: &DispatchInfo) {
        let Some(prefill) = &info.prefill_endpoint else { return };
        let pending = self
            .prefilling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&info.dispatch_id);
        if pending {
            self.release(prefill, prompt_tokens(info));
        }
    }
}

/// What a prefill leg costs its pod: the prompt (it produces no output).
fn prompt_tokens(info: &DispatchInfo) -> i64 {
    i64::try_from(info.input_tokens).unwrap_or(i64::MAX)
}

impl PreRequest for InFlightLoadProducer {
    fn pre_request(&self, _: &SchedulingRequest<'_>, _: &SchedulingResult, info: &DispatchInfo) {
        self.acquire(&info.endpoint, self.basis.tokens(info));
        if let Some(prefill) = &info.prefill_endpoint {
            self.prefilling
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(info.dispatch_id);
            self.acquire(prefill, prompt_tokens(info));
        }
    }
}

impl ResponseHook for InFlightLoadProducer {
    fn on_response_headers(
        &self,
        info: &DispatchInfo,
        _status: Option<u16>,
        _served: Option<&str>,
        _set_headers: &mut Vec<(String, String)>,
    ) {
        self.prefill_done(info);
    }

    fn on_complete(&self, info: &DispatchInfo, _: &Completion) {
        self.prefill_done(info);
        self.release(&info.endpoint, self.basis.tokens(info));
    }
}

impl EndpointListener for InFlightLoadProducer {
    fn on_endpoints_removed(&self, removed: &[Arc<Endpoint>]) {
        let mut map = self.counters.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ep in removed {
            map.remove(&endpoint_key(ep));
            self.metrics.remove_endpoint(ep);
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let basis = match p.add_estimated_output_tokens {
        None | Some(true) => TokenBasis::PromptAndOutput,
        Some(false) => TokenBasis::PromptOnly,
    };
    let producer = Arc::new(InFlightLoadProducer::new(name, basis, ctx.metrics.inflight.clone()));
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .producer(producer.clone())
        .pre_request(producer.clone())
        .response(producer.clone())
        .endpoint_listener(producer))
}

#[cfg(test)]
#[path = "inflight_load_producer_tests.rs"]
mod tests;
