//! One endpoint's KV-event subscription: a ZMQ SUB socket connected to the engine's publisher
//! (`tcp://<endpoint-ip>:<socketPort + data-parallel rank>`, as llm-d dials it with `discoverPods`), each
//! live message decoded and applied to the shared index.
//!
//! Sequence numbers are watched as llm-d watches them (llm-d/llm-d-router:pkg/kvevents/zmq_subscriber.go):
//! a number not above the last one means the publisher restarted (it counts from 0 again). Until replay
//! exists, whatever may have been missed drops the endpoint's entries, since a missed removal would leave a
//! block indexed that the engine no longer holds, and a stale hit is worse than a miss: a restart, a jump
//! in the sequence (events lost), and a new connection. A message that does not parse is counted and
//! skipped. The loop runs until its task is aborted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use zeromq::{Socket, SocketRecv, SubSocket};

use super::events::decode_batch;
use super::frames::{parse_live, topic_model};
use super::index::{EndpointId, KvIndex};

/// The index every subscriber writes and the scheduling side reads.
pub type SharedIndex = Arc<Mutex<KvIndex>>;

/// Counters of one or many subscribers (llm-d's `llm_d_epp_kv_cache_events_*` will be read from these).
#[derive(Debug, Default)]
pub struct SubscriberStats {
    pub messages: AtomicU64,
    pub malformed: AtomicU64,
    pub gaps: AtomicU64,
    pub resets: AtomicU64,
    pub blocks_stored: AtomicU64,
    pub blocks_removed: AtomicU64,
    pub stores_skipped: AtomicU64,
    pub removals_skipped: AtomicU64,
    pub connect_failures: AtomicU64,
    /// Events of a type the decoder does not know, skipped.
    pub unknown_events: AtomicU64,
}

/// What one subscriber needs.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub endpoint: EndpointId,
    /// `tcp://<ip>:<port>` of the engine's publisher.
    pub publisher: String,
    /// Messages whose topic starts with this (`kvEventsConfig.topicFilter`, `kv@` by default).
    pub topic_filter: String,
    /// The model of events whose topic names none and whose blocks name no LoRA adapter.
    pub default_model: String,
}

const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Subscribes and applies events until the task is aborted.
pub async fn run(subscription: Subscription, index: SharedIndex, stats: Arc<SubscriberStats>) {
    loop {
        let mut socket = SubSocket::new();
        let connected = socket.connect(&subscription.publisher).await.is_ok()
            && socket.subscribe(&subscription.topic_filter).await.is_ok();
        if !connected {
            stats.connect_failures.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        }
        // Whatever was published while disconnected is lost: start from what comes now.
        lock(&index).remove_endpoint(subscription.endpoint);
        let mut last_seq: Option<u64> = None;
        while let Ok(message) = socket.recv().await {
            let frames: Vec<Bytes> = message.into_vec();
            apply_message(&subscription, &frames, &mut last_seq, &index, &stats);
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Applies one multipart message; `last_seq` is the publisher's last sequence number seen.
pub fn apply_message(
    subscription: &Subscription,
    frames: &[Bytes],
    last_seq: &mut Option<u64>,
    index: &SharedIndex,
    stats: &SubscriberStats,
) {
    stats.messages.fetch_add(1, Ordering::Relaxed);
    let parts: Vec<&[u8]> = frames.iter().map(Bytes::as_ref).collect();
    let Ok(message) = parse_live(&parts) else {
        stats.malformed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Ok(batch) = decode_batch(message.payload) else {
        stats.malformed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let model = topic_model(message.topic).unwrap_or(&subscription.default_model);
    stats.unknown_events.fetch_add(batch.unknown_events as u64, Ordering::Relaxed);
    let mut index = lock(index);
    match *last_seq {
        Some(last) if message.seq <= last => {
            // The publisher restarted (its sequence starts again at 0): what it held is gone.
            stats.resets.fetch_add(1, Ordering::Relaxed);
            let dropped = index.remove_endpoint(subscription.endpoint);
            stats.blocks_removed.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        Some(last) if message.seq > last.saturating_add(1) => {
            stats.gaps.fetch_add(1, Ordering::Relaxed);
            let dropped = index.remove_endpoint(subscription.endpoint);
            stats.blocks_removed.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        _ => {}
    }
    *last_seq = Some(message.seq);
    for event in &batch.events {
        let applied = index.apply(subscription.endpoint, model, event);
        stats.blocks_stored.fetch_add(applied.blocks_stored as u64, Ordering::Relaxed);
        stats.blocks_removed.fetch_add(applied.blocks_removed as u64, Ordering::Relaxed);
        stats.stores_skipped.fetch_add(applied.stores_skipped as u64, Ordering::Relaxed);
        stats.removals_skipped.fetch_add(applied.removals_skipped as u64, Ordering::Relaxed);
    }
}

/// The index, even if a thread panicked while holding it: every mutation leaves it consistent between
/// events, so a poisoned lock must not silently stop every subscriber.
fn lock(index: &SharedIndex) -> std::sync::MutexGuard<'_, KvIndex> {
    index.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
#[path = "subscriber_tests.rs"]
mod tests;
