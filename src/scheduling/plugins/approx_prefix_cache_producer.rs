//! `approx-prefix-cache-producer`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/):
//! an approximation of each server's prefix cache, built from this EPP's own routing history.
//!
//! `prepare` hashes the prompt into chained block hashes and, under a read lock, finds for every
//! candidate the greedy longest prefix it is believed to hold, written as `attrs.prefix`.
//! `pre_request` records the hashes for the primary target (and the `"prefill"` profile's target) under
//! the write lock. GIE does that asynchronously; here it is synchronous, because the insertion is a few
//! microseconds and doing it inline means the very next request already sees it.
//!
//! The text hashed is the raw JSON bytes of the prompt (`SchedulingRequest::prefix_text`), so nothing is
//! re-serialised. Both calls rehash rather than carry hashes between them (the two may run on different
//! threads); hashing an 8K-token prompt costs a few microseconds.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use serde::Deserialize;

use super::prefix_hash::{prefix_block_hashes, CHARS_PER_TOKEN};
use super::prefix_index::PrefixIndex;
use crate::datastore::{Endpoint, EndpointTelemetry};
use crate::scheduling::PrefixIndexerMetrics;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, DataProducer, DispatchInfo, EndpointListener,
    FactoryContext, PluginError, PreRequest, PrefixMatch, SchedulingRequest, SchedulingResult,
};

pub(crate) const TYPE_NAME: &str = "approx-prefix-cache-producer";

/// The profile whose target also gets the prompt recorded (P/D disaggregation).
const PREFILL_PROFILE: &str = "prefill";

thread_local! {
    /// Block hashes of the request being handled; reused so steady state allocates nothing.
    static HASHES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// Matched blocks per index slot.
    static COUNTS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    auto_tune: Option<bool>,
    block_size_tokens: Option<usize>,
    /// Deprecated, in characters.
    block_size: Option<usize>,
    max_prefix_blocks_to_match: Option<usize>,
    max_prefix_tokens_to_match: Option<usize>,
    lru_capacity_per_server: Option<usize>,
}

/// Validated configuration (GIE defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApproxPrefixCacheConfig {
    /// Take the block size and LRU capacity from the servers' `cache_config_info` when reported.
    pub auto_tune: bool,
    pub block_size_tokens: usize,
    pub max_prefix_blocks_to_match: usize,
    /// 0 = unset; when set it replaces `max_prefix_blocks_to_match` with `tokens / block size` at the
    /// effective block size (llm-d-router semantics).
    pub max_prefix_tokens_to_match: usize,
    pub lru_capacity_per_server: usize,
}

impl Default for ApproxPrefixCacheConfig {
    fn default() -> Self {
        Self {
            auto_tune: true,
            block_size_tokens: 16,
            max_prefix_blocks_to_match: 256,
            max_prefix_tokens_to_match: 0,
            lru_capacity_per_server: 31_250,
        }
    }
}

impl ApproxPrefixCacheConfig {
    /// The per-request cap on hashed blocks, as llm-d resolves it: the token cap when set (a cap below
    /// one block hashes nothing), else the block cap, and both 0 is the whole prompt (which the body size
    /// limit bounds).
    fn max_blocks(&self, block_tokens: usize) -> usize {
        if self.max_prefix_tokens_to_match > 0 && block_tokens > 0 {
            self.max_prefix_tokens_to_match / block_tokens
        } else if self.max_prefix_blocks_to_match == 0 {
            usize::MAX
        } else {
            self.max_prefix_blocks_to_match
        }
    }

    fn lru_capacity(&self, m: &EndpointTelemetry) -> usize {
        if self.auto_tune && m.cache_num_blocks > 0 {
            m.cache_num_blocks
        } else {
            self.lru_capacity_per_server
        }
    }
}

/// The producer: configuration, the index behind one lock, and the metrics it publishes.
pub struct ApproxPrefixCacheProducer {
    config: ApproxPrefixCacheConfig,
    /// The last block size (tokens) an endpoint reported, 0 before any: used with `autoTune` when none of
    /// the endpoints at hand reports one, so lookups and insertions keep hashing at the same granularity.
    reported_block_tokens: AtomicUsize,
    index: RwLock<PrefixIndex>,
    metrics: Arc<PrefixIndexerMetrics>,
}

