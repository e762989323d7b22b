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
//! `costAwareMemoryConfig` (epp's index lives in memory, every replica subscribing to every pod) and the
//! centralised `zmqEndpoint` are errors. With `replaySocketPort`, missed events are replayed; without it
//! an endpoint's entries are dropped whenever events may have been missed. With `speculativeIndexing`,
//! `pre_request` indexes a routed request's blocks on its target for `speculativeTTL`
//! ([`crate::kvcache`]'s speculation), so a burst of one prompt lands together before the first event.

use std::cell::RefCell;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;

use super::prefix_hash::CHARS_PER_TOKEN;
use crate::kvcache::{
    lock_index, read_index, spawn_pool, BlockKeyHasher, HashAlgorithm, KvEventPool, KvIndex, PoolConfig,
    PoolTask, PrefixMatch as HeldPrefix, TierWeights, DEFAULT_MAX_BLOCKS,
};
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, DataProducer, DispatchInfo, FactoryContext,
    KvCacheMetrics, PluginError, PreRequest, PrefixMatch, SchedulingRequest, SchedulingResult,
};

pub(crate) const TYPE_NAME: &str = "precise-prefix-cache-producer";

/// llm-d's `speculativeTTL` default.
const DEFAULT_SPECULATIVE_TTL: Duration = Duration::from_secs(2);

