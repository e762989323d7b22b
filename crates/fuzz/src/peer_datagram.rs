//! The datagrams epp replicas send each other with `speculativePeers` (epp's own wire format,
//! `src/kvcache/peers.rs`), read from a UDP socket any pod could reach.
//!
//! Invariants beyond "no panic": a datagram that decodes encodes back to one that decodes the same (the
//! address may be written differently: `[::0001]:80` reads as `[::1]:80`); applied to a pool, a placement
//! is credited with at most its own keys, and once its first token is reported and its TTL has run, nothing
//! of it is left in the index.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use epp::datastore::Endpoint;
use epp::kvcache::{
    decode_peer, encode_peer, lock_index, read_index, BlockKeyHasher, HashAlgorithm, KvEventPool, KvIndex,
    PeerMessage, PoolConfig, TierWeights,
};

const TTL: Duration = Duration::from_secs(2);

pub fn run(data: &[u8]) {
    let Ok(datagram) = decode_peer(data) else { return };
    let mut again = Vec::new();
    encode_peer(&datagram.message, datagram.fingerprint, datagram.origin, &mut again);
    assert_eq!(decode_peer(&again).as_ref(), Ok(&datagram), "re-encoded datagram reads differently");

    let index = Arc::new(RwLock::new(KvIndex::new(
        BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, ""),
        TierWeights::default(),
    )));
    let pool = KvEventPool::new(PoolConfig::default(), index, Arc::default());
    if let PeerMessage::Placed { endpoint, .. } = &datagram.message {
        // Number the endpoint the datagram names, as discovery would (an empty batch indexes nothing).
        pool.apply_in_process(&Endpoint::new("pod", *endpoint), "m", b"");
    }
    let now = Instant::now();
    pool.apply_peer(datagram.origin, &datagram.message, now, TTL);
    if let PeerMessage::Placed { dispatch, keys, .. } = &datagram.message {
        let mut held = Vec::new();
        read_index(pool.index()).longest_prefix(keys, &mut held);
        assert!(held.iter().all(|m| m.blocks <= keys.len()), "credited past the request's keys");
        pool.apply_peer(datagram.origin, &PeerMessage::Served { dispatch: *dispatch }, now, TTL);
        lock_index(pool.index()).expire_speculation(now + TTL);
        held.clear();
        read_index(pool.index()).longest_prefix(keys, &mut held);
        assert!(held.is_empty(), "a served placement outlived its TTL");
    }
}
