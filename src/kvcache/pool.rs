//! The subscribers of a pool: one per endpoint of the datastore, started as endpoints join and stopped
//! (their entries dropped from the index) as they leave, as llm-d's `discoverPods` mode runs them
//! (llm-d/llm-d-router:pkg/kvevents/pool.go). Each dials `tcp://<endpoint ip>:<socketPort + rank>`: a
//! data-parallel rank publishes on the base port plus its rank (vLLM's `offset_endpoint_port`).
//!
//! The supervisor reconciles against the whole endpoint list on each datastore change, as the scrape
//! supervisor does (`telemetry::supervisor`): the watch channel coalesces bursts, so only the latest list
//! is reliable. Endpoints are keyed by their serving address; a changed publisher address (a new rank)
//! restarts the subscriber. The index numbers endpoints itself ([`EndpointId`]); ids are never reused, so
//! an entry of a departed endpoint can never be credited to a new one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

use tokio::task::JoinHandle;

use super::index::EndpointId;
use super::subscriber::{self, SharedIndex, SubscriberStats, Subscription};
use crate::datastore::Endpoint;

/// `kvEventsConfig` as far as the pool uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// `podDiscoveryConfig.socketPort`: the publisher port of rank 0 (vLLM's default is 5557).
    pub socket_port: u16,
    /// `topicFilter`: messages whose topic starts with this.
    pub topic_filter: String,
    /// `podDiscoveryConfig.replaySocketPort`: the replay (ROUTER) port of rank 0; `None`: no replay.
    pub replay_port: Option<u16>,
    /// `discoverPods`: dial every endpoint's publisher.
    pub discover_pods: bool,
    /// `zmqEndpoint`, as a bind address: the socket every engine publishes to ([`super::central`]).
    pub central: Option<String>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            socket_port: 5557,
            topic_filter: "kv@".into(),
            replay_port: None,
            discover_pods: true,
            central: None,
        }
    }
}

/// Replays running at once in the process, at most (llm-d's cap).
const CONCURRENT_REPLAYS: usize = 8;

/// The pool's shared state: the index, its endpoint numbering and the subscribers' counters.
#[derive(Debug)]
pub struct KvEventPool {
    config: PoolConfig,
    index: SharedIndex,
    stats: Arc<SubscriberStats>,
    ids: RwLock<HashMap<SocketAddr, EndpointId>>,
    next_id: AtomicU32,
    replays: Arc<tokio::sync::Semaphore>,
}

