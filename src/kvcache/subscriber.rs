//! One endpoint's KV-event subscription: a ZMQ SUB socket connected to the engine's publisher
//! (`tcp://<endpoint-ip>:<socketPort + data-parallel rank>`, as llm-d dials it with `discoverPods`), each
//! live message decoded and applied to the shared index.
//!
//! Sequence numbers are watched as llm-d watches them (llm-d/llm-d-router:pkg/kvevents/zmq_subscriber.go):
//! a number below the last live one means the publisher restarted (it counts from 0 again), a jump means
//! events were lost. Whatever may have been missed is recovered by replay from the publisher's buffer when
//! it has a replay socket ([`super::replay`]: on connecting, after a gap, after a restart); without one, or
//! when replay fails, the endpoint's entries are dropped, since a missed removal would leave a block
//! indexed that the engine no longer holds, and a stale hit is worse than a miss. A message that does not
//! parse is counted and skipped. The loop runs until its task is aborted.

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
    /// Messages on the central socket whose topic names no endpoint of the pool, skipped.
    pub unknown_pods: Counter,
    /// Events of a type the decoder does not know, skipped.
    pub unknown_events: Counter,
    /// Subscribers running now (set by the pool).
    pub active_subscribers: Gauge,
    /// Replays asked of a publisher's replay socket, and those that failed (the endpoint's entries were
    /// dropped instead).
    pub replays: Counter,
    pub replay_failures: Counter,
    /// Speculative placements and first tokens sent to peer replicas, applied from them, and dropped
    /// (a full outbox, a datagram that did not decode, came from no peer or for other block keys).
    pub peer_sent: Counter,
    pub peer_received: Counter,
    pub peer_dropped: Counter,
}

/// What one subscriber needs.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub endpoint: EndpointId,
    /// `tcp://<ip>:<port>` of the engine's publisher.
    pub publisher: String,
    /// Messages whose topic starts with this (`kvEventsConfig.topicFilter`, `kv@` by default).
    pub topic_filter: String,
    /// The model of events whose topic names none and whose blocks name no LoRA adapter; when empty, a
    /// subscriber takes it from the first live topic that names one.
    pub default_model: String,
    /// `tcp://<ip>:<port>` of the publisher's replay (ROUTER) socket, and the process-wide cap on
    /// concurrent replays; `None`: no replay.
    pub replay: Option<(String, Arc<tokio::sync::Semaphore>)>,
}

/// Where a subscriber is in its publisher's sequence.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// The last number seen on the live socket.
    last_live: Option<u64>,
    /// The last batch applied, live or replayed.
    pub(crate) last_applied: Option<u64>,
}

/// What a live message's number says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Apply,
    /// Already applied (replay covered it).
    Duplicate,
    /// Batches from `next` on were lost.
    Gap {
        next: u64,
    },
    /// The publisher restarted.
    Reset,
}

impl Sequence {
    fn step(&mut self, seq: u64) -> Step {
        let step = match (self.last_live, self.last_applied) {
            (Some(live), _) if seq < live => Step::Reset,
            (_, Some(applied)) if seq <= applied => Step::Duplicate,
            (_, Some(applied)) if seq > applied.saturating_add(1) => Step::Gap { next: applied + 1 },
            _ => Step::Apply,
        };
        self.last_live = Some(seq);
        step
    }
}

