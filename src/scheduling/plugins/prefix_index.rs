//! The approximate prefix index: which endpoints were sent which prefix blocks
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/).
//!
//! Each endpoint has an LRU of block hashes bounded by its capacity; a reverse map from block hash to
//! the endpoints holding it answers lookups. Both live in one structure behind the producer's lock, and
//! every eviction and removal updates the reverse map in the same step, so they never disagree (GIE adds
//! to the LRUs before the reverse map, so a block evicted within one insertion can linger there).
//!
//! The LRUs are intrusive lists in one arena of nodes, and the reverse map names each holder's node, so
//! a block costs one hash-map lookup to insert or promote and one to evict, and no allocation once the
//! arena has grown. A request with a new 256-block prompt inserts 256 blocks and evicts as many; with an
//! LRU map per endpoint beside the reverse map that was a quarter of epp's CPU per 220 KB request
//! (BENCHMARKS.md §11).
//!
//! Endpoints get small dense slot numbers so the matcher can count hits in a plain vector.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use super::endpoint_key::{endpoint_key, EndpointKey, IntBuildHasher};
use crate::datastore::Endpoint;

type Slot = u32;
/// A node's index in the arena.
type NodeId = u32;
/// The end of a list (and of the free list).
const NIL: NodeId = NodeId::MAX;

/// One endpoint holding one block, and that block's node in the endpoint's LRU.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Holder {
    slot: Slot,
    node: NodeId,
}

/// The endpoints holding one block: almost always one or a few, so the first is stored inline.
#[derive(Debug)]
enum Holders {
    One(Holder),
    Many(Vec<Holder>),
}

impl Holders {
    fn as_slice(&self) -> &[Holder] {
        match self {
            Holders::One(h) => std::slice::from_ref(h),
            Holders::Many(v) => v,
        }
    }

    fn node_of(&self, slot: Slot) -> Option<NodeId> {
        self.as_slice().iter().find(|h| h.slot == slot).map(|h| h.node)
    }

    /// Adds a holder whose slot is not yet present.
    fn push(&mut self, holder: Holder) {
        match self {
            Holders::One(first) => *self = Holders::Many(vec![*first, holder]),
            Holders::Many(v) => v.push(holder),
        }
    }

    /// Removes `slot`; true when no holder is left.
    fn remove(&mut self, slot: Slot) -> bool {
        match self {
            Holders::One(h) => h.slot == slot,
            Holders::Many(v) => {
                v.retain(|h| h.slot != slot);
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

/// One LRU entry: a block an endpoint holds, linked from most (`prev` side) to least recently used.
#[derive(Debug, Clone, Copy)]
struct Node {
    hash: u64,
    prev: NodeId,
    next: NodeId,
}

/// The nodes of every endpoint's LRU, and the ids of the nodes free for reuse.
#[derive(Default)]
struct Arena {
    nodes: Vec<Node>,
    free: Vec<NodeId>,
}

impl Arena {
    fn alloc(&mut self, hash: u64) -> NodeId {
        let node = Node { hash, prev: NIL, next: NIL };
        match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        }
    }
}

/// One endpoint's LRU: the ends of its list in the arena. The strong `Arc` pins the endpoint's allocation
/// so its key cannot be reused.
struct EndpointBlocks {
    endpoint: Arc<Endpoint>,
    capacity: usize,
    len: usize,
    /// Most recently used.
    head: NodeId,
    /// Least recently used: the next to evict.
    tail: NodeId,
}

impl EndpointBlocks {
    fn unlink(&mut self, arena: &mut Arena, id: NodeId) {
        let Node { prev, next, .. } = arena.nodes[id as usize];
        match prev {
            NIL => self.head = next,
            p => arena.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => arena.nodes[n as usize].prev = prev,
        }
    }

    /// A node for a block this endpoint did not hold, as its most recent.
    fn push_new(&mut self, arena: &mut Arena, hash: u64) -> NodeId {
        let id = arena.alloc(hash);
        self.push_front(arena, id);
        self.len += 1;
        id
    }

    fn push_front(&mut self, arena: &mut Arena, id: NodeId) {
        arena.nodes[id as usize].prev = NIL;
        arena.nodes[id as usize].next = self.head;
        match self.head {
            NIL => self.tail = id,
            h => arena.nodes[h as usize].prev = id,
        }
        self.head = id;
    }
}

/// Block hash → endpoints, plus each endpoint's LRU.
#[derive(Default)]
pub(crate) struct PrefixIndex {
    slots: Vec<Option<EndpointBlocks>>,
    free_slots: Vec<Slot>,
    slot_by_endpoint: HashMap<EndpointKey, Slot, IntBuildHasher>,
    holders: HashMap<u64, Holders, IntBuildHasher>,
    arena: Arena,
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

    /// An endpoint's blocks from most to least recently used.
    #[cfg(test)]
    pub(crate) fn recency(&self, endpoint: &Arc<Endpoint>) -> Vec<u64> {
        let Some(blocks) = self.slot_of(endpoint).and_then(|s| self.slots[s as usize].as_ref()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut id = blocks.head;
        while id != NIL {
            out.push(self.arena.nodes[id as usize].hash);
            id = self.arena.nodes[id as usize].next;
        }
        out
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
            for holder in holders.as_slice() {
                counts[holder.slot as usize] += 1;
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
            if slot.is_some_and(|s| holders.node_of(s).is_some()) {
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
        let Self { slots, holders, arena, entries, .. } = self;
        let Some(blocks) = slots[slot as usize].as_mut() else { return };
        blocks.capacity = capacity;
        for &hash in hashes {
            match holders.entry(hash) {
                Entry::Occupied(mut held) => match held.get().node_of(slot) {
                    Some(node) => {
                        // Already held: promoted to most recent.
                        blocks.unlink(arena, node);
                        blocks.push_front(arena, node);
                    }
                    None => {
                        let node = blocks.push_new(arena, hash);
                        held.get_mut().push(Holder { slot, node });
                        *entries += 1;
                    }
                },
                Entry::Vacant(vacant) => {
                    let node = blocks.push_new(arena, hash);
                    vacant.insert(Holders::One(Holder { slot, node }));
                    *entries += 1;
                }
            }
        }
        while blocks.len > blocks.capacity && blocks.tail != NIL {
            let evicted = blocks.tail;
            blocks.unlink(arena, evicted);
            blocks.len -= 1;
            *entries -= 1;
            drop_holder(holders, arena.nodes[evicted as usize].hash, slot);
            arena.free.push(evicted);
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
        let blocks = EndpointBlocks { endpoint: endpoint.clone(), capacity, len: 0, head: NIL, tail: NIL };
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
            let mut id = blocks.head;
            while id != NIL {
                let node = self.arena.nodes[id as usize];
                drop_holder(&mut self.holders, node.hash, slot);
                self.arena.free.push(id);
                id = node.next;
            }
            self.entries -= blocks.len;
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
mod tests;