impl KvEventPool {
    /// A pool writing `index` and counting into `stats` (the plugin's registered counters).
    pub fn new(config: PoolConfig, index: SharedIndex, stats: Arc<SubscriberStats>) -> Self {
        Self {
            config,
            index,
            stats,
            ids: RwLock::new(HashMap::new()),
            next_id: AtomicU32::new(0),
            replays: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_REPLAYS)),
        }
    }

    pub fn index(&self) -> &SharedIndex {
        &self.index
    }

    pub fn stats(&self) -> &Arc<SubscriberStats> {
        &self.stats
    }

    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Endpoints the pool numbers now (those of the datastore, once the supervisor has seen them).
    pub(crate) fn endpoints_known(&self) -> usize {
        self.ids.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Subscribers running now.
    pub fn active_subscribers(&self) -> i64 {
        self.stats.active_subscribers.get()
    }

    /// The index's number for the endpoint serving at `addr`, while it is in the pool.
    pub fn endpoint_id(&self, addr: SocketAddr) -> Option<EndpointId> {
        self.ids.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&addr).copied()
    }

    /// Where the endpoint's events are published: its IP, the base port plus its rank.
    pub fn publisher_of(&self, endpoint: &Endpoint) -> String {
        at_rank(endpoint, self.config.socket_port)
    }

    /// Where the endpoint replays missed events, when the pool replays.
    pub fn replay_of(&self, endpoint: &Endpoint) -> Option<String> {
        self.config.replay_port.map(|base| at_rank(endpoint, base))
    }

    /// Applies one batch of events (a vLLM `KVEventBatch` payload) handed over in process instead of on
    /// a socket: the lab's engines live in the same process. The endpoint is numbered as a subscriber
    /// numbers it, and the batch decodes and applies exactly as a live one; events naming no model are
    /// `model`'s.
    pub fn apply_in_process(&self, endpoint: &Endpoint, model: &str, payload: &[u8]) {
        let id = match self.endpoint_id(endpoint.addr) {
            Some(id) => id,
            None => *self
                .ids_mut()
                .entry(endpoint.addr)
                .or_insert_with(|| self.next_id.fetch_add(1, Ordering::Relaxed)),
        };
        let subscription = Subscription {
            endpoint: id,
            publisher: String::new(),
            topic_filter: String::new(),
            default_model: model.to_owned(),
            replay: None,
        };
        subscriber::apply_batch(&subscription, b"", payload, &self.index, &self.stats);
    }

    /// Numbers the endpoint serving at `addr` as the supervisor would on seeing it (tests).
    #[cfg(test)]
    pub(crate) fn number(&self, addr: SocketAddr) -> EndpointId {
        *self.ids_mut().entry(addr).or_insert_with(|| self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    fn ids_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<SocketAddr, EndpointId>> {
        self.ids.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn at_rank(endpoint: &Endpoint, base: u16) -> String {
    let port = base.saturating_add(endpoint.rank);
    crate::datastore::format_host_port(SocketAddr::new(endpoint.addr.ip(), port))
}

/// The running subscribers, keyed by the endpoint's serving address.
#[derive(Debug)]
pub struct Subscribers {
    pool: Arc<KvEventPool>,
    running: HashMap<SocketAddr, Running>,
}

#[derive(Debug)]
struct Running {
    publisher: String,
    id: EndpointId,
    /// The endpoint's own subscriber; `None` without `discoverPods` (its events come to the central
    /// socket, which needs only its id).
    task: Option<JoinHandle<()>>,
}

impl Subscribers {
    pub fn new(pool: Arc<KvEventPool>) -> Self {
        Self { pool, running: HashMap::new() }
    }

    /// Starts a subscriber for each endpoint without one, stops those of endpoints no longer listed (or
    /// whose publisher moved) and drops what the index holds for them.
    pub fn reconcile(&mut self, endpoints: &[Arc<Endpoint>]) {
        let wanted: HashMap<SocketAddr, (String, Option<String>)> =
            endpoints.iter().map(|e| (e.addr, (self.pool.publisher_of(e), self.pool.replay_of(e)))).collect();
        let gone: Vec<SocketAddr> = self
            .running
            .iter()
            .filter(|(addr, running)| {
                wanted.get(*addr).is_none_or(|(publisher, _)| *publisher != running.publisher)
            })
            .map(|(addr, _)| *addr)
            .collect();
        for addr in gone {
            if let Some(running) = self.running.remove(&addr) {
                stop(&self.pool, addr, running);
            }
        }
        for (addr, (publisher, replay)) in wanted {
            if self.running.contains_key(&addr) {
                continue;
            }
            let id = self.pool.next_id.fetch_add(1, Ordering::Relaxed);
            self.pool.ids_mut().insert(addr, id);
            let task = self.pool.config.discover_pods.then(|| {
                let subscription = Subscription {
                    endpoint: id,
                    publisher: format!("tcp://{publisher}"),
                    topic_filter: self.pool.config.topic_filter.clone(),
                    default_model: String::new(),
                    replay: replay.map(|at| (format!("tcp://{at}"), self.pool.replays.clone())),
                };
                tracing::debug!(endpoint = %addr, publisher = %subscription.publisher, "KV-event subscriber started");
                tokio::spawn(subscriber::run(subscription, self.pool.index.clone(), self.pool.stats.clone()))
            });
            self.running.insert(addr, Running { publisher, id, task });
        }
        let active = self.running.values().filter(|r| r.task.is_some()).count();
        self.pool.stats.active_subscribers.set(i64::try_from(active).unwrap_or(i64::MAX));
    }
}

/// Stops a subscriber and drops its endpoint's entries: at once, and again once the aborted task has
/// ended, since one still applying a message when aborted could index a few more (under an id nobody
/// reads any more, but memory all the same).
fn stop(pool: &Arc<KvEventPool>, addr: SocketAddr, running: Running) {
    if let Some(task) = &running.task {
        task.abort();
    }
    pool.ids_mut().remove(&addr);
    let dropped = subscriber::lock(&pool.index).remove_endpoint(running.id);
    pool.stats.blocks_removed.inc_by(dropped as u64);
    tracing::debug!(endpoint = %addr, dropped, "KV-event subscriber stopped");
    let (pool, id) = (pool.clone(), running.id);
    let Some(task) = running.task else { return };
    tokio::spawn(async move {
        let _ = task.await;
        let late = subscriber::lock(&pool.index).remove_endpoint(id);
        pool.stats.blocks_removed.inc_by(late as u64);
    });
}

impl Drop for Subscribers {
    fn drop(&mut self) {
        for task in self.running.values().filter_map(|r| r.task.as_ref()) {
            task.abort();
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
