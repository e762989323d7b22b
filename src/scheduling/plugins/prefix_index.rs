//! The approximate prefix index: which endpoints were sent which prefix blocks
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/).
//!
//! Each endpoint has an LRU of block hashes bounded by its capacity; a reverse map from block hash to
//! the endpoints holding it answers lookups. Both live in one structure behind the producer's lock, and
//! every eviction and removal updates the reverse map in the same step, so they never disagree (GIE adds
//! to the LRUs before the reverse map, so a block evicted within one insertion can linger there).
//!
//! Endpoints get small dense slot numbers so the matcher can count hits in a plain vector.

use std::collections::HashMap;
use std::sync::Arc;

use lru::LruCache;

use super::endpoint_key::{endpoint_key, EndpointKey, IntBuildHasher};
use crate::datastore::Endpoint;

type Slot = u32;

/// The endpoints holding one block: almost always one or a few, so the first is stored inline.
#[derive(Debug)]
enum Holders {
    One(Slot),
    Many(Vec<Slot>),
}

impl Holders {
    fn as_slice(&self) -> &[Slot] {
        match self {
            Holders::One(s) => std::slice::from_ref(s),
            Holders::Many(v) => v,
        }
    }

    fn insert(&mut self, slot: Slot) {
        match self {
            Holders::One(s) if *s == slot => {}
            Holders::One(s) => *self = Holders::Many(vec![*s, slot]),
            Holders::Many(v) => {
                if !v.contains(&slot) {
                    v.push(slot);
                }
            }
        }
    }

    /// Removes `slot`; true when no holder is left.
    fn remove(&mut self, slot: Slot) -> bool {
        match self {
            Holders::One(s) => *s == slot,
            Holders::Many(v) => {
                v.retain(|&s| s != slot);
                match v.as_slice() {
                    [] => true,
                    [only] => {
                        *self = Holders::One(*only);
                        false
                    }
                    _ => false,
                }
            }
        }
    }
}

/// One endpoint's LRU. The strong `Arc` pins the endpoint's allocation so its key cannot be reused.
struct EndpointBlocks {
    endpoint: Arc<Endpoint>,
    capacity: usize,
    lru: LruCache<u64, (), IntBuildHasher>,
}

/// Block hash → endpoints, plus each endpoint's LRU.
#[derive(Default)]
pub(crate) struct PrefixIndex {
    slots: Vec<Option<EndpointBlocks>>,
    free_slots: Vec<Slot>,
    slot_by_endpoint: HashMap<EndpointKey, Slot, IntBuildHasher>,
    holders: HashMap<u64, Holders, IntBuildHasher>,
    entries: usize,
}

impl PrefixIndex {
    /// Total block entries over all endpoints (the `prefix_indexer_size` gauge).
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// Number of endpoints with an LRU.
    #[cfg(test)]
    pub(crate) fn endpoint_count(&self) -> usize {
        self.slot_by_endpoint.len()
    }

    /// Number of distinct block hashes in the reverse map.
    #[cfg(test)]
    pub(crate) fn distinct_blocks(&self) -> usize {
        self.holders.len()
    }

    pub(crate) fn slot_of(&self, endpoint: &Arc<Endpoint>) -> Option<Slot> {
        self.slot_by_endpoint.get(&endpoint_key(endpoint)).copied()
    }

    /// Greedy longest-prefix match: for each leading hash, every slot holding it gets +1 in `counts`
    /// (indexed by slot, resized here); stops at the first hash no endpoint holds. Returns whether any
    /// block matched.
    pub(crate) fn match_longest(&self, hashes: &[u64], counts: &mut Vec<u32>) -> bool {
        counts.clear();
        counts.resize(self.slots.len(), 0);
        let mut any = false;
        for hash in hashes {
            let Some(holders) = self.holders.get(hash) else { break };
            any = true;
            for &slot in holders.as_slice() {
                counts[slot as usize] += 1;
            }
        }
        any
    }

    /// The greedy match length of one endpoint (what `match_longest` would count for it).
    pub(crate) fn match_length(&self, endpoint: &Arc<Endpoint>, hashes: &[u64]) -> usize {
        let slot = self.slot_of(endpoint);
        let mut matched = 0;
        for hash in hashes {
            let Some(holders) = self.holders.get(hash) else { break };
            if slot.is_some_and(|s| holders.as_slice().contains(&s)) {
                matched += 1;
            }
        }
        matched
    }

    /// Records that `endpoint` was sent `hashes`, evicting its least recently used blocks beyond
    /// `capacity` (which may change between calls, e.g. once the server reports its block count).
    pub(crate) fn insert(&mut self, endpoint: &Arc<Endpoint>, capacity: usize, hashes: &[u64]) {
        let capacity = capacity.max(1);
        let slot = match self.slot_of(endpoint) {
            Some(slot) => slot,
            None => self.add_endpoint(endpoint, capacity),
        };
        let Some(blocks) = self.slots[slot as usize].as_mut() else { return };
        blocks.capacity = capacity;
        for &hash in hashes {
            if blocks.lru.get(&hash).is_some() {
                continue; // already held: promoted to most recent
            }
            blocks.lru.put(hash, ());
            self.entries += 1;
            self.holders.entry(hash).and_modify(|h| h.insert(slot)).or_insert(Holders::One(slot));
        }
        while blocks.lru.len() > blocks.capacity {
            let Some((evicted, ())) = blocks.lru.pop_lru() else { break };
            self.entries -= 1;
            drop_holder(&mut self.holders, evicted, slot);
        }
    }

