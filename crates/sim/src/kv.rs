//! The KV block pool: ref-counted fixed-size blocks, a prefix cache keyed by chained block hashes, and
//! an LRU free queue, modelled on vLLM V1's `BlockPool` / `FreeKVCacheBlockQueue`.
//!
//! Why it behaves this way: in vLLM a freed block keeps its contents (and its hash) while it sits in the
//! free queue, so a later request with the same prefix can reuse it until the allocator hands it out
//! again; allocation takes the least recently freed block first. That is what makes prefix-aware
//! routing pay off, and what makes cache churn evict it, so the simulator must do the same.

use std::collections::HashMap;

use xxhash_rust::xxh64::Xxh64;

/// Index of the "no block" end of the intrusive free list.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Block {
    ref_count: u32,
    /// Chained hash of the full block this holds, while it is registered in the prefix cache.
    hash: Option<u64>,
    prev: u32,
    next: u32,
    in_free_list: bool,
}

/// The pool. Block ids are `0..num_blocks`.
#[derive(Debug, Clone)]
pub(crate) struct BlockPool {
    blocks: Vec<Block>,
    /// Free list ends: allocation pops `head` (least recently freed), freeing appends at `tail`.
    head: u32,
    tail: u32,
    num_free: usize,
    cached: HashMap<u64, u32>,
    /// Hashes evicted since the last [`take_evictions`](Self::take_evictions), when recording (KV events).
    evictions: Option<Vec<u64>>,
}

impl BlockPool {
    pub(crate) fn new(num_blocks: usize) -> Self {
        let n = num_blocks.min(NIL as usize - 1);
        let blocks = (0..n)
            .map(|i| Block {
                ref_count: 0,
                hash: None,
                prev: if i == 0 { NIL } else { i as u32 - 1 },
                next: if i + 1 == n { NIL } else { i as u32 + 1 },
                in_free_list: true,
            })
            .collect();
        let (head, tail) = if n == 0 { (NIL, NIL) } else { (0, n as u32 - 1) };
        Self { blocks, head, tail, num_free: n, cached: HashMap::new(), evictions: None }
    }

    /// From now on, remembers each evicted hash until taken.
    pub(crate) fn record_evictions(&mut self) {
        self.evictions.get_or_insert_with(Vec::new);
    }

    pub(crate) fn take_evictions(&mut self) -> Vec<u64> {
        self.evictions.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Blocks with ref count 0 (cached or not): what allocation can use.
    pub(crate) fn num_free(&self) -> usize {
        self.num_free
    }

    /// Fraction of blocks held by requests, as vLLM's `kv_cache_usage_perc` reports it.
    pub(crate) fn usage(&self) -> f64 {
        if self.blocks.is_empty() {
            return 0.0;
        }
        1.0 - self.num_free as f64 / self.blocks.len() as f64
    }

    /// The cached block holding `hash`, if any.
    pub(crate) fn lookup(&self, hash: u64) -> Option<u32> {
        self.cached.get(&hash).copied()
    }

    /// Whether the block is free (ref count 0): touching it takes it off the free list.
    pub(crate) fn is_free(&self, block: u32) -> bool {
        self.blocks[block as usize].ref_count == 0
    }

    /// Takes a reference on a cache-hit block, removing it from the free list if nobody held it.
    pub(crate) fn touch(&mut self, block: u32) {
        if self.blocks[block as usize].ref_count == 0 {
            self.unlink(block);
        }
        self.blocks[block as usize].ref_count += 1;
    }

    /// Allocates the least recently freed block, evicting its cached hash. `None` when none is free.
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        let block = self.head;
        if block == NIL {
            return None;
        }
        self.unlink(block);
        let entry = &mut self.blocks[block as usize];
        entry.ref_count = 1;
        if let Some(hash) = entry.hash.take() {
            if self.cached.get(&hash) == Some(&block) {
                self.cached.remove(&hash);
                if let Some(evicted) = &mut self.evictions {
                    evicted.push(hash);
                }
            }
        }
        Some(block)
    }

