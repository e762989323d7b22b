use super::*;
use crate::kvcache::block_keys::HashAlgorithm;
use crate::kvcache::events::decode_batch;

const A: EndpointId = 1;
const B: EndpointId = 2;

fn index(block: usize) -> KvIndex {
    KvIndex::new(BlockKeyHasher::new(HashAlgorithm::Xxh64, block, ""), TierWeights::default())
}

fn stored(hashes: &[u64], parent: Option<u64>, tokens: std::ops::Range<u32>, block_size: u32) -> KvEvent {
    KvEvent::BlockStored(BlockStored {
        block_hashes: hashes.to_vec(),
        parent_block_hash: parent,
        token_ids: tokens.collect(),
        block_size,
        ..BlockStored::default()
    })
}

fn in_tier(event: KvEvent, medium: &str) -> KvEvent {
    match event {
        KvEvent::BlockStored(s) => KvEvent::BlockStored(BlockStored { medium: Some(medium.into()), ..s }),
        other => other,
    }
}

fn removed(hashes: &[u64]) -> KvEvent {
    KvEvent::BlockRemoved { block_hashes: hashes.to_vec(), medium: None }
}

/// The request's keys for `tokens` under `model`.
fn request(index: &KvIndex, model: &str, tokens: std::ops::Range<u32>) -> Vec<u64> {
    let mut keys = Vec::new();
    let tokens: Vec<u32> = tokens.collect();
    index.request_keys(model, &tokens, &mut keys);
    keys
}

fn matches(index: &KvIndex, keys: &[u64]) -> Vec<(EndpointId, usize, f64)> {
    let mut out = Vec::new();
    index.longest_prefix(keys, &mut out);
    let mut found: Vec<_> = out.iter().map(|m| (m.endpoint, m.blocks, m.weighted)).collect();
    found.sort_by_key(|m| m.0);
    found
}

#[test]
fn stored_chains_continue_across_events_and_match_contiguously() {
    let mut ix = index(16);
    assert_eq!(ix.apply(A, "m", &stored(&[11], None, 0..16, 16)).blocks_stored, 1);
    assert_eq!(ix.apply(A, "m", &stored(&[12, 13], Some(11), 16..48, 16)).blocks_stored, 2);
    let keys = request(&ix, "m", 0..70);
    assert_eq!(keys.len(), 4);
    assert_eq!(matches(&ix, &keys), vec![(A, 3, 3.0)]);
    // B holds blocks 1 and 2 only under a different first block: not a prefix of this request.
    ix.apply(B, "m", &stored(&[21, 22], None, 100..132, 16));
    assert_eq!(matches(&ix, &keys), vec![(A, 3, 3.0)]);
    assert_eq!(matches(&ix, &request(&ix, "other-model", 0..70)), vec![], "the model is in the key");
}

#[test]
fn a_parent_never_seen_skips_the_event() {
    let mut ix = index(16);
    let applied = ix.apply(A, "m", &stored(&[12], Some(99), 16..32, 16));
    assert_eq!(applied, Applied { stores_skipped: 1, ..Applied::default() });
    assert!(ix.is_empty());
}

/// An engine block of 64 tokens is four of epp's blocks of 16; removing it removes all four, and a block
/// size that is not a multiple of epp's is skipped.
#[test]
fn engine_blocks_larger_than_epps() {
    let mut ix = index(16);
    ix.apply(A, "m", &stored(&[1, 2], None, 0..128, 64));
    assert_eq!(ix.len(), 8);
    assert_eq!(matches(&ix, &request(&ix, "m", 0..128)), vec![(A, 8, 8.0)]);
    assert_eq!(ix.apply(A, "m", &removed(&[2])).blocks_removed, 1);
    assert_eq!(matches(&ix, &request(&ix, "m", 0..128)), vec![(A, 4, 4.0)]);
    assert_eq!(ix.apply(A, "m", &stored(&[3], None, 0..24, 24)).stores_skipped, 1);
}

