//! epp's subscriber and replay against vLLM's own publisher: `ZmqEventPublisher` and its event classes
//! (scripts/vllm-kv-publisher.py, no engine) publish five batches before epp connects: one with 32-byte
//! block hashes and a CPU medium, one removal, one batch encoded as a map and one event as a positional
//! array (the two forms other vLLM versions send, made from the same classes). epp's pool, dialling the endpoint's address as it would a
//! pod's, replays them from vLLM's ROUTER (vLLM's replay frames carry the topic) and indexes exactly what
//! the engine would hold.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use epp::datastore::Endpoint;
use epp::kvcache::{
    read_index, BlockKeyHasher, HashAlgorithm, KvEventPool, KvIndex, PoolConfig, Subscribers, TierWeights,
};
use epp_testkit::vllm::vllm_or_skip;
use epp_testkit::*;

const BLOCK: usize = 16;
const POD: &str = "127.0.0.41";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real vLLM (make test-vllm)"]
async fn vllms_own_publisher_replays_to_a_late_subscriber() {
    if !vllm_or_skip("vllms_own_publisher_replays_to_a_late_subscriber") {
        return;
    }
    let (socket_port, replay_port) = (free_port(), free_port());
    let topic = format!("kv@{POD}:8000@smol");
    let mut publisher = Command::new(manifest_dir().join(".venv-vllm/bin/python"))
        .arg(manifest_dir().join("scripts/vllm-kv-publisher.py"))
        // vLLM binds only an endpoint with a wildcard host (`tcp://*:port`); any other it connects to.
        .args([format!("tcp://*:{socket_port}"), format!("tcp://*:{replay_port}"), topic])
        .arg(BLOCK.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut line = String::new();
    BufReader::new(publisher.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "published 5", "the publisher did not start");

    let hasher = BlockKeyHasher::new(HashAlgorithm::CborFnv, BLOCK, "");
    let index = Arc::new(RwLock::new(KvIndex::new(hasher, TierWeights::default())));
    let config = PoolConfig { socket_port, topic_filter: "kv@".into(), replay_port: Some(replay_port) };
    let pool = Arc::new(KvEventPool::new(config, index.clone(), Arc::default()));
    let mut subscribers = Subscribers::new(pool.clone());
    let addr: SocketAddr = format!("{POD}:8000").parse().expect("address");
    subscribers.reconcile(&[Arc::new(Endpoint::new("pod", addr))]);
    let stats = pool.stats().clone();
    let replayed = wait_until_async(Duration::from_secs(30), || {
        let done = stats.blocks_stored.get() >= 10 && stats.blocks_removed.get() >= 1;
        async move { done }
    })
    .await;
    assert!(replayed, "vLLM's batches were not replayed: {stats:?}");

    let id = pool.endpoint_id(addr).expect("subscribed");
    let held = |tokens: std::ops::Range<u32>| {
        let index = read_index(&index);
        let tokens: Vec<u32> = tokens.collect();
        let mut keys = Vec::new();
        index.request_keys("smol", &tokens, &mut keys);
        let mut out = Vec::new();
        index.longest_prefix(&keys, &mut out);
        out.iter().find(|m| m.endpoint == id).map(|m| (m.blocks, m.weighted))
    };
    assert_eq!(
        held(0..64),
        Some((3, 3.0)),
        "prompt A's 4 blocks less the removed one (a u64 above i64::MAX)"
    );
    assert_eq!(held(1000..1032), Some((2, 1.6)), "prompt B's 2 blocks, 32-byte hashes, in the CPU tier");
    assert_eq!(held(2000..2032), Some((2, 2.0)), "prompt C's batch, encoded as a map");
    assert_eq!(held(3000..3032), Some((2, 2.0)), "prompt D's event, a positional array");
    assert_eq!((stats.malformed.get(), stats.replay_failures.get()), (0, 0));
    assert!(stats.replays.get() >= 1);
    drop(publisher.stdin.take());
    let _ = publisher.wait();
}
