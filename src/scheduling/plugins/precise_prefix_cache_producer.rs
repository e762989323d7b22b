//! `precise-prefix-cache-producer`
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache): each
//! candidate's cached prefix of the request, from what the engines themselves report holding (their
//! KV-cache events, [`crate::kvcache`]) instead of what epp sent where.
//!
//! `prepare` keys the request's token ids (from a `token-producer`) into epp's chain of block keys and
//! reads each candidate's longest contiguous run from block 0 in the index, written as `attrs.prefix` for
//! `prefix-cache-scorer` and `prefix-cache-affinity-filter`. A request without token ids matches nothing.
//! The subscribers follow the datastore's endpoints ([`crate::kvcache::spawn_pool`]), started when the
//! plugin is built inside a tokio runtime and stopped when it is dropped.
//!
//! llm-d's parameters load unchanged. What epp does not do yet is refused or said: `redisConfig` and
//! `costAwareMemoryConfig` (epp's index lives in memory, every replica subscribing to every pod) are
//! errors. A centralised `zmqEndpoint` is bound, the engines publishing to it ([`crate::kvcache`]'s
//! central socket), beside or instead of (`discoverPods: false`) the dialled subscribers. With `replaySocketPort`, missed events are replayed; without it
//! an endpoint's entries are dropped whenever events may have been missed. With `speculativeIndexing`,
//! `pre_request` indexes a routed request's blocks on its target until `speculativeTTL` after its first
//! token ([`crate::kvcache`]'s speculation), so a burst of one prompt lands together before the first event.

use std::cell::RefCell;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::prefix_hash::CHARS_PER_TOKEN;
use crate::kvcache::{
    bind_peer_socket, lock_index, read_index, spawn_peers, spawn_pool, BlockKeyHasher, KvEventPool, KvIndex,
    PeerLink, PeerMessage, PeerOutbox, PeerTransport, PoolTask, PrefixMatch as HeldPrefix,
};
use crate::scheduling::{
    BuiltPlugin, Candidate, Completion, DataKey, DataProducer, DispatchInfo, FactoryContext, KvCacheMetrics,
    PluginError, PreRequest, PrefixMatch, ResponseHook, SchedulingRequest, SchedulingResult,
};

pub(crate) const TYPE_NAME: &str = "precise-prefix-cache-producer";

#[path = "precise_prefix_params.rs"]
mod params;
pub(crate) use params::parse_config;

thread_local! {
    static KEYS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static HELD: RefCell<Vec<HeldPrefix>> = const { RefCell::new(Vec::new()) };
}

/// The producer: the pool (index, subscribers' state) and the task that runs the subscribers.
#[derive(Debug)]
pub(crate) struct PrecisePrefixCacheProducer {
    pool: Arc<KvEventPool>,
    block_chars: usize,
    metrics: Arc<KvCacheMetrics>,
    speculative_ttl: Option<Duration>,
    /// `speculativePeers`: where this replica's speculative entries go for the other replicas.
    peers: Option<PeerOutbox>,
    _subscribers: Option<PoolTask>,
    _peers: Option<PoolTask>,
}

impl PrecisePrefixCacheProducer {
    /// A producer over `pool`, with no subscribers of its own (tests, the lab).
    pub(crate) fn new(
        pool: Arc<KvEventPool>,
        block_size_tokens: usize,
        metrics: Arc<KvCacheMetrics>,
    ) -> Self {
        let block_chars = block_size_tokens * CHARS_PER_TOKEN;
        Self {
            pool,
            block_chars,
            metrics,
            speculative_ttl: None,
            peers: None,
            _subscribers: None,
            _peers: None,
        }
    }

    /// The same producer indexing each routed request's blocks on its target for `ttl`.
    pub(crate) fn with_speculation(mut self, ttl: Option<Duration>) -> Self {
        self.speculative_ttl = ttl;
        self
    }

    /// Drops speculative entries expired at `now` (a write lock only when one has).
    fn expire(&self, now: std::time::Instant) {
        if read_index(self.pool.index()).next_expiry().is_some_and(|t| t <= now) {
            lock_index(self.pool.index()).expire_speculation(now);
        }
    }

    /// Counts one lookup, unless it is a route probe's.
    fn record_lookup(&self, req: &SchedulingRequest<'_>, held: &[HeldPrefix], blocks: usize) {
        if req.dry_run {
            return;
        }
        self.metrics.lookup_requests.inc();
        if !held.is_empty() {
            self.metrics.lookup_hits.inc();
        }
        self.metrics.index_blocks.set(i64::try_from(blocks).unwrap_or(i64::MAX));
    }
}

impl DataProducer for PrecisePrefixCacheProducer {
    fn produces(&self) -> &'static [DataKey] {
        &[DataKey::PrefixCacheMatch]
    }

    fn prepare(&self, req: &SchedulingRequest<'_>, candidates: &mut [Candidate]) {
        let block_chars = self.block_chars;
        let Some(tokens) = req.token_ids else {
            let none = PrefixMatch { match_blocks: 0, total_blocks: 0, block_chars };
            for c in candidates.iter_mut() {
                c.attrs.prefix = Some(none);
            }
            return;
        };
        if self.speculative_ttl.is_some() {
            self.expire(req.now);
        }
        KEYS.with_borrow_mut(|keys| {
            HELD.with_borrow_mut(|held| {
                let blocks = {
                    let index = read_index(self.pool.index());
                    index.request_keys(req.target_model, tokens, keys);
                    index.longest_prefix(keys, held);
                    index.len()
                };
                self.record_lookup(req, held, blocks);
                let unmatched = PrefixMatch { match_blocks: 0, total_blocks: keys.len(), block_chars };
                for c in candidates.iter_mut() {
                    let matched = self
                        .pool
                        .endpoint_id(c.endpoint.addr)
                        .and_then(|id| held.binary_search_by_key(&id, |m| m.endpoint).ok())
                        .map_or(0, |i| weighted_blocks(&held[i]));
                    c.attrs.prefix = Some(PrefixMatch { match_blocks: matched, ..unmatched });
                }
            });
        });
    }
}