thread_local! {
    static KEYS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static HELD: RefCell<Vec<HeldPrefix>> = const { RefCell::new(Vec::new()) };
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    token_processor_config: Option<TokenProcessorParams>,
    indexer_config: Option<IndexerParams>,
    kv_events_config: Option<KvEventsParams>,
    speculative_indexing: Option<bool>,
    #[serde(rename = "speculativeTTL")]
    speculative_ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TokenProcessorParams {
    block_size_tokens: Option<usize>,
    /// The older name of `blockSizeTokens` (llm-d's guides still write it).
    block_size: Option<usize>,
    hash_seed: Option<String>,
    hash_algorithm: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IndexerParams {
    kv_block_index_config: Option<KvBlockIndexParams>,
    kv_cache_backend_configs: Option<Vec<BackendParams>>,
    /// llm-d's deprecated in-indexer tokenizer pool; tokens come from `token-producer` here.
    tokenizers_pool_config: Option<serde_json::Value>,
    /// Where some of llm-d's guides put the flag.
    speculative_indexing: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KvBlockIndexParams {
    in_memory_config: Option<InMemoryParams>,
    cost_aware_memory_config: Option<serde_json::Value>,
    redis_config: Option<serde_json::Value>,
    enable_metrics: Option<bool>,
    metrics_logging_interval: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct InMemoryParams {
    /// The most distinct blocks indexed.
    size: Option<usize>,
    /// llm-d's cap on pods per block; here a block's holders are bounded by the pool, so it is accepted
    /// and not needed.
    #[allow(dead_code)]
    pod_cache_size: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendParams {
    name: String,
    weight: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KvEventsParams {
    topic_filter: Option<String>,
    concurrency: Option<usize>,
    engine_type: Option<String>,
    discover_pods: Option<bool>,
    pod_discovery_config: Option<PodDiscoveryParams>,
    zmq_endpoint: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodDiscoveryParams {
    socket_port: Option<u16>,
    replay_socket_port: Option<u16>,
}

/// Validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreciseConfig {
    pub block_size_tokens: usize,
    pub hash_seed: String,
    pub hash_algorithm: HashAlgorithm,
    pub tiers: TierWeights,
    pub pool: PoolConfig,
    /// `indexerConfig.kvBlockIndexConfig.inMemoryConfig.size`.
    pub max_blocks: usize,
    /// `speculativeIndexing` with `speculativeTTL`: how long a routed request's blocks count as held
    /// by its target before the engine says so; `None`: off.
    pub speculative_ttl: Option<Duration>,
}

/// The producer: the pool (index, subscribers' state) and the task that runs the subscribers.
#[derive(Debug)]
pub(crate) struct PrecisePrefixCacheProducer {
    pool: Arc<KvEventPool>,
    block_chars: usize,
    metrics: Arc<KvCacheMetrics>,
    speculative_ttl: Option<Duration>,
    _subscribers: Option<PoolTask>,
}

impl PrecisePrefixCacheProducer {
    /// A producer over `pool`, with no subscribers of its own (tests, the lab).
    pub(crate) fn new(
        pool: Arc<KvEventPool>,
        block_size_tokens: usize,
        metrics: Arc<KvCacheMetrics>,
    ) -> Self {
        let block_chars = block_size_tokens * CHARS_PER_TOKEN;
        Self { pool, block_chars, metrics, speculative_ttl: None, _subscribers: None }
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
                keys.clear();
                let blocks = {
                    let index = read_index(self.pool.index());
                    let hasher = index.hasher();
                    hasher.extend_keys(hasher.root(req.target_model), tokens, keys);
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
    /// With speculation on: the request's blocks count as held by its target from now, for the TTL.
    fn pre_request(&self, req: &SchedulingRequest<'_>, result: &SchedulingResult, _: &DispatchInfo) {
        let (Some(ttl), Some(tokens), false) = (self.speculative_ttl, req.token_ids, req.dry_run) else {
            return;
        };
        let Some(id) =
            result.primary().and_then(|r| r.targets.first()).and_then(|t| self.pool.endpoint_id(t.addr))
        else {
            return;
        };
        KEYS.with_borrow_mut(|keys| {
            keys.clear();
            let mut index = lock_index(self.pool.index());
            index.expire_speculation(req.now);
            let hasher = index.hasher();
            hasher.extend_keys(hasher.root(req.target_model), tokens, keys);
            index.speculate(id, keys, req.now + ttl);
        });
    }
}

/// The matched blocks at their tiers' weights (a CPU-tier block counts 0.8 by default), rounded: what
/// llm-d's `LongestPrefixScorer` credits.
fn weighted_blocks(held: &HeldPrefix) -> usize {
    (held.weighted.round().max(0.0) as usize).min(held.blocks)
}

fn invalid(name: &str, message: impl Into<String>) -> PluginError {
    PluginError::new(name, TYPE_NAME, message.into())
}

/// Decodes and validates the parameters.
pub(crate) fn parse_config(
    name: &str,
    params: Option<&serde_json::Value>,
) -> Result<PreciseConfig, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let tokens = p.token_processor_config.unwrap_or_default();
    let block_size_tokens = match tokens.block_size_tokens.or(tokens.block_size) {
        None => 16,
        Some(0) => return Err(invalid(name, "parameter `tokenProcessorConfig.blockSizeTokens` must be > 0")),
        Some(size) => size,
    };
    let hash_algorithm = match tokens.hash_algorithm.as_deref() {
        None | Some("cbor-fnv" | "fnv") => HashAlgorithm::CborFnv,
        Some("xxh64" | "xxhash") => HashAlgorithm::Xxh64,
        Some(other) => {
            return Err(invalid(
                name,
                format!(
                    "parameter `tokenProcessorConfig.hashAlgorithm` {other:?}: expected cbor-fnv or xxh64"
                ),
            ))
        }
    };
    let indexer = p.indexer_config.unwrap_or_default();
    let tiers = tier_weights(name, indexer.kv_cache_backend_configs)?;
    let max_blocks = index_size(name, indexer.kv_block_index_config.unwrap_or_default())?;
    if indexer.tokenizers_pool_config.is_some() {
        tracing::warn!(
            plugin = name,
            "indexerConfig.tokenizersPoolConfig is ignored: token ids come from token-producer"
        );
    }
    let speculative = p.speculative_indexing.or(indexer.speculative_indexing).unwrap_or(false);
    let ttl = match p.speculative_ttl.as_deref() {
        None => DEFAULT_SPECULATIVE_TTL,
        Some(text) => humantime::parse_duration(text).ok().filter(|ttl| !ttl.is_zero()).ok_or_else(|| {
            invalid(name, format!("parameter `speculativeTTL` {text:?} is not a positive duration"))
        })?,
    };
    let pool = pool_config(name, p.kv_events_config.unwrap_or_default())?;
    Ok(PreciseConfig {
        block_size_tokens,
        hash_seed: tokens.hash_seed.unwrap_or_default(),
        hash_algorithm,
        tiers,
        pool,
        max_blocks,
        speculative_ttl: speculative.then_some(ttl),
    })
}

fn tier_weights(name: &str, backends: Option<Vec<BackendParams>>) -> Result<TierWeights, PluginError> {
    let Some(backends) = backends else { return Ok(TierWeights::default()) };
    let mut tiers = Vec::with_capacity(backends.len());
    for b in backends {
        if !(b.weight.is_finite() && b.weight >= 0.0) {
            return Err(invalid(name, format!("kvCacheBackendConfigs `{}`: weight must be >= 0", b.name)));
        }
        tiers.push((b.name.to_ascii_lowercase(), b.weight));
    }
    Ok(TierWeights(tiers))
}

/// The index's cap on blocks; only the in-memory backend exists here.
fn index_size(name: &str, index: KvBlockIndexParams) -> Result<usize, PluginError> {
    if index.redis_config.is_some() || index.cost_aware_memory_config.is_some() {
        return Err(invalid(
            name,
            "indexerConfig.kvBlockIndexConfig: only inMemoryConfig is supported (every epp replica subscribes \
             to every pod and keeps its own index)",
        ));
    }
    let _ = (index.enable_metrics, index.metrics_logging_interval);
    match index.in_memory_config.unwrap_or_default().size {
        Some(0) => Err(invalid(name, "indexerConfig.kvBlockIndexConfig.inMemoryConfig.size must be > 0")),
        size => Ok(size.unwrap_or(DEFAULT_MAX_BLOCKS)),
    }
}

fn pool_config(name: &str, events: KvEventsParams) -> Result<PoolConfig, PluginError> {
    if events.zmq_endpoint.is_some() {
        return Err(invalid(
            name,
            "kvEventsConfig.zmqEndpoint (a centralised socket) is not supported: use discoverPods, which dials \
             every pod",
        ));
    }
    if events.discover_pods == Some(false) {
        return Err(invalid(name, "kvEventsConfig.discoverPods: false leaves nothing to subscribe to"));
    }
    if let Some(engine) = events.engine_type.as_deref().filter(|e| !matches!(*e, "vllm" | "sglang")) {
        return Err(invalid(name, format!("kvEventsConfig.engineType {engine:?}: expected vllm or sglang")));
    }
    if events.concurrency == Some(0) {
        return Err(invalid(name, "kvEventsConfig.concurrency must be > 0"));
    }
    let defaults = PoolConfig::default();
    let discovery = events.pod_discovery_config.unwrap_or_default();
    if discovery.replay_socket_port.is_some_and(|p| p > 0) {
        tracing::warn!(
            plugin = name,
            "replay is not implemented yet: entries are dropped when events may be lost"
        );
    }
    let socket_port = match discovery.socket_port {
        Some(0) => return Err(invalid(name, "kvEventsConfig.podDiscoveryConfig.socketPort must be > 0")),
        port => port.unwrap_or(defaults.socket_port),
    };
    Ok(PoolConfig {
        socket_port,
        topic_filter: events.topic_filter.unwrap_or(defaults.topic_filter),
        // 0 is llm-d's "no replay".
        replay_port: discovery.replay_socket_port.filter(|&port| port > 0),
    })
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
    let mut producer = PrecisePrefixCacheProducer::new(pool.clone(), config.block_size_tokens, metrics)
        .with_speculation(config.speculative_ttl);
    // Config checks and the lab build pipelines outside a runtime: nothing to subscribe for there.
    if tokio::runtime::Handle::try_current().is_ok() {
        producer._subscribers = Some(spawn_pool(pool, ctx.datastore.clone()));
    }
    let producer = Arc::new(producer);
    Ok(BuiltPlugin::new(TYPE_NAME, name).producer(producer.clone()).pre_request(producer))
}

#[cfg(test)]
#[path = "precise_prefix_cache_producer_tests.rs"]
mod tests;