const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Subscribes and applies events until the task is aborted.
pub async fn run(subscription: Subscription, index: SharedIndex, stats: Arc<SubscriberStats>) {
    loop {
        let mut socket = SubSocket::new();
        let connected = socket.connect(&subscription.publisher).await.is_ok()
            && socket.subscribe(&subscription.topic_filter).await.is_ok();
        if !connected {
            stats.connect_failures.inc();
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        }
        // What was published while disconnected is lost, unless the publisher replays it from the start:
        // either way the endpoint starts over (a replay re-announces every store it buffered, which on top
        // of the old entries would count them twice and outlive their removal).
        let mut sequence = Sequence::default();
        drop_endpoint(&subscription, &mut sequence, &index, &stats);
        // Learns the model from the live topic, for replayed batches that carry none.
        let mut sub = subscription.clone();
        let mut history = recover(&sub, 0, &mut sequence, &index, &stats).await;
        while let Ok(message) = socket.recv().await {
            let frames: Vec<Bytes> = message.into_vec();
            if sub.default_model.is_empty() {
                if let Some(model) = live_model(&frames) {
                    sub.default_model = model.to_owned();
                    if history == Recovery::NeedsTopic {
                        history = recover(&sub, 0, &mut sequence, &index, &stats).await;
                    }
                }
            }
            let replay = sub.replay.is_some();
            if let Some(from) = apply_message(&sub, &frames, &mut sequence, &index, &stats, replay) {
                recover(&sub, from, &mut sequence, &index, &stats).await;
                apply_message(&sub, &frames, &mut sequence, &index, &stats, false);
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// How a recovery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    Done,
    /// The replay sent batches without a topic frame (older vLLM, SGLang up to 0.5.15) before any live
    /// message named the model: nothing was applied, and the history is replayed again once one does.
    NeedsTopic,
}

/// The model a live message's topic names, if it parses and names one.
fn live_model(frames: &[Bytes]) -> Option<&str> {
    match frames {
        [topic, _, _] => topic_model(topic),
        _ => None,
    }
}

/// Recovers what may have been missed from batch `from` on: replayed when the publisher can, else the
/// endpoint's entries are dropped (they may be stale) and the stream starts over from what comes next.
async fn recover(
    sub: &Subscription,
    from: u64,
    sequence: &mut Sequence,
    index: &SharedIndex,
    stats: &SubscriberStats,
) -> Recovery {
    if let Some((address, permits)) = &sub.replay {
        stats.replays.inc();
        let mut expected = from;
        let mut needs_topic = false;
        let apply = |topic: &[u8], seq: u64, payload: &[u8]| {
            if topic.is_empty() && sub.default_model.is_empty() {
                // Whose blocks these are is not known yet: indexed under no model they would never match.
                needs_topic = true;
                return;
            }
            if sequence.last_applied.is_some_and(|applied| seq <= applied) || seq < expected {
                return;
            }
            if seq > expected && sequence.last_applied.is_some() {
                // The buffer no longer reaches back to what was asked: what fell out of it may have
                // removed blocks, so the endpoint's entries go before the rest applies. (Starting over,
                // with nothing applied, the buffer is all there is to learn from.)
                stats.gaps.inc();
                drop_endpoint(sub, sequence, index, stats);
            }
            apply_batch(sub, topic, payload, index, stats);
            sequence.last_applied = Some(seq);
            expected = seq + 1;
        };
        let malformed = || {
            stats.malformed.inc();
        };
        let replayed = super::replay::replay(address, permits, from, apply, malformed).await;
        match replayed {
            Ok(()) if needs_topic => return Recovery::NeedsTopic,
            Ok(()) => return Recovery::Done,
            Err(error) => {
                stats.replay_failures.inc();
                tracing::debug!(endpoint = sub.endpoint, %error, "KV-event replay failed");
            }
        }
    }
    let dropped = lock(index).remove_endpoint(sub.endpoint);
    stats.blocks_removed.inc_by(dropped as u64);
    sequence.last_applied = None;
    Recovery::Done
}

/// Applies one live multipart message. When its number shows batches were missed (a gap, a publisher
/// restart) and `can_recover`, nothing is applied and the first batch to recover is returned (the caller
/// replays, then applies the message again with `can_recover` false); otherwise the endpoint's entries
/// are dropped first (after a restart, or a gap nobody can fill) and the message is applied.
pub fn apply_message(
    subscription: &Subscription,
    frames: &[Bytes],
    sequence: &mut Sequence,
    index: &SharedIndex,
    stats: &SubscriberStats,
    can_recover: bool,
) -> Option<u64> {
    // A message deferred for recovery comes back with `can_recover` false: count it (and its gap) once.
    let count = can_recover || subscription.replay.is_none();
    if count {
        stats.messages.inc();
    }
    let parts: Vec<&[u8]> = frames.iter().map(Bytes::as_ref).collect();
    let Ok(message) = parse_live(&parts) else {
        stats.malformed.inc();
        return None;
    };
    match sequence.step(message.seq) {
        Step::Apply => {}
        Step::Duplicate => return None,
        Step::Gap { next } => {
            if count {
                stats.gaps.inc();
            }
            if can_recover {
                return Some(next);
            }
            drop_endpoint(subscription, sequence, index, stats);
        }
        Step::Reset => {
            if count {
                stats.resets.inc();
            }
            drop_endpoint(subscription, sequence, index, stats);
            if can_recover {
                return Some(0);
            }
        }
    }
    apply_batch(subscription, message.topic, message.payload, index, stats);
    sequence.last_applied = Some(message.seq);
    None
}

fn drop_endpoint(sub: &Subscription, sequence: &mut Sequence, index: &SharedIndex, stats: &SubscriberStats) {
    let dropped = lock(index).remove_endpoint(sub.endpoint);
    stats.blocks_removed.inc_by(dropped as u64);
    sequence.last_applied = None;
}

/// Decodes one batch (live or replayed) and applies its events; a payload that does not decode is counted.
pub(crate) fn apply_batch(
    sub: &Subscription,
    topic: &[u8],
    payload: &[u8],
    index: &SharedIndex,
    stats: &SubscriberStats,
) {
    let Ok(batch) = decode_batch(payload) else {
        stats.malformed.inc();
        return;
    };
    let model = topic_model(topic).unwrap_or(&sub.default_model);
    stats.unknown_events.inc_by(batch.unknown_events as u64);
    let mut index = lock(index);
    for event in &batch.events {
        let applied = index.apply(sub.endpoint, model, event);
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