impl std::fmt::Debug for ApproxPrefixCacheProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApproxPrefixCacheProducer").field("config", &self.config).finish_non_exhaustive()
    }
}

impl ApproxPrefixCacheProducer {
    pub fn new(config: ApproxPrefixCacheConfig, metrics: Arc<PrefixIndexerMetrics>) -> Self {
        Self {
            config,
            reported_block_tokens: AtomicUsize::new(0),
            index: RwLock::new(PrefixIndex::default()),
            metrics,
        }
    }

    pub fn config(&self) -> &ApproxPrefixCacheConfig {
        &self.config
    }

    /// Total block entries in the index.
    pub fn indexed_blocks(&self) -> usize {
        self.read_index(super::prefix_index::PrefixIndex::entries)
    }

    /// The block size in tokens: with `autoTune`, the first size reported among `reported` (endpoint
    /// `cache_block_size` values, 0 = unknown), else the last one seen; otherwise `blockSizeTokens`.
    fn block_tokens(&self, mut reported: impl Iterator<Item = usize>) -> usize {
        if !self.config.auto_tune {
            return self.config.block_size_tokens;
        }
        if let Some(size) = reported.find(|&s| s > 0) {
            self.reported_block_tokens.store(size, Ordering::Relaxed);
            return size;
        }
        match self.reported_block_tokens.load(Ordering::Relaxed) {
            0 => self.config.block_size_tokens,
            size => size,
        }
    }

    /// Hashes `req`'s prompt in blocks of `block_tokens` and runs `f` on the hashes and the block size in
    /// characters.
    fn with_hashes<R>(
        &self,
        req: &SchedulingRequest<'_>,
        block_tokens: usize,
        f: impl FnOnce(&[u64], usize) -> R,
    ) -> R {
        let block_chars = block_tokens * CHARS_PER_TOKEN;
        let salt = req.parsed.and_then(|p| p.cache_salt.as_deref());
        HASHES.with(|buf| {
            let mut hashes = buf.borrow_mut();
            prefix_block_hashes(
                req.target_model,
                salt,
                req.prefix_text(),
                block_chars,
                self.config.max_blocks(block_tokens),
                &mut hashes,
            );
            f(&hashes, block_chars)
        })
    }

