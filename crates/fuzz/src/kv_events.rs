//! The KV-cache events model servers publish over ZMQ: the framing (live and replayed), the msgpack batch
//! decoder, and the precise prefix index the events feed.
//!
//! Input: a first byte choosing the surface, then the bytes. `0`: one batch payload, decoded and applied to
//! an index. Otherwise: multipart frames separated by `0xFF 0x00`, parsed as a live and as a replayed
//! message, whose payload is then decoded and applied.
//!
//! Invariants beyond "no panic": applying any events and then `AllBlocksCleared` leaves the index empty
//! (no entry leaks past a clear, whatever the announcements and removals were); a prefix lookup never
//! credits an endpoint with more blocks than the request has.

use epp::kvcache::{
    decode_batch, parse_live, parse_replay, BlockKeyHasher, HashAlgorithm, KvEvent, KvIndex, ReplayMessage,
    TierWeights,
};

const ENDPOINT: u32 = 7;

pub fn run(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    if selector == 0 {
        index_payload(rest);
        return;
    }
    let frames: Vec<&[u8]> = rest.split(|&b| b == 0xff).map(|f| f.strip_prefix(&[0]).unwrap_or(f)).collect();
    if let Ok(live) = parse_live(&frames) {
        index_payload(live.payload);
    }
    if let Ok(ReplayMessage::Batch { payload, .. }) = parse_replay(&frames) {
        index_payload(payload);
    }
}

fn index_payload(payload: &[u8]) {
    let Ok(batch) = decode_batch(payload) else { return };
    let mut index = KvIndex::new(BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, ""), TierWeights::default());
    let mut tokens = Vec::new();
    for event in &batch.events {
        if let KvEvent::BlockStored(stored) = event {
            tokens.extend_from_slice(&stored.token_ids);
        }
        index.apply(ENDPOINT, "model", event);
    }
    let mut keys = Vec::new();
    index.hasher().extend_keys(index.hasher().root("model"), &tokens, &mut keys);
    let mut matches = Vec::new();
    index.longest_prefix(&keys, &mut matches);
    for m in &matches {
        assert!(m.blocks <= keys.len(), "{} blocks matched of {}", m.blocks, keys.len());
    }
    index.apply(ENDPOINT, "model", &KvEvent::AllBlocksCleared);
    assert!(index.is_empty(), "{} blocks left after AllBlocksCleared", index.len());
}
