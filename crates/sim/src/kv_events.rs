//! KV-cache events as vLLM publishes them (vllm-project/vllm:vllm/distributed/kv_events.py): what the
//! engine's prefix cache stores and evicts, batched per step, msgpack-encoded in vLLM's current form
//! (events as maps tagged by `"type"`, the batch as `[ts, events, data_parallel_rank]`) and sent on a ZMQ
//! PUB socket as `[topic, seq (8 bytes, big-endian), payload]`, so that epp's precise prefix routing can
//! be tested and measured against the simulator as against vLLM.
//!
//! With a replay address, a ROUTER socket serves the last [`REPLAY_BUFFER`] batches as vLLM's
//! `replay_endpoint` does (`["", start_seq]` in; `["", topic, seq, payload]` for each buffered batch from
//! `start_seq` on, then the end marker `["", "", -1, ""]`). No `AllBlocksCleared`: the simulator never
//! resets its cache.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::mpsc;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Batches kept for replay (vLLM's `buffer_steps` default).
pub(crate) const REPLAY_BUFFER: usize = 10_000;

/// The batches sent, oldest first: (seq, payload).
type Buffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvCacheEvent {
    /// Full blocks newly cached, consecutive in one request's prompt.
    Stored { block_hashes: Vec<u64>, parent: Option<u64>, token_ids: Vec<u32>, lora: Option<String> },
    /// Cached blocks reused for other data.
    Removed { block_hashes: Vec<u64> },
}

/// The events of the steps since the last drain.
#[derive(Debug, Clone, Default)]
pub(crate) struct KvEventLog {
    pub(crate) events: Vec<KvCacheEvent>,
}

impl KvEventLog {
    /// Block `b` of a prompt (chained `hashes`, its `tokens`) was cached: it extends the previous event if
    /// that ended with block `b - 1` of the same chain.
    pub(crate) fn stored(
        &mut self,
        hashes: &[u64],
        tokens: &[u32],
        b: usize,
        block_size: usize,
        lora: Option<&str>,
    ) {
        let Some(block) = tokens.get(b * block_size..(b + 1) * block_size) else { return };
        let parent = b.checked_sub(1).map(|p| hashes[p]);
        if let Some(KvCacheEvent::Stored { block_hashes, token_ids, .. }) = self.events.last_mut() {
            if parent.is_some() && block_hashes.last().copied() == parent {
                block_hashes.push(hashes[b]);
                token_ids.extend_from_slice(block);
                return;
            }
        }
        self.events.push(KvCacheEvent::Stored {
            block_hashes: vec![hashes[b]],
            parent,
            token_ids: block.to_vec(),
            lora: lora.map(str::to_string),
        });
    }

    pub(crate) fn removed(&mut self, hashes: Vec<u64>) {
        if !hashes.is_empty() {
            self.events.push(KvCacheEvent::Removed { block_hashes: hashes });
        }
    }
}

/// The msgpack payload of one batch, as vLLM encodes it.
pub fn encode_batch(ts: f64, events: &[KvCacheEvent], block_size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    // Writes into a Vec cannot fail.
    let _ = write_batch(&mut out, ts, events, block_size);
    out
}

type Written = Result<(), rmp::encode::ValueWriteError>;

fn write_batch(out: &mut Vec<u8>, ts: f64, events: &[KvCacheEvent], block_size: usize) -> Written {
    use rmp::encode::{write_array_len, write_f64, write_nil};
    write_array_len(out, 3)?;
    write_f64(out, ts)?;
    write_array_len(out, events.len() as u32)?;
    for event in events {
        match event {
            KvCacheEvent::Stored { block_hashes, parent, token_ids, lora } => {
                write_stored(out, block_hashes, *parent, token_ids, block_size, lora.as_deref())?;
            }
            KvCacheEvent::Removed { block_hashes } => {
                rmp::encode::write_map_len(out, 3)?;
                write_key_str(out, "type", "BlockRemoved")?;
                write_hashes(out, "block_hashes", block_hashes)?;
                write_key_str(out, "medium", "GPU")?;
            }
        }
    }
    write_nil(out).map_err(rmp::encode::ValueWriteError::InvalidMarkerWrite)
}

fn write_stored(
    out: &mut Vec<u8>,
    hashes: &[u64],
    parent: Option<u64>,
    tokens: &[u32],
    block_size: usize,
    lora: Option<&str>,
) -> Written {
    use rmp::encode::{write_array_len, write_map_len, write_nil, write_str, write_uint};
    write_map_len(out, 6 + u32::from(lora.is_some()))?;
    write_key_str(out, "type", "BlockStored")?;
    write_hashes(out, "block_hashes", hashes)?;
    write_str(out, "parent_block_hash")?;
    match parent {
        Some(hash) => write_uint(out, hash).map(drop)?,
        None => write_nil(out).map_err(rmp::encode::ValueWriteError::InvalidMarkerWrite)?,
    }
    write_str(out, "token_ids")?;
    write_array_len(out, tokens.len() as u32)?;
    for &token in tokens {
        write_uint(out, u64::from(token))?;
    }
    write_str(out, "block_size")?;
    write_uint(out, block_size as u64)?;
    write_key_str(out, "medium", "GPU")?;
    if let Some(name) = lora {
        write_key_str(out, "lora_name", name)?;
    }
    Ok(())
}

