use std::sync::RwLock;

use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

use super::*;
use crate::datastore::Endpoint;
use crate::kvcache::block_keys::{BlockKeyHasher, HashAlgorithm};
use crate::kvcache::index::{KvIndex, TierWeights};
use crate::kvcache::pool::{PoolConfig, Subscribers};
use crate::kvcache::subscriber::read;
use crate::kvcache::test_data::real_vllm_payloads;

#[test]
fn the_topic_names_the_pod_by_its_serving_address() {
    assert_eq!(topic_pod(b"kv@10.0.0.7:8000@meta-llama/Llama-3.1-8B"), "10.0.0.7:8000".parse().ok());
    assert_eq!(topic_pod(b"kv@[fd00::7]:8000@m"), "[fd00::7]:8000".parse().ok());
    assert_eq!(topic_pod(b"kv@10.0.0.7:8000"), None, "no model");
    assert_eq!(topic_pod(b"kv@pod-a@m"), None, "not an address");
    assert_eq!(topic_pod(b"\xff@10.0.0.7:8000@m"), None);
}

#[test]
fn zmq_endpoints_bind_as_vllm_writes_them() {
    assert_eq!(bind_address("tcp://*:5557").as_deref(), Ok("tcp://0.0.0.0:5557"));
    assert_eq!(bind_address("tcp://10.0.0.1:5557").as_deref(), Ok("tcp://10.0.0.1:5557"));
    for bad in ["ipc:///tmp/kv", "tcp://*", "tcp://*:99999", "5557"] {
        assert!(bind_address(bad).is_err(), "{bad}");
    }
}

fn central_pool(address: &str, discover_pods: bool) -> Arc<KvEventPool> {
    let index = Arc::new(RwLock::new(KvIndex::new(
        BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, ""),
        TierWeights::default(),
    )));
    let config = PoolConfig { central: Some(address.to_string()), discover_pods, ..PoolConfig::default() };
    Arc::new(KvEventPool::new(config, index, Arc::default()))
}

fn frames(topic: &str, seq: u64, payload: &[u8]) -> Vec<Bytes> {
    vec![
        Bytes::from(topic.to_owned()),
        Bytes::copy_from_slice(&seq.to_be_bytes()),
        Bytes::copy_from_slice(payload),
    ]
}

#[tokio::test]
async fn messages_go_to_the_pod_their_topic_names_and_strangers_are_counted() {
    let pool = central_pool("tcp://127.0.0.1:0", false);
    let mut subscribers = Subscribers::new(pool.clone());
    let a: SocketAddr = "10.0.0.1:8000".parse().expect("address");
    subscribers.reconcile(&[Arc::new(Endpoint::new("a", a))]);
    assert_eq!(pool.active_subscribers(), 0, "without discoverPods nothing is dialled");
    let id = pool.endpoint_id(a).expect("numbered");
    let payload = real_vllm_payloads().remove(0);
    let mut pods = Pods::default();
    pods.apply(&pool, &frames("kv@10.0.0.9:8000@smol", 0, &payload));
    assert!(read(pool.index()).is_empty(), "a pod not in the pool");
    pods.apply(&pool, &frames("kv@10.0.0.1:8000@smol", 0, &payload));
    assert_eq!(read(pool.index()).len(), 48);
    assert_eq!(pool.stats().unknown_pods.get(), 1);
    // A jump in a's sequence, which nobody can replay here: a's entries go before the rest applies.
    pods.apply(&pool, &frames("kv@10.0.0.1:8000@smol", 5, &[0xc0]));
    assert!(read(pool.index()).is_empty());
    assert_eq!((pool.stats().gaps.get(), pool.stats().malformed.get()), (1, 1));
    // a leaves and comes back: a new id, and its sequence starts over with it.
    subscribers.reconcile(&[]);
    assert_eq!(pool.endpoint_id(a), None);
    subscribers.reconcile(&[Arc::new(Endpoint::new("a", a))]);
    assert_ne!(pool.endpoint_id(a), Some(id));
    pods.apply(&pool, &frames("kv@10.0.0.1:8000@smol", 0, &payload));
    assert_eq!(read(pool.index()).len(), 48);
    assert_eq!(pool.stats().gaps.get(), 1, "no gap counted against the old sequence");
}

/// Over real ZMQ on loopback: epp binds, a publisher connects (as vLLM does with a host in `endpoint`).
#[tokio::test]
async fn engines_connect_to_the_socket_epp_binds() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        probe.local_addr().expect("address").port()
    };
    let pool = central_pool(&format!("tcp://127.0.0.1:{port}"), false);
    let datastore = Arc::new(crate::datastore::Datastore::new("pool"));
    let a: SocketAddr = "127.0.0.1:8000".parse().expect("address");
    datastore.set_endpoints(vec![Endpoint::new("a", a)]);
    let _task = crate::kvcache::spawn_pool(pool.clone(), datastore);
    let mut publisher = PubSocket::new();
    let payload = real_vllm_payloads().remove(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (mut seq, mut connected) = (0u64, false);
    while read(pool.index()).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "nothing indexed: {:?}", pool.stats());
        // Until epp has bound, connecting fails; until it has subscribed, messages go nowhere: retry.
        connected = connected || publisher.connect(&format!("tcp://127.0.0.1:{port}")).await.is_ok();
        if connected {
            let message =
                ZmqMessage::try_from(frames("kv@127.0.0.1:8000@smol", seq, &payload)).expect("frames");
            let _ = publisher.send(message).await;
            seq += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read(pool.index()).len(), 48);
}