    // A poisoned lock means a panic mid-update elsewhere; the index is advisory, so keep serving with it.
    fn read_index<R>(&self, f: impl FnOnce(&PrefixIndex) -> R) -> R {
        f(&self.index.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn write_index<R>(&self, f: impl FnOnce(&mut PrefixIndex) -> R) -> R {
        f(&mut self.index.write().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl DataProducer for ApproxPrefixCacheProducer {
    fn produces(&self) -> &'static [DataKey] {
        &[DataKey::PrefixCacheMatch]
    }

    fn prepare(&self, req: &SchedulingRequest<'_>, candidates: &mut [Candidate]) {
        let block_tokens = self.block_tokens(candidates.iter().map(|c| c.telemetry.cache_block_size));
        self.with_hashes(req, block_tokens, |hashes, block_chars| {
            let total_blocks = hashes.len();
            let unmatched = PrefixMatch { match_blocks: 0, total_blocks, block_chars };
            for c in candidates.iter_mut() {
                c.attrs.prefix = Some(unmatched);
            }
            if total_blocks == 0 {
                return;
            }
            COUNTS.with(|counts| {
                let mut counts = counts.borrow_mut();
                self.read_index(|index| {
                    if !index.match_longest(hashes, &mut counts) {
                        return;
                    }
                    for c in candidates.iter_mut() {
                        if let Some(slot) = index.slot_of(&c.endpoint) {
                            let matched = counts[slot as usize] as usize;
                            c.attrs.prefix = Some(PrefixMatch { match_blocks: matched, ..unmatched });
                        }
                    }
                });
            });
        });
    }
}

impl PreRequest for ApproxPrefixCacheProducer {
    fn pre_request(&self, req: &SchedulingRequest<'_>, result: &SchedulingResult, _: &DispatchInfo) {
        let Some(target) = result.primary().and_then(|r| r.targets.first()) else { return };
        let prefill = result
            .profile_results
            .iter()
            .find(|(name, _)| name == PREFILL_PROFILE && *name != result.primary_profile)
            .and_then(|(_, r)| r.targets.first());
        let target_metrics = target.telemetry();
        let prefill_metrics = prefill.map(|p| p.telemetry());
        let reported = std::iter::once(&target_metrics).chain(&prefill_metrics).map(|m| m.cache_block_size);
        let block_tokens = self.block_tokens(reported);
        let outcome = self.with_hashes(req, block_tokens, |hashes, block_chars| {
            if hashes.is_empty() {
                return None;
            }
            let target_capacity = self.config.lru_capacity(&target_metrics);
            let prefill_capacity = prefill_metrics.as_deref().map(|m| self.config.lru_capacity(m));
            self.write_index(|index| {
                let matched = index.match_length(target, hashes);
                index.insert(target, target_capacity, hashes);
                if let (Some(p), Some(cap)) = (prefill, prefill_capacity) {
                    index.insert(p, cap, hashes);
                }
                Some((matched, hashes.len(), block_chars, index.entries()))
            })
        });
        if let Some((matched, total, block_chars, entries)) = outcome {
            self.metrics.set_size(i64::try_from(entries).unwrap_or(i64::MAX));
            self.metrics.observe_hit(matched as f64 / total as f64, matched * block_chars);
        }
    }
}

impl EndpointListener for ApproxPrefixCacheProducer {
    fn on_endpoints_removed(&self, removed: &[Arc<Endpoint>]) {
        let entries = self.write_index(|index| {
            for ep in removed {
                index.remove(ep);
            }
            index.prune_unreferenced();
            index.entries()
        });
        self.metrics.set_size(i64::try_from(entries).unwrap_or(i64::MAX));
    }
}

fn positive(name: &str, field: &str, value: Option<usize>, default: usize) -> Result<usize, PluginError> {
    match value {
        None => Ok(default),
        Some(0) => Err(PluginError::new(name, TYPE_NAME, format!("parameter `{field}` must be > 0"))),
        Some(v) => Ok(v),
    }
}

/// Decodes and validates the parameters
/// (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/).
pub(crate) fn parse_config(
    name: &str,
    params: Option<&serde_json::Value>,
) -> Result<ApproxPrefixCacheConfig, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let d = ApproxPrefixCacheConfig::default();
    if let (Some(chars), None) = (p.block_size.filter(|&c| c > 0), p.block_size_tokens) {
        return Err(PluginError::new(
            name,
            TYPE_NAME,
            format!(
                "parameter `blockSize` ({chars} characters) is deprecated; set `blockSizeTokens` (the cache \
                 block size in tokens) instead"
            ),
        ));
    }
    if p.block_size.is_some() {
        tracing::warn!(
            plugin = name,
            "parameter `blockSize` is deprecated and ignored; `blockSizeTokens` is used"
        );
    }
    Ok(ApproxPrefixCacheConfig {
        auto_tune: p.auto_tune.unwrap_or(d.auto_tune),
        block_size_tokens: positive(name, "blockSizeTokens", p.block_size_tokens, d.block_size_tokens)?,
        // 0 is allowed: with `maxPrefixTokensToMatch` unset or 0 too, the whole prompt is matched
        // (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/
        // plugin.go, `resolveMaxBlocks`).
        max_prefix_blocks_to_match: p.max_prefix_blocks_to_match.unwrap_or(d.max_prefix_blocks_to_match),
        max_prefix_tokens_to_match: p.max_prefix_tokens_to_match.unwrap_or(d.max_prefix_tokens_to_match),
        lru_capacity_per_server: positive(
            name,
            "lruCapacityPerServer",
            p.lru_capacity_per_server,
            d.lru_capacity_per_server,
        )?,
    })
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let config = parse_config(name, params)?;
    let producer = Arc::new(ApproxPrefixCacheProducer::new(config, ctx.metrics.prefix_indexer.clone()));
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .producer(producer.clone())
        .pre_request(producer.clone())
        .endpoint_listener(producer))
}

#[cfg(test)]
#[path = "approx_prefix_cache_producer_tests.rs"]
mod tests;
