//! `precise-prefix-cache-producer`'s parameters, as llm-d names them
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache,
//! pkg/kvcache, pkg/kvevents), decoded strictly and validated: what epp does not support is an error
//! naming the field.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::super::param_checks;
use super::TYPE_NAME;
use crate::kvcache::{HashAlgorithm, PeerConfig, PoolConfig, TierWeights, DEFAULT_MAX_BLOCKS};
use crate::scheduling::{parse_params, PluginError};

/// llm-d's `speculativeTTL` default.
const DEFAULT_SPECULATIVE_TTL: Duration = Duration::from_secs(2);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    token_processor_config: Option<TokenProcessorParams>,
    indexer_config: Option<IndexerParams>,
    kv_events_config: Option<KvEventsParams>,
    speculative_indexing: Option<bool>,
    #[serde(rename = "speculativeTTL")]
    speculative_ttl: Option<String>,
    /// An epp extension: speculative entries shared with the other epp replicas.
    speculative_peers: Option<PeersParams>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeersParams {
    /// `[ip]:port` this replica receives its peers' datagrams on.
    listen: String,
    /// `host:port` names of the peers (a headless Service's name resolves to every replica).
    peers: Vec<String>,
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
    /// `speculativePeers`: the other replicas those entries are shared with.
    pub peers: Option<PeerConfig>,
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
    let ttl = param_checks::duration("speculativeTTL", p.speculative_ttl.as_deref(), DEFAULT_SPECULATIVE_TTL)
        .map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    if ttl.is_zero() {
        return Err(invalid(name, "parameter `speculativeTTL` must be a positive duration"));
    }
    let peers = p.speculative_peers.map(|peers| peer_config(name, peers)).transpose()?;
    if peers.is_some() && !speculative {
        return Err(invalid(
            name,
            "parameter `speculativePeers` shares speculative entries: it needs `speculativeIndexing: true`",
        ));
    }
    let pool = pool_config(name, p.kv_events_config.unwrap_or_default())?;
    Ok(PreciseConfig {
        block_size_tokens,
        hash_seed: tokens.hash_seed.unwrap_or_default(),
        hash_algorithm,
        tiers,
        pool,
        max_blocks,
        speculative_ttl: speculative.then_some(ttl),
        peers,
    })
}

fn peer_config(name: &str, p: PeersParams) -> Result<PeerConfig, PluginError> {
    // `:9004` listens on every address, as Go's `net.Listen` reads it.
    let listen = if p.listen.starts_with(':') { format!("0.0.0.0{}", p.listen) } else { p.listen.clone() };
    let listen: SocketAddr = listen.parse().map_err(|_| {
        invalid(name, format!("parameter `speculativePeers.listen` {:?}: expected [ip]:port", p.listen))
    })?;
    if listen.port() == 0 {
        return Err(invalid(name, "parameter `speculativePeers.listen` needs a port (peers send to it)"));
    }
    if p.peers.is_empty() {
        return Err(invalid(name, "parameter `speculativePeers.peers` is empty: name the other replicas"));
    }
    for peer in &p.peers {
        let port = peer.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
        if port.and_then(|p| p.parse::<u16>().ok()).is_none_or(|p| p == 0) {
            return Err(invalid(
                name,
                format!("parameter `speculativePeers.peers` entry {peer:?}: expected host:port"),
            ));
        }
    }
    Ok(PeerConfig { listen, peers: p.peers })
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
    let central = match events.zmq_endpoint.as_deref().filter(|e| !e.is_empty()) {
        Some(endpoint) => Some(
            crate::kvcache::bind_address(endpoint)
                .map_err(|why| invalid(name, format!("kvEventsConfig.zmqEndpoint {why}")))?,
        ),
        None => None,
    };
    let discover_pods = events.discover_pods.unwrap_or(true);
    if !discover_pods && central.is_none() {
        return Err(invalid(
            name,
            "kvEventsConfig.discoverPods: false without a zmqEndpoint leaves nothing to subscribe to",
        ));
    }
    if let Some(engine) = events.engine_type.as_deref().filter(|e| !matches!(*e, "vllm" | "sglang")) {
        return Err(invalid(name, format!("kvEventsConfig.engineType {engine:?}: expected vllm or sglang")));
    }
    if events.concurrency == Some(0) {
        return Err(invalid(name, "kvEventsConfig.concurrency must be > 0"));
    }
    let defaults = PoolConfig::default();
    let discovery = events.pod_discovery_config.unwrap_or_default();
    let socket_port = match discovery.socket_port {
        Some(0) => return Err(invalid(name, "kvEventsConfig.podDiscoveryConfig.socketPort must be > 0")),
        port => port.unwrap_or(defaults.socket_port),
    };
    Ok(PoolConfig {
        socket_port,
        topic_filter: events.topic_filter.unwrap_or(defaults.topic_filter),
        // 0 is llm-d's "no replay".
        replay_port: discovery.replay_socket_port.filter(|&port| port > 0),
        discover_pods,
        central,
    })
}
