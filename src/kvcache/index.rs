//! The precise prefix index: which endpoint holds which block, in which tier, built from the engines' own
//! events, and each endpoint's longest cached run of a request's blocks.
//!
//! Keyed as llm-d keys it (llm-d/llm-d-router:pkg/kvcache): epp's [`block keys`](super::block_keys),
//! recomputed from each event's token ids, map to the endpoints holding them; per endpoint, each engine
//! block (its hash, its tier) maps to the epp keys it covers, so a `BlockRemoved` naming only engine hashes
//! can be undone, and a `parent_block_hash` continues the chain of an earlier event. Announcements are
//! reference-counted: a block stored twice (chunked offload, several KV groups) survives one removal.
//! Scoring credits each endpoint for its contiguous run from block 0 only, each block at the best weight of
//! the tiers it is held in.
//!
//! Pure and synchronous: the subscribers apply events under a lock ([`super::SharedIndex`]); how the
//! scheduling side will read it without one is not decided yet (issue 20).

use std::cell::RefCell;
use std::collections::HashMap;

use super::block_keys::BlockKeyHasher;
use super::events::{BlockStored, KvEvent};
use super::slots::{for_each_slot, KeyMap, SlotSet, Slots};
pub use super::tiers::TierWeights;

pub use super::slots::EndpointId;

/// What applying one event did, for the consumer's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub blocks_stored: usize,
    pub blocks_removed: usize,
    /// A `BlockStored` whose parent the index never saw (its chain cannot be continued), whose block size
    /// is not a multiple of epp's, whose token ids do not cover its blocks, or whose LoRA adapter has no
    /// name.
    pub stores_skipped: usize,
    /// A removal of a block the index does not hold.
    pub removals_skipped: usize,
}

/// One endpoint's longest cached run of a request's blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixMatch {
    pub endpoint: EndpointId,
    /// Contiguous blocks from block 0.
    pub blocks: usize,
    /// The same blocks, each at the best weight of the tiers it is held in.
    pub weighted: f64,
}

#[derive(Debug, Clone, Copy)]
struct Holder {
    endpoint: EndpointId,
    tier: u8,
    refs: u32,
}

/// Who holds one epp block: the holders with their reference counts, sorted by (endpoint, tier), and the
/// same as slot sets for the lookup walk.
#[derive(Debug, Default)]
struct BlockHolders {
    holders: Vec<Holder>,
    /// Slots holding the block in any tier.
    any: SlotSet,
    /// Slots holding it in the best-weighted tier (the rest get a deficit in the lookup).
    best: SlotSet,
}

/// A lookup's working sets, reused by each thread.
#[derive(Debug, Default)]
struct Walk {
    alive: Vec<u64>,
    deficit: Vec<f64>,
}

/// Blocks looked up together in the walk.
const LOOKAHEAD: usize = 8;

thread_local! {
    static WALK: RefCell<Walk> = RefCell::new(Walk::default());
}

#[derive(Debug)]
struct EngineBlock {
    keys: Vec<u64>,
    refs: u32,
}

/// The index.
#[derive(Debug)]
pub struct KvIndex {
    hasher: BlockKeyHasher,
    tiers: TierWeights,
    best_tier: (u8, f64),
    blocks: KeyMap<BlockHolders>,
    endpoints: HashMap<EndpointId, HashMap<(u64, u8), EngineBlock>>,
    slots: Slots,
    scratch: Vec<u64>,
    /// The most distinct blocks held (`inMemoryConfig.size`).
    max_keys: usize,
    speculation: Speculation,
}

/// epp's default cap on distinct blocks: 10 million, about 2.3 GiB at the measured 235 bytes a block
/// (BENCHMARKS.md §2), room for 100 pods of 100,000 blocks each. llm-d's default, 10^8, would allow 23 GiB.
pub const DEFAULT_MAX_BLOCKS: usize = 10_000_000;

impl KvIndex {
    pub fn new(hasher: BlockKeyHasher, tiers: TierWeights) -> Self {
        Self {
            hasher,
            best_tier: tiers.best(),
            tiers,
            blocks: KeyMap::default(),
            endpoints: HashMap::new(),
            slots: Slots::default(),
            scratch: Vec::new(),
            max_keys: DEFAULT_MAX_BLOCKS,
            speculation: Speculation::default(),
        }
    }