#[test]
fn duplicate_announcements_need_as_many_removals() {
    let mut ix = index(16);
    ix.apply(A, "m", &stored(&[1], None, 0..16, 16));
    ix.apply(A, "m", &stored(&[1], None, 0..16, 16));
    let keys = request(&ix, "m", 0..16);
    assert_eq!(ix.apply(A, "m", &removed(&[1])).blocks_removed, 1);
    assert_eq!(matches(&ix, &keys), vec![(A, 1, 1.0)], "one announcement left");
    ix.apply(A, "m", &removed(&[1]));
    assert_eq!(matches(&ix, &keys), vec![]);
    assert_eq!(ix.apply(A, "m", &removed(&[1])).removals_skipped, 1);
    assert!(ix.is_empty());
}

#[test]
fn tiers_weigh_blocks_at_their_best_tier() {
    let mut ix = index(16);
    ix.apply(A, "m", &in_tier(stored(&[1, 2], None, 0..32, 16), "CPU"));
    let keys = request(&ix, "m", 0..32);
    assert_eq!(matches(&ix, &keys), vec![(A, 2, 1.6)]);
    ix.apply(A, "m", &stored(&[1], None, 0..16, 16)); // block 0 also on the GPU
    assert_eq!(matches(&ix, &keys), vec![(A, 2, 1.8)]);
    // A removal names its tier: the GPU copy goes, the CPU copy stays.
    ix.apply(A, "m", &removed(&[1]));
    assert_eq!(matches(&ix, &keys), vec![(A, 2, 1.6)]);
}

#[test]
fn clearing_and_leaving_forget_one_endpoint_only() {
    let mut ix = index(16);
    ix.apply(A, "m", &stored(&[1], None, 0..16, 16));
    ix.apply(B, "m", &stored(&[1], None, 0..16, 16));
    let keys = request(&ix, "m", 0..16);
    assert_eq!(ix.apply(A, "m", &KvEvent::AllBlocksCleared).blocks_removed, 1);
    assert_eq!(matches(&ix, &keys), vec![(B, 1, 1.0)]);
    assert_eq!(ix.remove_endpoint(B), 1);
    assert!(ix.is_empty());
}

/// Blocks computed for a LoRA adapter are keyed under its name, which is what requests for it carry.
/// Events the index cannot key faithfully are skipped, not guessed at: token ids that do not cover the
/// blocks, and an adapter known only by its number (older vLLM), which requests never name.
#[test]
fn events_that_cannot_be_keyed_are_skipped() {
    let mut ix = index(16);
    assert_eq!(ix.apply(A, "m", &stored(&[1, 2], None, 0..24, 16)).stores_skipped, 1);
    let numbered = match stored(&[1], None, 0..16, 16) {
        KvEvent::BlockStored(s) => KvEvent::BlockStored(BlockStored { lora_id: Some(3), ..s }),
        other => other,
    };
    assert_eq!(ix.apply(A, "m", &numbered).stores_skipped, 1);
    assert!(ix.is_empty());
}

#[test]
fn lora_blocks_are_keyed_by_the_adapter() {
    let mut ix = index(16);
    let event = match stored(&[1], None, 0..16, 16) {
        KvEvent::BlockStored(s) => {
            KvEvent::BlockStored(BlockStored { lora_name: Some("sql-lora".into()), ..s })
        }
        other => other,
    };
    ix.apply(A, "base", &event);
    assert_eq!(matches(&ix, &request(&ix, "sql-lora", 0..16)), vec![(A, 1, 1.0)]);
    assert_eq!(matches(&ix, &request(&ix, "base", 0..16)), vec![]);
}

/// Real vLLM's events (tests/fixtures/vllm-real-kv-events.txt, block size 128): the decoding-filled
/// block of frame 4 chains to frame 3's through its parent hash, and at epp's block size of 16 each engine
/// block is eight of epp's.
#[test]
fn real_vllm_events_index_their_own_tokens() {
    let payloads = crate::kvcache::test_data::real_vllm_payloads();
    let mut ix = index(16);
    let mut tokens = Vec::new();
    for payload in &payloads[2..4] {
        for event in decode_batch(payload).unwrap().events {
            if let KvEvent::BlockStored(s) = &event {
                tokens.extend_from_slice(&s.token_ids);
            }
            assert_eq!(ix.apply(A, "smol", &event).stores_skipped, 0);
        }
    }
    let mut keys = Vec::new();
    ix.request_keys("smol", &tokens, &mut keys);
    assert_eq!(keys.len(), 16);
    let mut out = Vec::new();
    ix.longest_prefix(&keys, &mut out);
    assert_eq!(out, vec![PrefixMatch { endpoint: A, blocks: 16, weighted: 16.0 }]);
}