    /// Drops an endpoint's LRU and its reverse entries.
    pub(crate) fn remove(&mut self, endpoint: &Arc<Endpoint>) {
        if let Some(slot) = self.slot_by_endpoint.remove(&endpoint_key(endpoint)) {
            self.clear_slot(slot);
        }
    }

    /// Drops the state of endpoints nobody else references any more (gone from the pool and from every
    /// in-flight request): a safety net for removals that raced a dispatch.
    pub(crate) fn prune_unreferenced(&mut self) {
        let dead: Vec<(EndpointKey, Slot)> = self
            .slot_by_endpoint
            .iter()
            .filter(|(_, &slot)| {
                self.slots[slot as usize].as_ref().is_some_and(|b| Arc::strong_count(&b.endpoint) == 1)
            })
            .map(|(&k, &s)| (k, s))
            .collect();
        for (key, slot) in dead {
            self.slot_by_endpoint.remove(&key);
            self.clear_slot(slot);
        }
    }

    fn add_endpoint(&mut self, endpoint: &Arc<Endpoint>, capacity: usize) -> Slot {
        self.prune_unreferenced();
        // The LRU is unbounded to the crate and bounded here: the crate would preallocate its map at full
        // capacity (≈1 MB per endpoint at 31,250 entries) whether or not it is ever filled.
        let blocks = EndpointBlocks {
            endpoint: endpoint.clone(),
            capacity,
            lru: LruCache::unbounded_with_hasher(IntBuildHasher::default()),
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(blocks);
                slot
            }
            None => {
                self.slots.push(Some(blocks));
                (self.slots.len() - 1) as Slot
            }
        };
        self.slot_by_endpoint.insert(endpoint_key(endpoint), slot);
        slot
    }

    fn clear_slot(&mut self, slot: Slot) {
        if let Some(blocks) = self.slots[slot as usize].take() {
            for (&hash, _) in &blocks.lru {
                drop_holder(&mut self.holders, hash, slot);
            }
            self.entries -= blocks.lru.len();
            self.free_slots.push(slot);
        }
    }
}

fn drop_holder(holders: &mut HashMap<u64, Holders, IntBuildHasher>, hash: u64, slot: Slot) {
    if let Some(h) = holders.get_mut(&hash) {
        if h.remove(slot) {
            holders.remove(&hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::endpoint;

    fn holders_of(index: &PrefixIndex, hash: u64) -> Vec<Slot> {
        index.holders.get(&hash).map(|h| h.as_slice().to_vec()).unwrap_or_default()
    }

    #[test]
    fn greedy_match_stops_at_first_unheld_block() {
        let (a, b) = (endpoint(1), endpoint(2));
        let mut index = PrefixIndex::default();
        index.insert(&a, 100, &[1, 2, 3]);
        index.insert(&b, 100, &[1, 2, 9, 4]);
        let mut counts = Vec::new();
        assert!(index.match_longest(&[1, 2, 3, 4], &mut counts));
        let (sa, sb) = (index.slot_of(&a).unwrap(), index.slot_of(&b).unwrap());
        assert_eq!(counts[sa as usize], 3);
        // b holds 4 but not 3; 3 is held by a, so matching continues to 4, which b holds.
        assert_eq!(counts[sb as usize], 3);
        assert_eq!(index.match_length(&a, &[1, 2, 3, 4]), 3);
        assert_eq!(index.match_length(&b, &[1, 2, 3, 4]), 3);
        // No endpoint holds 7: matching stops there.
        assert!(index.match_longest(&[1, 7, 3], &mut counts));
        assert_eq!(counts[sa as usize], 1);
        assert!(!index.match_longest(&[7, 1], &mut counts));
        assert_eq!(index.match_length(&endpoint(3), &[1, 2]), 0);
    }

    #[test]
    fn eviction_keeps_reverse_map_consistent() {
        let a = endpoint(1);
        let mut index = PrefixIndex::default();
        index.insert(&a, 3, &[1, 2, 3]);
        index.insert(&a, 3, &[1]); // 1 becomes most recent; 2 is now the oldest
        index.insert(&a, 3, &[4]);
        assert!(holders_of(&index, 2).is_empty());
        assert_eq!(index.entries(), 3);
        assert_eq!(index.distinct_blocks(), 3);
        // One insertion larger than the capacity keeps only its last blocks.
        index.insert(&a, 2, &[10, 11, 12]);
        assert_eq!(index.entries(), 2);
        assert_eq!(index.distinct_blocks(), 2);
        assert!(!holders_of(&index, 11).is_empty());
        assert!(!holders_of(&index, 12).is_empty());
    }

    #[test]
    fn removal_drops_lru_and_reverse_entries_and_reuses_slots() {
        let (a, b) = (endpoint(1), endpoint(2));
        let mut index = PrefixIndex::default();
        index.insert(&a, 10, &[1, 2]);
        index.insert(&b, 10, &[2, 3]);
        index.remove(&a);
        assert_eq!(index.entries(), 2);
        assert!(holders_of(&index, 1).is_empty());
        assert_eq!(holders_of(&index, 2), vec![index.slot_of(&b).unwrap()]);
        let c = endpoint(3);
        index.insert(&c, 10, &[5]);
        assert_eq!(index.slot_of(&c), Some(0));
        assert_eq!(index.endpoint_count(), 2);
    }

    #[test]
    fn unreferenced_endpoints_are_pruned() {
        let mut index = PrefixIndex::default();
        index.insert(&endpoint(1), 10, &[1, 2]); // the only other reference is dropped here
        let kept = endpoint(2);
        index.insert(&kept, 10, &[3]);
        index.prune_unreferenced();
        assert_eq!(index.endpoint_count(), 1);
        assert_eq!(index.entries(), 1);
        assert!(holders_of(&index, 1).is_empty());
    }
}