    /// Drops one reference per block. Blocks are appended to the free list in reverse, so a request's
    /// tail blocks (least likely to be shared) are evicted before its head blocks, as vLLM does.
    pub(crate) fn free_all(&mut self, blocks: &[u32]) {
        for &block in blocks.iter().rev() {
            let entry = &mut self.blocks[block as usize];
            entry.ref_count = entry.ref_count.saturating_sub(1);
            if entry.ref_count == 0 {
                self.push_tail(block);
            }
        }
    }

    /// Registers a full block under `hash` unless another block already holds that hash; returns whether
    /// it did (a newly cached block, which vLLM announces).
    pub(crate) fn register(&mut self, block: u32, hash: u64) -> bool {
        if self.blocks[block as usize].hash.is_some() || self.cached.contains_key(&hash) {
            return false;
        }
        self.blocks[block as usize].hash = Some(hash);
        self.cached.insert(hash, block);
        true
    }

    fn unlink(&mut self, block: u32) {
        let (prev, next, listed) = {
            let b = &self.blocks[block as usize];
            (b.prev, b.next, b.in_free_list)
        };
        if !listed {
            return;
        }
        if prev == NIL {
            self.head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        let b = &mut self.blocks[block as usize];
        (b.prev, b.next, b.in_free_list) = (NIL, NIL, false);
        self.num_free -= 1;
    }

    fn push_tail(&mut self, block: u32) {
        if self.blocks[block as usize].in_free_list {
            return;
        }
        let tail = self.tail;
        {
            let b = &mut self.blocks[block as usize];
            (b.prev, b.next, b.in_free_list) = (tail, NIL, true);
        }
        if tail == NIL {
            self.head = block;
        } else {
            self.blocks[tail as usize].next = block;
        }
        self.tail = block;
        self.num_free += 1;
    }
}

/// Chained hashes of the full `block_size` blocks of `tokens`: `h_i = xxh64(h_{i-1} ‖ tokens_i)`, with
/// the root derived from the LoRA adapter so that adapters never share KV.
pub(crate) fn block_hashes(tokens: &[u32], block_size: usize, lora: Option<&str>) -> Vec<u64> {
    let mut parent = match lora {
        None => 0,
        Some(name) => xxhash_rust::xxh64::xxh64(name.as_bytes(), 0x10a),
    };
    let mut hashes = Vec::with_capacity(tokens.len() / block_size.max(1));
    for block in tokens.chunks_exact(block_size.max(1)) {
        let mut hasher = Xxh64::new(0);
        hasher.update(&parent.to_le_bytes());
        for token in block {
            hasher.update(&token.to_le_bytes());
        }
        parent = hasher.digest();
        hashes.push(parent);
    }
    hashes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_allocation_and_eviction() {
        let mut pool = BlockPool::new(3);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        pool.register(a, 11);
        pool.register(b, 22);
        pool.free_all(&[a, b]); // b appended first, so b is evicted before a
        assert_eq!(pool.num_free(), 3);
        assert_eq!(pool.allocate(), Some(2), "never-used block first");
        assert_eq!(pool.allocate(), Some(b));
        assert_eq!(pool.lookup(22), None, "b's hash evicted on reuse");
        assert_eq!(pool.lookup(11), Some(a));
        pool.touch(a);
        assert_eq!(pool.num_free(), 0);
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.usage(), 1.0);
    }

    #[test]
    fn shared_blocks_are_ref_counted() {
        let mut pool = BlockPool::new(2);
        let a = pool.allocate().unwrap();
        pool.register(a, 7);
        pool.touch(a);
        pool.free_all(&[a]);
        assert!(!pool.is_free(a));
        pool.free_all(&[a]);
        assert!(pool.is_free(a));
        assert_eq!(pool.lookup(7), Some(a), "freed blocks stay cached");
    }

    #[test]
    fn hashes_chain_and_depend_on_lora() {
        let tokens: Vec<u32> = (0..40).collect();
        let h = block_hashes(&tokens, 16, None);
        assert_eq!(h.len(), 2);
        assert_eq!(block_hashes(&tokens[..32], 16, None), h);
        let mut other = tokens.clone();
        other[0] = 99;
        let h2 = block_hashes(&other, 16, None);
        assert_ne!(h[1], h2[1], "a change in block 0 changes every later hash");
        assert_ne!(block_hashes(&tokens, 16, Some("a"))[0], h[0]);
    }
}
