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
        replay: None,
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
    let mut last = Sequence::default();
    apply_message(&sub, &message(6, &payloads[0]), &mut last, &index, &stats, false);
    let one_prompt = index.read().unwrap().len();
    assert_eq!(one_prompt, 6 * 8, "six engine blocks of 128 are 48 of epp's 16");
    apply_message(&sub, &message(8, &payloads[1]), &mut last, &index, &stats, false);
    assert_eq!(stats.gaps.get(), 1, "seq 7 was lost");
    assert_eq!(index.read().unwrap().len(), 5 * 8, "what came before the gap is dropped: it may be stale");
    // The publisher restarted: seq 0 again. Its old blocks are dropped before the new ones apply.
    apply_message(&sub, &message(0, &payloads[0]), &mut last, &index, &stats, false);
    assert_eq!(stats.resets.get(), 1);
    assert_eq!(index.read().unwrap().len(), one_prompt);
    apply_message(&sub, &[Bytes::from_static(b"kv@x@m")], &mut last, &index, &stats, false);
    apply_message(&sub, &message(1, b"\x93\xcb"), &mut last, &index, &stats, false);
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

/// A publisher's replay socket as vLLM runs one: a ROUTER answering `["", start]` with every buffered
/// batch from `start` on (`[identity, "", topic, seq, payload]`), then the end marker.
async fn replay_server(buffer: Vec<(u64, Vec<u8>)>) -> (String, tokio::task::JoinHandle<()>) {
    replay_server_framed(buffer, true).await
}

/// [`replay_server`], with or without the topic frame (older vLLM and SGLang up to 0.5.15 send none).
async fn replay_server_framed(
    buffer: Vec<(u64, Vec<u8>)>,
    topic: bool,
) -> (String, tokio::task::JoinHandle<()>) {
    use zeromq::RouterSocket;
    let mut router = RouterSocket::new();
    let bound = router.bind("tcp://127.0.0.1:0").await.expect("bind").to_string();
    let task = tokio::spawn(async move {
        while let Ok(request) = router.recv().await {
            let frames = request.into_vec();
            let (Some(identity), Some(start)) = (frames.first(), frames.get(2)) else { continue };
            let start = u64::from_be_bytes(start.as_ref().try_into().expect("8 bytes"));
            let end = (-1i64).to_be_bytes().to_vec();
            let replies = buffer
                .iter()
                .filter(|(seq, _)| *seq >= start)
                .map(|(seq, payload)| message(*seq, payload).split_off(usize::from(!topic)))
                .chain([vec![Bytes::new(), Bytes::from(end), Bytes::new()]]);
            for reply in replies {
                let mut frames = vec![identity.clone(), Bytes::new()];
                frames.extend(reply);
                router.send(ZmqMessage::try_from(frames).expect("frames")).await.expect("send");
            }
        }
    });
    (bound, task)
}

#[tokio::test]
async fn what_was_published_before_connecting_and_during_a_gap_is_replayed() {
    let payloads = payloads();
    // An empty batch, `[ts, [], nil]`, for the two the live stream will miss.
    let empty = b"\x93\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x90\xc0".to_vec();
    let buffer = vec![(0, payloads[0].clone()), (1, payloads[1].clone()), (2, empty.clone()), (3, empty)];
    let (replay_at, server) = replay_server(buffer).await;
    let mut sub = subscription("tcp://unused:1");
    sub.replay = Some((replay_at, Arc::new(tokio::sync::Semaphore::new(1))));
    let (index, stats) = (shared_index(), SubscriberStats::default());
    let mut sequence = Sequence::default();
    super::recover(&sub, 0, &mut sequence, &index, &stats).await;
    assert_eq!((stats.replays.get(), stats.replay_failures.get()), (1, 0));
    assert_eq!(stats.blocks_stored.get(), 6 + 5, "the buffered batches, before any live message");
    assert_eq!(sequence.last_applied, Some(3));
    // Live batch 1 was replayed already; then batch 6 shows 4 and 5 were lost: replay is asked from 4,
    // and the buffer (which ends at 3) cannot fill it, so the endpoint's entries go before 6 applies.
    assert_eq!(apply_message(&sub, &message(1, &payloads[1]), &mut sequence, &index, &stats, true), None);
    assert_eq!(stats.blocks_stored.get(), 6 + 5, "a replayed batch is not applied twice");
    let missed = apply_message(&sub, &message(6, &payloads[0]), &mut sequence, &index, &stats, true);
    assert_eq!(missed, Some(4));
    super::recover(&sub, 4, &mut sequence, &index, &stats).await;
    apply_message(&sub, &message(6, &payloads[0]), &mut sequence, &index, &stats, false);
    assert_eq!((stats.gaps.get(), stats.replays.get()), (1, 2), "one gap, counted once");
    assert_eq!(stats.blocks_removed.get(), 6 + 5, "the unfillable gap dropped what was held");
    assert_eq!(index.read().unwrap().len(), 6 * 8, "then batch 6 applied");
    server.abort();
    // A publisher whose replay socket does not answer: the endpoint's entries go, as without replay.
    sub.replay = Some(("tcp://127.0.0.1:9".into(), Arc::new(tokio::sync::Semaphore::new(1))));
    super::recover(&sub, 0, &mut sequence, &index, &stats).await;
    assert_eq!(stats.replay_failures.get(), 1);
    assert!(index.read().unwrap().is_empty());
}

#[tokio::test]
async fn replayed_batches_without_a_topic_wait_for_a_live_one_to_name_the_model() {
    let (replay_at, server) = replay_server_framed(vec![(0, payloads().remove(0))], false).await;
    let mut sub = subscription("tcp://unused:1");
    sub.replay = Some((replay_at, Arc::new(tokio::sync::Semaphore::new(1))));
    sub.default_model = String::new();
    let (index, stats) = (shared_index(), SubscriberStats::default());
    let mut sequence = Sequence::default();
    // Whose blocks they are is not known yet: nothing is applied (under no model, nothing would match).
    let recovered = super::recover(&sub, 0, &mut sequence, &index, &stats).await;
    assert_eq!(recovered, Recovery::NeedsTopic);
    assert!(index.read().unwrap().is_empty());
    assert_eq!(sequence.last_applied, None);
    // A live message names it; the replay is done again under it.
    assert_eq!(live_model(&message(1, b"")), Some("smol"));
    sub.default_model = "smol".to_string();
    assert_eq!(super::recover(&sub, 0, &mut sequence, &index, &stats).await, Recovery::Done);
    assert_eq!(index.read().unwrap().len(), 48);
    assert_eq!((stats.replays.get(), stats.replay_failures.get(), stats.malformed.get()), (2, 0, 0));
    server.abort();
}
