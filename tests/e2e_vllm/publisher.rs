//! epp's subscriber and replay against the engines' own publishers, without an engine.
//!
//! vLLM's `ZmqEventPublisher` and event classes (scripts/vllm-kv-publisher.py) publish five batches before
//! epp connects: one with 32-byte block hashes and a CPU medium, one removal, one batch encoded as a map
//! and one event as a positional array (the two forms other vLLM versions send, made from the same
//! classes); vLLM's replay frames carry the topic. SGLang 0.5.15's publisher and classes
//! (scripts/sglang-kv-publisher.py) publish three: tagged positional arrays with `attn_dp_rank`, its
//! `CPU_PINNED` tier and a removal, then one batch live every 0.3 s; its replay frames have no topic
//! frame, as older vLLM's had not, so epp replays again once a live message's topic names the model.
//! epp's pool, dialling the endpoint's address as it would a pod's, replays each from the publisher's
//! ROUTER and indexes exactly what the engine would hold. And in llm-d's centralised mode, vLLM's publisher
//! connects to the socket epp binds (`zmqEndpoint`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use epp::datastore::{Datastore, Endpoint};
use epp::kvcache::{
    read_index, spawn_pool, BlockKeyHasher, HashAlgorithm, KvEventPool, KvIndex, PoolConfig, Subscribers,
    TierWeights,
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
    let mut late = LateSubscriber::start(&manifest_dir().join("scripts/vllm-kv-publisher.py"), &[], 5);
    let (index, stats) = late.replay(10, 1).await;
    assert_eq!(
        index.held(0..64),
        Some((3, 3.0)),
        "prompt A's 4 blocks less the removed one (a u64 above i64::MAX)"
    );
    assert_eq!(
        index.held(1000..1032),
        Some((2, 1.6)),
        "prompt B's 2 blocks, 32-byte hashes, in the CPU tier"
    );
    assert_eq!(index.held(2000..2032), Some((2, 2.0)), "prompt C's batch, encoded as a map");
    assert_eq!(index.held(3000..3032), Some((2, 2.0)), "prompt D's event, a positional array");
    assert_eq!((stats.malformed.get(), stats.replay_failures.get()), (0, 0));
    assert!(stats.replays.get() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real vLLM's venv and SGLang's kv_events.py (make test-vllm)"]
async fn sglangs_own_publisher_replays_without_the_topic_frame() {
    if !vllm_or_skip("sglangs_own_publisher_replays_without_the_topic_frame") {
        return;
    }
    let module = manifest_dir().join(".sglang-kv-events/kv_events.py");
    // `make vllm` fetches it; a test that cannot run fails loudly.
    assert!(module.is_file(), "{} is missing: run `make vllm`", module.display());
    let script = manifest_dir().join("scripts/sglang-kv-publisher.py");
    let mut late = LateSubscriber::start(&script, &[module.as_os_str()], 3);
    // A, B and the first live C: the replay's batches name no model, so they wait for a live topic.
    let (index, stats) = late.replay(8, 1).await;
    assert_eq!(index.held(0..64), Some((3, 3.0)), "prompt A's 4 blocks less the removed one");
    assert_eq!(index.held(1000..1032), Some((2, 1.6)), "prompt B's 2 blocks in SGLang's CPU_PINNED tier");
    assert_eq!(index.held(2000..2032), Some((2, 2.0)), "prompt C, published live");
    assert_eq!((stats.malformed.get(), stats.replay_failures.get()), (0, 0));
    assert!(stats.replays.get() >= 2, "replayed again once a live topic named the model: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real vLLM (make test-vllm)"]
async fn vllms_own_publisher_connects_to_the_socket_epp_binds() {
    if !vllm_or_skip("vllms_own_publisher_connects_to_the_socket_epp_binds") {
        return;
    }
    // llm-d's centralised mode (`zmqEndpoint`, `discoverPods: false`): epp binds, vLLM connects.
    let port = free_port();
    let config = PoolConfig {
        central: Some(format!("tcp://127.0.0.1:{port}")),
        discover_pods: false,
        ..PoolConfig::default()
    };
    let (pool, index) = pool_and_index(config);
    let datastore = Arc::new(Datastore::new("pool"));
    let addr: SocketAddr = format!("{POD}:8000").parse().expect("address");
    datastore.set_endpoints(vec![Endpoint::new("pod", addr)]);
    let _pool_task = spawn_pool(pool.clone(), datastore);
    let mut publisher = Command::new(manifest_dir().join(".venv-vllm/bin/python"))
        .arg(manifest_dir().join("scripts/vllm-kv-publisher.py"))
        // A host in the endpoint: vLLM connects to it.
        .args([format!("tcp://127.0.0.1:{port}"), String::new(), format!("kv@{POD}:8000@smol")])
        .args([BLOCK.to_string(), "keep-publishing".into()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let stats = pool.stats().clone();
    let numbered = wait_until_async(Duration::from_secs(30), || {
        let numbered = pool.endpoint_id(addr).is_some();
        async move { numbered }
    })
    .await;
    assert!(numbered, "the pool never numbered the endpoint");
    let held = HeldIndex { index, endpoint: pool.endpoint_id(addr).expect("numbered") };
    // What vLLM sent before its connection was up is lost (PUB drops it); prompt E keeps coming.
    let received = wait_until_async(Duration::from_secs(30), || {
        let done = held.held(4000..4032).is_some();
        async move { done }
    })
    .await;
    drop(publisher.stdin.take());
    let _ = publisher.wait();
    assert!(received, "prompt E did not arrive on the bound socket: {stats:?}");
    assert_eq!(held.held(4000..4032), Some((2, 2.0)), "prompt E, published while connected");
    assert_eq!((stats.malformed.get(), stats.unknown_pods.get()), (0, 0));
    assert_eq!(pool.active_subscribers(), 0, "nothing dialled");
}

/// An engine's publisher script that has published its batches, and an epp pool about to subscribe.
struct LateSubscriber {
    publisher: Child,
    socket_port: u16,
    replay_port: u16,
    /// The pool's subscribers, once [`LateSubscriber::replay`] started them: they live as long as this.
    subscribers: Option<Subscribers>,
}

impl LateSubscriber {
    /// Runs `script` (in .venv-vllm) with `leading` arguments, then the endpoints, topic and block size,
    /// and waits for it to say it published `batches`.
    fn start(script: &Path, leading: &[&std::ffi::OsStr], batches: usize) -> LateSubscriber {
        let (socket_port, replay_port) = (free_port(), free_port());
        let topic = format!("kv@{POD}:8000@smol");
        let mut publisher = Command::new(manifest_dir().join(".venv-vllm/bin/python"))
            .arg(script)
            .args(leading)
            // The engines bind only an endpoint with a wildcard host (`tcp://*:port`); any other they connect to.
            .args([format!("tcp://*:{socket_port}"), format!("tcp://*:{replay_port}"), topic])
            .arg(BLOCK.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python");
        let mut line = String::new();
        BufReader::new(publisher.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
        assert_eq!(line.trim(), format!("published {batches}"), "the publisher did not start");
        LateSubscriber { publisher, socket_port, replay_port, subscribers: None }
    }

    /// Subscribes a pool to the publisher and waits until it has replayed `stored` and `removed` blocks.
    async fn replay(&mut self, stored: u64, removed: u64) -> (HeldIndex, Arc<epp::kvcache::SubscriberStats>) {
        let config = PoolConfig {
            socket_port: self.socket_port,
            topic_filter: "kv@".into(),
            replay_port: Some(self.replay_port),
            ..PoolConfig::default()
        };
        let (pool, index) = pool_and_index(config);
        let mut subscribers = Subscribers::new(pool.clone());
        let addr: SocketAddr = format!("{POD}:8000").parse().expect("address");
        subscribers.reconcile(&[Arc::new(Endpoint::new("pod", addr))]);
        let stats = pool.stats().clone();
        let replayed = wait_until_async(Duration::from_secs(30), || {
            let done = stats.blocks_stored.get() >= stored && stats.blocks_removed.get() >= removed;
            async move { done }
        })
        .await;
        assert!(replayed, "the publisher's batches were not replayed: {stats:?}");
        let endpoint = pool.endpoint_id(addr).expect("subscribed");
        self.subscribers = Some(subscribers);
        (HeldIndex { index, endpoint }, stats)
    }
}

impl Drop for LateSubscriber {
    fn drop(&mut self) {
        drop(self.publisher.stdin.take());
        let _ = self.publisher.wait();
    }
}

/// An empty index at epp's block size, and a pool with `config` writing it.
fn pool_and_index(config: PoolConfig) -> (Arc<KvEventPool>, Arc<RwLock<KvIndex>>) {
    let hasher = BlockKeyHasher::new(HashAlgorithm::CborFnv, BLOCK, "");
    let index = Arc::new(RwLock::new(KvIndex::new(hasher, TierWeights::default())));
    (Arc::new(KvEventPool::new(config, index.clone(), Arc::default())), index)
}

/// The index a pool built, read for one endpoint.
struct HeldIndex {
    index: Arc<RwLock<KvIndex>>,
    endpoint: epp::kvcache::EndpointId,
}

impl HeldIndex {
    /// The endpoint's longest cached run of `tokens`' blocks: (blocks, tier-weighted blocks).
    fn held(&self, tokens: std::ops::Range<u32>) -> Option<(usize, f64)> {
        let index = read_index(&self.index);
        let tokens: Vec<u32> = tokens.collect();
        let mut keys = Vec::new();
        index.request_keys("smol", &tokens, &mut keys);
        let mut out = Vec::new();
        index.longest_prefix(&keys, &mut out);
        out.iter().find(|m| m.endpoint == self.endpoint).map(|m| (m.blocks, m.weighted))
    }
}