    /// The same index holding at most `max_keys` distinct blocks.
    pub fn with_max_blocks(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    pub fn hasher(&self) -> &BlockKeyHasher {
        &self.hasher
    }

    /// A request's block keys, what [`longest_prefix`](Self::longest_prefix) and
    /// [`speculate`](Self::speculate) take: its token ids' full blocks, chained from `model`'s root (the
    /// target model after rewrites, or the LoRA adapter), into `keys` (cleared first).
    pub fn request_keys(&self, model: &str, tokens: &[u32], keys: &mut Vec<u64>) {
        keys.clear();
        self.hasher.extend_keys(self.hasher.root(model), tokens, keys);
    }

    /// Distinct epp blocks held by at least one endpoint.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Applies one event from `endpoint`; `model` is the model its blocks belong to unless the event names
    /// a LoRA adapter (the topic's model, or the endpoint's).
    pub fn apply(&mut self, endpoint: EndpointId, model: &str, event: &KvEvent) -> Applied {
        match event {
            KvEvent::BlockStored(stored) => self.stored(endpoint, model, stored),
            KvEvent::BlockRemoved { block_hashes, medium } => {
                let tier = self.tiers.tier(medium.as_deref());
                let mut applied = Applied::default();
                for &hash in block_hashes {
                    if self.release(endpoint, hash, tier) {
                        applied.blocks_removed += 1;
                    } else {
                        applied.removals_skipped += 1;
                    }
                }
                applied
            }
            KvEvent::AllBlocksCleared => {
                Applied { blocks_removed: self.remove_endpoint(endpoint), ..Applied::default() }
            }
        }
    }

    fn stored(&mut self, endpoint: EndpointId, model: &str, stored: &BlockStored) -> Applied {
        let skipped = Applied { stores_skipped: 1, ..Applied::default() };
        let hashes = stored.block_hashes.len();
        let engine_block = match stored.block_size as usize {
            0 if hashes > 0 => stored.token_ids.len() / hashes,
            size => size,
        };
        let unnamed_adapter = stored.lora_id.is_some() && stored.lora_name.is_none();
        if engine_block == 0
            || engine_block % self.hasher.block_size() != 0
            || stored.token_ids.len() != hashes * engine_block
            || unnamed_adapter
        {
            return skipped;
        }
        let tier = self.tiers.tier(stored.medium.as_deref());
        let mut parent = match stored.parent_block_hash {
            None => self.hasher.root(stored.lora_name.as_deref().unwrap_or(model)),
            Some(hash) => match self.parent_key(endpoint, hash) {
                Some(key) => key,
                None => return skipped,
            },
        };
        let mut applied = Applied::default();
        for (&hash, tokens) in stored.block_hashes.iter().zip(stored.token_ids.chunks_exact(engine_block)) {
            if self.blocks.len() >= self.max_keys {
                // Full: the rest of the event is not indexed (later blocks chain from these), so a
                // publisher flooding events cannot grow the index past its cap; removals make room.
                applied.stores_skipped += 1;
                break;
            }
            self.scratch.clear();
            self.hasher.extend_keys(parent, tokens, &mut self.scratch);
            parent = self.scratch.last().copied().unwrap_or(parent);
            let held = self.endpoints.entry(endpoint).or_default();
            if let Some(block) = held.get_mut(&(hash, tier)) {
                block.refs = block.refs.saturating_add(1);
                continue;
            }
            held.insert((hash, tier), EngineBlock { keys: self.scratch.clone(), refs: 1 });
            let slot = self.slots.slot(endpoint);
            for i in 0..self.scratch.len() {
                self.hold(endpoint, slot, tier, self.scratch[i]);
            }
            applied.blocks_stored += 1;
        }
        applied
    }

    /// The last epp key of the engine block `hash` on `endpoint`, in whichever tier holds it.
    fn parent_key(&self, endpoint: EndpointId, hash: u64) -> Option<u64> {
        let held = self.endpoints.get(&endpoint)?;
        (0..self.tiers.0.len() as u8)
            .chain([u8::MAX])
            .find_map(|tier| held.get(&(hash, tier))?.keys.last().copied())
    }

    /// Drops one announcement of an engine block; returns false if the endpoint does not hold it.
    fn release(&mut self, endpoint: EndpointId, hash: u64, tier: u8) -> bool {
        let Some(held) = self.endpoints.get_mut(&endpoint) else { return false };
        let Some(block) = held.get_mut(&(hash, tier)) else { return false };
        block.refs = block.refs.saturating_sub(1);
        if block.refs == 0 {
            if let Some(block) = held.remove(&(hash, tier)) {
                self.unhold(endpoint, tier, &block.keys);
            }
        }
        true
    }

    /// One more announcement of epp block `key` on `endpoint` (in `slot`) in `tier`.
    fn hold(&mut self, endpoint: EndpointId, slot: u32, tier: u8, key: u64) {
        let best = self.is_best(tier);
        let block = self.blocks.entry(key).or_default();
        match block.holders.binary_search_by_key(&(endpoint, tier), |h| (h.endpoint, h.tier)) {
            Ok(i) => block.holders[i].refs = block.holders[i].refs.saturating_add(1),
            Err(i) => {
                block.holders.insert(i, Holder { endpoint, tier, refs: 1 });
                block.any.insert(slot);
                if best {
                    block.best.insert(slot);
                }
            }
        }
    }

    /// Whether a block in `tier` counts at the best weight: the best-weighted tier, and speculation (a
    /// block about to be computed lands in the engine's GPU cache).
    fn is_best(&self, tier: u8) -> bool {
        tier == self.best_tier.0 || tier == SPECULATIVE_TIER
    }

    fn unhold(&mut self, endpoint: EndpointId, tier: u8, keys: &[u64]) {
        let slot = self.slots.get(endpoint);
        for key in keys {
            let Some(block) = self.blocks.get_mut(key) else { continue };
            let holders = &mut block.holders;
            if let Ok(i) = holders.binary_search_by_key(&(endpoint, tier), |h| (h.endpoint, h.tier)) {
                holders[i].refs = holders[i].refs.saturating_sub(1);
                if holders[i].refs == 0 {
                    holders.remove(i);
                    if let Some(slot) = slot {
                        // The endpoint may still hold the block another way (confirmed and speculated).
                        let (best_tier, mine) =
                            (self.best_tier.0, holders.iter().filter(|h| h.endpoint == endpoint));
                        let (mut any, mut best) = (false, false);
                        for h in mine {
                            any = true;
                            best |= h.tier == best_tier || h.tier == SPECULATIVE_TIER;
                        }
                        if !any {
                            block.any.remove(slot);
                        }
                        if !best {
                            block.best.remove(slot);
                        }
                    }
                }
            }
            if block.holders.is_empty() {
                self.blocks.remove(key);
            }
        }
    }

    /// Forgets everything `endpoint` holds (it left the pool, or cleared its cache); returns how many
    /// engine blocks that was.
    pub fn remove_endpoint(&mut self, endpoint: EndpointId) -> usize {
        self.forget_speculation(endpoint);
        let held = self.endpoints.remove(&endpoint).unwrap_or_default();
        let count = held.len();
        for ((_, tier), block) in held {
            self.unhold(endpoint, tier, &block.keys);
        }
        self.slots.release(endpoint);
        count
    }

    /// Each endpoint's contiguous run of `keys` from the first (the request's block keys, see
    /// [`BlockKeyHasher::extend_keys`]), into `out` (cleared first, then sorted by endpoint); endpoints
    /// holding none are absent. Walks the blocks intersecting the set of endpoints still matching with
    /// each block's holders, a word per 64 endpoints, until the set is empty.
    pub fn longest_prefix(&self, keys: &[u64], out: &mut Vec<PrefixMatch>) {
        out.clear();
        WALK.with_borrow_mut(|walk| self.walk(keys, walk, out));
        out.sort_unstable_by_key(|m| m.endpoint);
    }

    fn walk(&self, keys: &[u64], walk: &mut Walk, out: &mut Vec<PrefixMatch>) {
        let Some(first) = keys.first().and_then(|key| self.blocks.get(key)) else { return };
        let Walk { alive, deficit } = walk;
        alive.clear();
        alive.extend_from_slice(first.any.words());
        deficit.clear();
        deficit.resize(self.slots.capacity(), 0.0);
        let best_weight = self.best_tier.1;
        let mut emit = |slot: u32, depth: usize, deficit: &[f64]| {
            if let Some(endpoint) = self.slots.owner(slot) {
                let weighted = depth as f64 * best_weight - deficit[slot as usize];
                out.push(PrefixMatch { endpoint, blocks: depth, weighted });
            }
        };
        // Blocks are looked up a batch at a time: the probes are independent, so the CPU overlaps their
        // cache misses instead of waiting for each in turn (9.3 µs -> 4.9 µs for 512 blocks, BENCHMARKS.md §2).
        let mut batch: [Option<&BlockHolders>; LOOKAHEAD] = [None; LOOKAHEAD];
        let mut depth = 0;
        'walk: while depth < keys.len() {
            let end = (depth + LOOKAHEAD).min(keys.len());
            for (slot, key) in batch.iter_mut().zip(&keys[depth..end]) {
                *slot = self.blocks.get(key);
            }
            for held in &batch[..end - depth] {
                let Some(held) = held else { break 'walk };
                let mut any_left = false;
                for (w, word) in alive.iter_mut().enumerate() {
                    let holding = held.any.words().get(w).copied().unwrap_or(0);
                    for_each_slot(&[*word & !holding], |bit| emit(w as u32 * 64 + bit, depth, deficit));
                    *word &= holding;
                    any_left |= *word != 0;
                    let lesser = *word & !held.best.words().get(w).copied().unwrap_or(0);
                    for_each_slot(&[lesser], |bit| {
                        let slot = w as u32 * 64 + bit;
                        deficit[slot as usize] += best_weight - self.weight_in(held, slot);
                    });
                }
                if !any_left {
                    return;
                }
                depth += 1;
            }
        }
        for (w, &word) in alive.iter().enumerate() {
            for_each_slot(&[word], |bit| emit(w as u32 * 64 + bit, depth, deficit));
        }
    }

    /// The best weight of the tiers `slot`'s endpoint holds `block` in.
    fn weight_in(&self, block: &BlockHolders, slot: u32) -> f64 {
        let Some(endpoint) = self.slots.owner(slot) else { return 0.0 };
        let start = block.holders.partition_point(|h| h.endpoint < endpoint);
        block.holders[start..]
            .iter()
            .take_while(|h| h.endpoint == endpoint)
            .map(|h| self.tiers.weight(h.tier))
            .fold(0.0, f64::max)
    }
}

#[path = "speculation.rs"]
mod speculation;
use speculation::{Speculation, SPECULATIVE_TIER};

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
