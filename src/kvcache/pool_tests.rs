use std::time::Duration;

use bytes::Bytes;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

use super::*;
use crate::kvcache::block_keys::{BlockKeyHasher, HashAlgorithm};
use crate::kvcache::index::{KvIndex, TierWeights};
use crate::kvcache::test_data::real_vllm_payloads;

fn pool(socket_port: u16) -> Arc<KvEventPool> {
    let index = Arc::new(RwLock::new(KvIndex::new(
        BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, ""),
        TierWeights::default(),
    )));
    Arc::new(KvEventPool::new(PoolConfig { socket_port, ..PoolConfig::default() }, index, Arc::default()))
}

fn endpoint(addr: &str, rank: u16) -> Arc<Endpoint> {
    let addr: SocketAddr = addr.parse().expect("address");
    Arc::new(Endpoint::new(addr.to_string(), addr).with_rank(rank))
}

#[test]
fn publishers_are_the_endpoint_ip_at_the_base_port_plus_the_rank() {
    let pool = pool(5557);
    assert_eq!(pool.publisher_of(&endpoint("10.0.0.7:8000", 0)), "10.0.0.7:5557");
    assert_eq!(pool.publisher_of(&endpoint("10.0.0.7:8001", 1)), "10.0.0.7:5558");
    assert_eq!(pool.publisher_of(&endpoint("[fd00::7]:8000", 2)), "[fd00::7]:5559");
}

#[tokio::test]
async fn subscribers_follow_the_endpoints_and_ids_are_never_reused() {
    let pool = pool(5557);
    let mut subscribers = Subscribers::new(pool.clone());
    let (a, b) = (endpoint("10.0.0.1:8000", 0), endpoint("10.0.0.2:8000", 0));
    subscribers.reconcile(&[a.clone(), b.clone()]);
    assert_eq!(pool.active_subscribers(), 2);
    let (id_a, id_b) = (pool.endpoint_id(a.addr).expect("a"), pool.endpoint_id(b.addr).expect("b"));
    assert_ne!(id_a, id_b);
    subscribers.reconcile(std::slice::from_ref(&b));
    assert_eq!(pool.active_subscribers(), 1);
    assert_eq!(pool.endpoint_id(a.addr), None, "a left");
    assert_eq!(pool.endpoint_id(b.addr), Some(id_b), "b's subscriber kept running");
    subscribers.reconcile(&[a.clone(), b.clone()]);
    let again = pool.endpoint_id(a.addr).expect("a is back");
    assert!(again != id_a && again != id_b, "a returning gets a fresh id");
    // A new rank moves the publisher: the subscriber restarts under a new id.
    subscribers.reconcile(&[endpoint("10.0.0.1:8000", 1), b]);
    assert!(pool.endpoint_id(a.addr).is_some_and(|id| id != again));
}

/// Over real ZMQ on loopback: the pool's subscriber indexes what a publisher at the endpoint's IP and the
/// configured port sends, and the endpoint's departure empties the index.
#[tokio::test]
async fn an_endpoint_leaving_takes_its_blocks_with_it() {
    let mut publisher = PubSocket::new();
    let bound = publisher.bind("tcp://127.0.0.1:0").await.expect("bind");
    let port = match bound {
        zeromq::Endpoint::Tcp(_, port) => port,
        other => panic!("not TCP: {other}"),
    };
    let pool = pool(port);
    let mut subscribers = Subscribers::new(pool.clone());
    subscribers.reconcile(&[endpoint("127.0.0.1:8000", 0)]);
    let payload = real_vllm_payloads().remove(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seq = 0u64;
    while subscriber::read(pool.index()).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "nothing indexed: {:?}", pool.stats());
        let frames = vec![
            Bytes::from_static(b"kv@127.0.0.1:8000@smol"),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::from(payload.clone()),
        ];
        publisher.send(ZmqMessage::try_from(frames).expect("frames")).await.expect("send");
        seq += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(subscriber::read(pool.index()).len(), 48);
    subscribers.reconcile(&[]);
    assert!(subscriber::read(pool.index()).is_empty(), "the departed endpoint's blocks are dropped");
    assert_eq!(pool.active_subscribers(), 0);
}
