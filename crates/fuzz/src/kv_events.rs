//! The KV-cache events model servers publish over ZMQ: the framing (live and replayed), the msgpack batch
//! decoder, and the precise prefix index the events feed.
//!
//! Input: a first byte choosing the surface, then the bytes. `0`: one batch payload, decoded and applied to
//! an index. Otherwise: multipart frames, each a 2-byte little-endian length and its bytes (the last one
//! takes what is left), parsed as a live and as a replayed message, whose payload is then decoded and
//! applied.
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
    let frames = split_frames(rest);
    if let Ok(live) = parse_live(&frames) {
        index_payload(live.payload);
    }
    if let Ok(ReplayMessage::Batch { payload, .. }) = parse_replay(&frames) {
        index_payload(payload);
    }
}

/// Length-prefixed frames (any byte may occur inside a frame).
pub fn split_frames(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    while let [low, high, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*low, *high])).min(tail.len());
        let (frame, after) = tail.split_at(len);
        frames.push(frame);
        rest = after;
    }
    frames
}

/// The fuzz input for `frames` (the inverse of [`split_frames`]).
pub fn join_frames(frames: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![1];
    for frame in frames {
        let len = u16::try_from(frame.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&frame[..usize::from(len)]);
    }
    out
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
    index.request_keys("model", &tokens, &mut keys);
    let mut matches = Vec::new();
    index.longest_prefix(&keys, &mut matches);
    for m in &matches {
        assert!(m.blocks <= keys.len(), "{} blocks matched of {}", m.blocks, keys.len());
    }
    index.apply(ENDPOINT, "model", &KvEvent::AllBlocksCleared);
    assert!(index.is_empty(), "{} blocks left after AllBlocksCleared", index.len());
}
