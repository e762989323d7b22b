use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::*;
use crate::kvcache::block_keys::{BlockKeyHasher, HashAlgorithm};
use crate::kvcache::index::{KvIndex, PrefixMatch, TierWeights};
use crate::kvcache::{read_index, PoolConfig};

fn pool() -> Arc<KvEventPool> {
    let index = Arc::new(RwLock::new(KvIndex::new(
        BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, ""),
        TierWeights::default(),
    )));
    Arc::new(KvEventPool::new(PoolConfig::default(), index, Arc::default()))
}

fn placed(addr: &str, keys: Vec<u64>) -> PeerMessage {
    PeerMessage::Placed { dispatch: 7, endpoint: addr.parse().expect("address"), keys }
}

fn held(pool: &KvEventPool, keys: &[u64]) -> Vec<PrefixMatch> {
    let mut out = Vec::new();
    read_index(pool.index()).longest_prefix(keys, &mut out);
    out
}

#[test]
fn messages_round_trip() {
    let mut out = Vec::new();
    for message in [
        placed("10.0.0.1:8000", vec![1, u64::MAX, 3]),
        placed("[fd00::1]:8000", vec![]),
        PeerMessage::Served { dispatch: u64::MAX },
    ] {
        encode(&message, 11, 22, &mut out);
        let datagram = decode(&out).expect("decodes");
        assert_eq!(datagram, PeerDatagram { fingerprint: 11, origin: 22, message });
    }
}

#[test]
fn a_long_prompt_keeps_its_first_keys_within_one_datagram() {
    let keys: Vec<u64> = (0..20_000).collect();
    let mut out = Vec::new();
    encode(&placed("10.0.0.1:8000", keys.clone()), 1, 2, &mut out);
    assert!(out.len() <= 65_507, "{} bytes", out.len());
    let Ok(PeerDatagram { message: PeerMessage::Placed { keys: got, .. }, .. }) = decode(&out) else {
        panic!("decodes")
    };
    assert_eq!(got, keys[..MAX_KEYS]);
}

#[test]
fn bad_datagrams_are_errors_never_panics() {
    let mut out = Vec::new();
    encode(&placed("10.0.0.1:8000", vec![1, 2]), 1, 2, &mut out);
    for cut in 0..out.len() {
        assert!(decode(&out[..cut]).is_err(), "a datagram cut at {cut} bytes");
    }
    let mut trailing = out.clone();
    trailing.push(0);
    assert_eq!(decode(&trailing), Err(PeerDecodeError::Trailing(1)));
    let mut version = out.clone();
    version[4] = 9;
    assert_eq!(decode(&version), Err(PeerDecodeError::Version(9)));
    let mut kind = out.clone();
    kind[5] = 3;
    assert_eq!(decode(&kind), Err(PeerDecodeError::Kind(3)));
    assert_eq!(decode(b"ZMQ\x01rest-of-it-----------------"), Err(PeerDecodeError::Magic));
    // A key count past the cap, with the bytes to back it or not.
    let mut count = Vec::new();
    encode(&placed("10.0.0.1:8000", vec![]), 1, 2, &mut count);
    let at = count.len() - 4;
    count[at..].copy_from_slice(&(MAX_KEYS as u32 + 1).to_le_bytes());
    assert_eq!(decode(&count), Err(PeerDecodeError::Truncated));
    let mut address = Vec::new();
    encode(&placed("10.0.0.1:8000", vec![]), 1, 2, &mut address);
    address[31] = b'x';
    assert_eq!(decode(&address), Err(PeerDecodeError::Address));
}

#[test]
fn a_peers_placement_is_held_until_its_ttl_after_the_first_token() {
    let pool = pool();
    let addr: SocketAddr = "10.0.0.1:8000".parse().expect("address");
    let id = pool.number(addr);
    let t0 = Instant::now();
    let ttl = Duration::from_secs(2);
    assert!(pool.apply_peer(5, &placed("10.0.0.1:8000", vec![1, 2, 3]), t0, ttl));
    assert_eq!(held(&pool, &[1, 2, 3]).first().map(|m| (m.endpoint, m.blocks)), Some((id, 3)));
    // Pending until the peer's first token, however long that takes.
    let late = t0 + Duration::from_secs(60);
    assert_eq!(crate::kvcache::lock_index(pool.index()).expire_speculation(late), 0);
    assert!(pool.apply_peer(5, &PeerMessage::Served { dispatch: 7 }, late, ttl));
    let expired = crate::kvcache::lock_index(pool.index()).expire_speculation(late + ttl);
    assert_eq!(expired, 1);
    assert!(held(&pool, &[1, 2, 3]).is_empty());
    // An endpoint this replica does not know is not indexed.
    assert!(!pool.apply_peer(5, &placed("10.0.0.9:8000", vec![1]), t0, ttl));
}

#[test]
fn peers_requests_never_share_an_id_with_this_replicas_own() {
    for dispatch in [0, 1, 7, 1 << 40] {
        let a = peer_dispatch(1, dispatch);
        assert!(a >= 1 << 63, "local dispatch ids count up from 0");
        assert_ne!(a, peer_dispatch(2, dispatch), "two senders' same dispatch id");
        assert_ne!(a, peer_dispatch(1, dispatch + 1));
    }
}
