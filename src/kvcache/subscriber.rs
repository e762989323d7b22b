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

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use zeromq::{Socket, SocketRecv, SubSocket};

use super::events::decode_batch;
use super::frames::{parse_live, topic_model};
use super::index::{EndpointId, KvIndex};

/// The index every subscriber writes and the scheduling side reads.
pub type SharedIndex = Arc<RwLock<KvIndex>>;

/// Counters of one or many subscribers: prometheus handles, registered under llm-d's
/// `llm_d_epp_kv_cache_events_*` names by the plugin's metrics (a clone shares the count).
#[derive(Debug, Default)]
pub struct SubscriberStats {
    pub messages: Counter,
    pub malformed: Counter,
    pub gaps: Counter,
    pub resets: Counter,
    pub blocks_stored: Counter,
    pub blocks_removed: Counter,
    pub stores_skipped: Counter,
    pub removals_skipped: Counter,
    pub connect_failures: Counter,
    /// Events of a type the decoder does not know, skipped.
    pub unknown_events: Counter,
    /// Subscribers running now (set by the pool).
    pub active_subscribers: Gauge,
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
            stats.connect_failures.inc_by(1);
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
    stats.messages.inc_by(1);
    let parts: Vec<&[u8]> = frames.iter().map(Bytes::as_ref).collect();
    let Ok(message) = parse_live(&parts) else {
        stats.malformed.inc_by(1);
        return;
    };
    let Ok(batch) = decode_batch(message.payload) else {
        stats.malformed.inc_by(1);
        return;
    };
    let model = topic_model(message.topic).unwrap_or(&subscription.default_model);
    stats.unknown_events.inc_by(batch.unknown_events as u64);
    let mut index = lock(index);
    match *last_seq {
        Some(last) if message.seq <= last => {
            // The publisher restarted (its sequence starts again at 0): what it held is gone.
            stats.resets.inc_by(1);
            let dropped = index.remove_endpoint(subscription.endpoint);
            stats.blocks_removed.inc_by(dropped as u64);
        }
        Some(last) if message.seq > last.saturating_add(1) => {
            stats.gaps.inc_by(1);
            let dropped = index.remove_endpoint(subscription.endpoint);
            stats.blocks_removed.inc_by(dropped as u64);
        }
        _ => {}
    }
    *last_seq = Some(message.seq);
    for event in &batch.events {
        let applied = index.apply(subscription.endpoint, model, event);
        stats.blocks_stored.inc_by(applied.blocks_stored as u64);
        stats.blocks_removed.inc_by(applied.blocks_removed as u64);
        stats.stores_skipped.inc_by(applied.stores_skipped as u64);
        stats.removals_skipped.inc_by(applied.removals_skipped as u64);
    }
}

/// The index, even if a thread panicked while holding it: every mutation leaves it consistent between
/// events, so a poisoned lock must not silently stop every subscriber.
pub(crate) fn lock(index: &SharedIndex) -> std::sync::RwLockWriteGuard<'_, KvIndex> {
    index.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The index for reading (lookups), poisoned or not, as [`lock`].
pub(crate) fn read(index: &SharedIndex) -> std::sync::RwLockReadGuard<'_, KvIndex> {
    index.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
#[path = "subscriber_tests.rs"]
mod tests;
