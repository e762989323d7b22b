//! The transport over real UDP sockets on loopback.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::*;
use crate::kvcache::block_keys::{BlockKeyHasher, HashAlgorithm};
use crate::kvcache::index::{KvIndex, TierWeights};
use crate::kvcache::peers::encode;
use crate::kvcache::{read_index, PoolConfig};

const TTL: Duration = Duration::from_secs(2);

/// Every replica's block keys.
fn hasher() -> BlockKeyHasher {
    BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, "")
}

fn pool() -> Arc<KvEventPool> {
    let index = Arc::new(RwLock::new(KvIndex::new(hasher(), TierWeights::default())));
    Arc::new(KvEventPool::new(PoolConfig::default(), index, Arc::default()))
}

struct Replica {
    pool: Arc<KvEventPool>,
    outbox: PeerOutbox,
    addr: SocketAddr,
    _task: PoolTask,
}

fn socket() -> std::net::UdpSocket {
    bind("127.0.0.1:0".parse().expect("address")).expect("bind")
}

fn replica(socket: std::net::UdpSocket, peers: &[SocketAddr]) -> Replica {
    let pool = pool();
    pool.number(ENDPOINT.parse().expect("address"));
    let addr = socket.local_addr().expect("address");
    let (outbox, inbox) = PeerOutbox::channel(pool.stats().peer_dropped.clone());
    let transport = PeerTransport {
        pool: pool.clone(),
        peers: peers.iter().map(ToString::to_string).collect(),
        ttl: TTL,
    };
    let task = spawn_peers(socket, transport, inbox).expect("spawn");
    Replica { pool, outbox, addr, _task: task }
}

const ENDPOINT: &str = "10.0.0.1:8000";

fn holds(pool: &KvEventPool, keys: &[u64]) -> bool {
    let mut out = Vec::new();
    read_index(pool.index()).longest_prefix(keys, &mut out);
    !out.is_empty()
}

/// Waits (up to 10 s) for `done`; the test asserts what it then finds, not how long it took.
async fn until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_placement_reaches_the_peer_and_strangers_are_dropped() {
    let (a_socket, b_socket) = (socket(), socket());
    let stranger_in_list = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let b_addr = b_socket.local_addr().expect("address");
    let a = replica(a_socket, &[b_addr]);
    // B lists A, a peer with other block keys, and itself (a headless Service includes the replica).
    let b = replica(b_socket, &[a.addr, stranger_in_list.local_addr().expect("address"), b_addr]);

    let keys = vec![11, 12, 13];
    a.outbox.send(PeerMessage::Placed { dispatch: 1, endpoint: ENDPOINT.parse().expect("address"), keys });
    until(|| holds(&b.pool, &[11, 12, 13])).await;
    assert!(holds(&b.pool, &[11, 12, 13]), "A's placement is held on B");
    assert_eq!(b.pool.stats().peer_received.get(), 1);
    assert_eq!(a.pool.stats().peer_sent.get(), 1);

    // B's own placement comes back to it through the list: ignored, neither applied nor dropped.
    b.outbox.send(PeerMessage::Placed {
        dispatch: 2,
        endpoint: ENDPOINT.parse().expect("address"),
        keys: vec![21],
    });
    // Other block keys, from an address in the list; and a valid datagram from outside it.
    let mut out = Vec::new();
    let message =
        PeerMessage::Placed { dispatch: 3, endpoint: ENDPOINT.parse().expect("address"), keys: vec![31] };
    encode(&message, BlockKeyHasher::new(HashAlgorithm::CborFnv, 64, "other").fingerprint(), 7, &mut out);
    stranger_in_list.send_to(&out, b_addr).expect("send");
    encode(&message, hasher().fingerprint(), 7, &mut out);
    let outsider = std::net::UdpSocket::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    outsider.send_to(&out, b_addr).expect("send");
    until(|| b.pool.stats().peer_dropped.get() >= 2).await;
    assert_eq!(b.pool.stats().peer_dropped.get(), 2);
    assert!(!holds(&b.pool, &[31]));
    assert!(!holds(&a.pool, &[31]));
    // A got B's placement (B lists A), and B holds its own only where its producer would put it.
    until(|| holds(&a.pool, &[21])).await;
    assert!(holds(&a.pool, &[21]));
    assert_eq!(b.pool.stats().peer_received.get(), 1, "B's own datagram was not applied");

    // The first token starts the TTL on the peer.
    a.outbox.send(PeerMessage::Served { dispatch: 1 });
    until(|| b.pool.stats().peer_received.get() == 2).await;
    let expired = crate::kvcache::lock_index(b.pool.index()).expire_speculation(Instant::now() + TTL * 2);
    assert_eq!(expired, 1);
    assert!(!holds(&b.pool, &[11, 12, 13]));
}