#[test]
fn a_full_index_stops_growing_until_removals_make_room() {
    let mut ix = index(16).with_max_blocks(3);
    let applied = ix.apply(A, "m", &stored(&[1, 2, 3, 4, 5], None, 0..80, 16));
    assert_eq!((applied.blocks_stored, applied.stores_skipped, ix.len()), (3, 1, 3));
    let keys = request(&ix, "m", 0..80);
    assert_eq!(matches(&ix, &keys), vec![(A, 3, 3.0)], "the indexed head of the prompt still matches");
    assert_eq!(ix.apply(B, "m", &stored(&[9], None, 500..516, 16)).stores_skipped, 1, "full");
    ix.apply(A, "m", &removed(&[3]));
    assert_eq!(ix.apply(B, "m", &stored(&[9], None, 500..516, 16)).blocks_stored, 1, "room again");
}

#[test]
fn speculative_entries_match_until_they_expire_and_survive_confirmation() {
    let mut ix = index(16);
    let keys = request(&ix, "m", 0..64);
    let now = std::time::Instant::now();
    let later = now + std::time::Duration::from_secs(2);
    ix.speculate(A, &keys, later);
    assert_eq!(matches(&ix, &keys), vec![(A, 4, 4.0)], "matched at once, at the best weight");
    assert_eq!(ix.next_expiry(), Some(later));
    // The engine confirms two of the blocks; expiry then leaves exactly those.
    ix.apply(A, "m", &stored(&[1, 2], None, 0..32, 16));
    assert_eq!(ix.expire_speculation(now), 0, "not yet");
    assert_eq!(ix.expire_speculation(later), 1);
    assert_eq!(matches(&ix, &keys), vec![(A, 2, 2.0)]);
    assert_eq!(ix.next_expiry(), None);
    // An endpoint that leaves takes its speculation with it, and a confirmed removal keeps it.
    ix.speculate(B, &keys, later);
    ix.remove_endpoint(B);
    assert_eq!(matches(&ix, &keys), vec![(A, 2, 2.0)]);
    ix.speculate(A, &keys, later);
    ix.apply(A, "m", &removed(&[1]));
    assert_eq!(matches(&ix, &keys), vec![(A, 4, 4.0)], "speculation still covers the removed block");
}

#[test]
fn pending_speculation_waits_for_its_first_token_and_never_outlives_the_guard() {
    use std::time::Duration;
    let mut ix = index(16);
    let keys = request(&ix, "m", 0..64);
    let now = std::time::Instant::now();
    ix.speculate_pending(A, &keys, 7, now);
    ix.speculate_pending(B, &keys, 8, now);
    assert!(ix.is_pending(7) && ix.is_pending(8));
    assert_eq!(ix.next_expiry(), Some(now + speculation::MAX_PENDING));
    assert_eq!(ix.expire_speculation(now + Duration::from_secs(60)), 0, "pending: no TTL runs");
    assert_eq!(matches(&ix, &keys), vec![(A, 4, 4.0), (B, 4, 4.0)]);

    // Request 7's first token starts its TTL; a second report of it does nothing.
    let ttl_end = now + Duration::from_secs(62);
    assert!(ix.served(7, ttl_end));
    assert!(!ix.served(7, ttl_end + Duration::from_secs(100)));
    assert_eq!(ix.next_expiry(), Some(ttl_end), "the TTL that runs ends first");
    assert_eq!(ix.expire_speculation(ttl_end), 1);
    assert_eq!(matches(&ix, &keys), vec![(B, 4, 4.0)]);

    // Request 8 never reports back: the guard drops it.
    assert_eq!(ix.pending_speculation(), 1);
    assert_eq!(ix.expire_speculation(now + speculation::MAX_PENDING), 1);
    assert_eq!(ix.pending_speculation(), 0);
    assert!(matches(&ix, &keys).is_empty());
    assert_eq!(ix.next_expiry(), None);

    // An endpoint that leaves takes its pending entries with it.
    ix.speculate_pending(A, &keys, 9, now);
    ix.remove_endpoint(A);
    assert!(!ix.is_pending(9));
    assert!(matches(&ix, &keys).is_empty());
}
