use super::*;
use crate::kvcache::block_keys::{BlockKeyHasher, HashAlgorithm};
use crate::kvcache::index::TierWeights;
use zeromq::{PubSocket, SocketSend, ZmqMessage};

use crate::kvcache::test_data::real_vllm_payloads as payloads;

fn shared_index() -> SharedIndex {
    Arc::new(RwLock::new(KvIndex::new(
        BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, ""),
        TierWeights::default(),
    )))
}

fn subscription(publisher: &str) -> Subscription {
    Subscription {
        endpoint: 3,
        publisher: publisher.to_string(),
        topic_filter: "kv@".to_string(),
        default_model: "smol".to_string(),
    }
}

fn message(seq: u64, payload: &[u8]) -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"kv@127.0.0.1:8000@smol"),
        Bytes::copy_from_slice(&seq.to_be_bytes()),
        Bytes::copy_from_slice(payload),
    ]
}

#[test]
fn sequence_gaps_resets_and_malformed_messages() {
    let (index, stats, sub) = (shared_index(), SubscriberStats::default(), subscription("tcp://unused:1"));
    let payloads = payloads();
    let mut last = None;
    apply_message(&sub, &message(6, &payloads[0]), &mut last, &index, &stats);
    let one_prompt = index.read().unwrap().len();
    assert_eq!(one_prompt, 6 * 8, "six engine blocks of 128 are 48 of epp's 16");
    apply_message(&sub, &message(8, &payloads[1]), &mut last, &index, &stats);
    assert_eq!(stats.gaps.get(), 1, "seq 7 was lost");
    assert_eq!(index.read().unwrap().len(), 5 * 8, "what came before the gap is dropped: it may be stale");
    // The publisher restarted: seq 0 again. Its old blocks are dropped before the new ones apply.
    apply_message(&sub, &message(0, &payloads[0]), &mut last, &index, &stats);
    assert_eq!(stats.resets.get(), 1);
    assert_eq!(index.read().unwrap().len(), one_prompt);
    apply_message(&sub, &[Bytes::from_static(b"kv@x@m")], &mut last, &index, &stats);
    apply_message(&sub, &message(1, b"\x93\xcb"), &mut last, &index, &stats);
    assert_eq!(stats.malformed.get(), 2);
    assert_eq!(stats.messages.get(), 5);
    assert_eq!(stats.blocks_stored.get(), 6 + 5 + 6);
    assert_eq!(stats.blocks_removed.get(), 6 + 5, "the gap's and the restart's drops");
}

/// Over real ZMQ sockets on loopback: a PUB bound as vLLM binds it (`tcp://*:port`), the subscriber
/// connected to it. Messages sent before the subscription reaches the publisher are lost (ZMQ's
/// slow-joiner), so the publisher repeats until the index shows them.
#[tokio::test]
async fn a_subscriber_indexes_what_a_zmq_publisher_sends() {
    let mut publisher = PubSocket::new();
    let bound = publisher.bind("tcp://127.0.0.1:0").await.expect("bind");
    let (index, stats) = (shared_index(), Arc::new(SubscriberStats::default()));
    let task = tokio::spawn(run(subscription(&bound.to_string()), index.clone(), stats.clone()));
    let payload = payloads().remove(0);
    let mut seq = 0u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while index.read().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "nothing indexed: {stats:?}");
        let message = ZmqMessage::try_from(message(seq, &payload)).expect("frames");
        publisher.send(message).await.expect("send");
        seq += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stats.malformed.get(), 0);
    assert_eq!(index.read().unwrap().len(), 48);
    task.abort();
}