impl PreRequest for PrecisePrefixCacheProducer {
    /// With speculation on: the request's blocks count as held by its target from now until the TTL after
    /// its first token ([`crate::kvcache`]'s speculation says why not from now).
    fn pre_request(&self, req: &SchedulingRequest<'_>, result: &SchedulingResult, info: &DispatchInfo) {
        let (Some(_), Some(tokens), false) = (self.speculative_ttl, req.token_ids, req.dry_run) else {
            return;
        };
        let Some(target) = result.primary().and_then(|r| r.targets.first()).map(|t| t.addr) else { return };
        let Some(id) = self.pool.endpoint_id(target) else { return };
        KEYS.with_borrow_mut(|keys| {
            let mut index = lock_index(self.pool.index());
            index.expire_speculation(req.now);
            index.request_keys(req.target_model, tokens, keys);
            index.speculate_pending(id, keys, info.dispatch_id, req.now);
            drop(index);
            if let Some(peers) = &self.peers {
                let placed =
                    PeerMessage::Placed { dispatch: info.dispatch_id, endpoint: target, keys: keys.clone() };
                peers.send(placed);
            }
        });
    }
}

impl ResponseHook for PrecisePrefixCacheProducer {
    /// The first token: the engine has computed the blocks, and its events follow; the TTL starts.
    fn on_response_chunk(&self, info: &DispatchInfo, _chunk: &[u8], first: bool, now: Instant) {
        if first {
            self.start_ttl(info.dispatch_id, now);
        }
    }

    fn handles_response_chunks(&self) -> bool {
        true
    }

    /// An end without a first token (an error, a cancel) starts the TTL too.
    fn on_complete(&self, info: &DispatchInfo, completion: &Completion) {
        self.start_ttl(info.dispatch_id, completion.now);
    }
}

impl PrecisePrefixCacheProducer {
    fn start_ttl(&self, dispatch: u64, now: Instant) {
        let Some(ttl) = self.speculative_ttl else { return };
        if read_index(self.pool.index()).is_pending(dispatch) {
            lock_index(self.pool.index()).served(dispatch, now + ttl);
            if let Some(peers) = &self.peers {
                peers.send(PeerMessage::Served { dispatch });
            }
        }
    }
}

/// The matched blocks at their tiers' weights (a CPU-tier block counts 0.8 by default), rounded: what
/// llm-d's `LongestPrefixScorer` credits.
fn weighted_blocks(held: &HeldPrefix) -> usize {
    (held.weighted.round().max(0.0) as usize).min(held.blocks)
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let config = parse_config(name, params)?;
    let hasher = BlockKeyHasher::new(config.hash_algorithm, config.block_size_tokens, &config.hash_seed);
    let index =
        Arc::new(RwLock::new(KvIndex::new(hasher, config.tiers.clone()).with_max_blocks(config.max_blocks)));
    let metrics = ctx.metrics.kv_cache.clone();
    let pool = Arc::new(KvEventPool::new(config.pool.clone(), index, metrics.events.clone()));
    ctx.kv_pools.register(pool.clone());
    let peer_drops = metrics.events.peer_dropped.clone();
    let mut producer = PrecisePrefixCacheProducer::new(pool.clone(), config.block_size_tokens, metrics)
        .with_speculation(config.speculative_ttl);
    // Config checks and the lab build pipelines outside a runtime: nothing to subscribe for there.
    let in_runtime = tokio::runtime::Handle::try_current().is_ok();
    if let (Some(peers), Some(ttl)) = (&config.peers, config.speculative_ttl) {
        let (outbox, inbox) = PeerOutbox::channel(peer_drops);
        producer.peers = Some(outbox);
        if in_runtime {
            let transport = PeerTransport { pool: pool.clone(), peers: peers.peers.clone(), ttl };
            let task = bind_peer_socket(peers.listen)
                .and_then(|socket| spawn_peers(socket, transport, inbox))
                .map_err(|e| {
                    PluginError::new(
                        name,
                        TYPE_NAME,
                        format!("speculativePeers.listen {}: {e}", peers.listen),
                    )
                })?;
            producer._peers = Some(task);
        } else {
            ctx.kv_pools.register_peer_link(Arc::new(PeerLink::new(pool.clone(), ttl, inbox)));
        }
    }
    if in_runtime {
        producer._subscribers = Some(spawn_pool(pool, ctx.datastore.clone()));
    }
    let producer = Arc::new(producer);
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .producer(producer.clone())
        .pre_request(producer.clone())
        .response(producer))
}

#[cfg(test)]
#[path = "precise_prefix_cache_producer_tests.rs"]
mod tests;