fn write_key_str(out: &mut Vec<u8>, key: &str, value: &str) -> Written {
    rmp::encode::write_str(out, key)?;
    rmp::encode::write_str(out, value)
}

fn write_hashes(out: &mut Vec<u8>, key: &str, hashes: &[u64]) -> Written {
    rmp::encode::write_str(out, key)?;
    rmp::encode::write_array_len(out, hashes.len() as u32)?;
    for &hash in hashes {
        rmp::encode::write_uint(out, hash)?;
    }
    Ok(())
}

/// A replica's publisher: batches sent here go out on a PUB socket bound at `bind`.
#[derive(Debug, Clone)]
pub(crate) struct KvPublisher {
    batches: mpsc::UnboundedSender<(f64, Vec<KvCacheEvent>)>,
}

impl KvPublisher {
    /// Binds the PUB socket (`tcp://ip:port`) and, given one, the replay ROUTER socket, and starts their
    /// tasks.
    pub(crate) async fn bind(
        bind: &str,
        replay: Option<&str>,
        topic: String,
        block_size: usize,
    ) -> Result<Self, zeromq::ZmqError> {
        let mut socket = PubSocket::new();
        socket.bind(bind).await?;
        let buffer: Buffer = Arc::default();
        if let Some(replay) = replay {
            let mut router = RouterSocket::new();
            router.bind(replay).await?;
            tokio::spawn(serve_replays(router, Bytes::from(topic.clone()), buffer.clone()));
        }
        let (batches, mut received) = mpsc::unbounded_channel::<(f64, Vec<KvCacheEvent>)>();
        let topic = Bytes::from(topic);
        tokio::spawn(async move {
            let mut seq = 0u64;
            while let Some((ts, events)) = received.recv().await {
                let payload = Bytes::from(encode_batch(ts, &events, block_size));
                {
                    let mut buffer = buffer.lock().unwrap_or_else(PoisonError::into_inner);
                    if buffer.len() == REPLAY_BUFFER {
                        buffer.pop_front();
                    }
                    buffer.push_back((seq, payload.clone()));
                }
                let frames = vec![topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload];
                seq += 1;
                let Ok(message) = ZmqMessage::try_from(frames) else { continue };
                if let Err(error) = socket.send(message).await {
                    tracing::warn!(%error, "KV-event publish failed");
                }
            }
        });
        Ok(Self { batches })
    }

    pub(crate) fn publish(&self, ts: f64, events: Vec<KvCacheEvent>) {
        if !events.is_empty() {
            let _ = self.batches.send((ts, events));
        }
    }
}

/// Answers replay requests until the socket fails.
async fn serve_replays(mut router: RouterSocket, topic: Bytes, buffer: Buffer) {
    while let Ok(request) = router.recv().await {
        let frames = request.into_vec();
        // [identity, "", start_seq]; anything else is not a replay request.
        let (Some(identity), Some(start)) = (frames.first(), frames.get(2)) else { continue };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes) else { continue };
        let batches: Vec<(u64, Bytes)> = {
            let buffer = buffer.lock().unwrap_or_else(PoisonError::into_inner);
            buffer.iter().filter(|(seq, _)| *seq >= start).cloned().collect()
        };
        let end = [Bytes::new(), Bytes::copy_from_slice(&(-1i64).to_be_bytes()), Bytes::new()];
        let replies = batches
            .into_iter()
            .map(|(seq, payload)| [topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload])
            .chain([end]);
        for reply in replies {
            let mut frames = vec![identity.clone(), Bytes::new()];
            frames.extend(reply);
            let Ok(message) = ZmqMessage::try_from(frames) else { continue };
            if router.send(message).await.is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_blocks_of_a_prompt_make_one_event_and_epp_decodes_it() {
        let tokens: Vec<u32> = (0..12).collect();
        let hashes = [11, 22, 33];
        let mut log = KvEventLog::default();
        for b in 0..3 {
            log.stored(&hashes, &tokens, b, 4, None);
        }
        log.stored(&[7], &tokens, 0, 4, Some("adapter"));
        log.removed(vec![22, u64::MAX]);
        assert_eq!(log.events.len(), 3);
        let payload = encode_batch(1.5, &log.events, 4);
        let batch = epp::kvcache::decode_batch(&payload).expect("epp decodes the simulator's batch");
        assert_eq!(batch.events.len(), 3);
        let epp::kvcache::KvEvent::BlockStored(first) = &batch.events[0] else {
            panic!("{:?}", batch.events[0])
        };
        assert_eq!((first.block_hashes.clone(), first.parent_block_hash), (vec![11, 22, 33], None));
        assert_eq!((first.token_ids.len(), first.block_size), (12, 4));
        let epp::kvcache::KvEvent::BlockStored(second) = &batch.events[1] else { panic!() };
        assert_eq!(second.lora_name.as_deref(), Some("adapter"));
        assert!(
            matches!(&batch.events[2], epp::kvcache::KvEvent::BlockRemoved { block_hashes, .. } if block_hashes == &[22, u64::MAX])
        );
    }
}
