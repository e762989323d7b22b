//! Decoding the KV-cache events model servers publish over ZMQ: vLLM's `EventBatch` of `BlockStored`,
//! `BlockRemoved` and `AllBlocksCleared` (vllm-project/vllm:vllm/distributed/kv_events.py), and SGLang's
//! variant of it.
//!
//! Every encoding seen in the wild is accepted, since a pool may mix engine versions:
//! - the batch as an array `[ts, events, data_parallel_rank]` (vLLM's `array_like`) or as a map (one vLLM
//!   version declared it without `array_like`; SGLang names the rank `attn_dp_rank`);
//! - each event as a map tagged by `"type"` (vLLM since #42892, defaults omitted) or as a positional array
//!   whose first element is the tag (older vLLM);
//! - block hashes as unsigned 64-bit integers or as raw bytes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`:
//!   32-byte digests), of which the last 8 bytes, big-endian, are the hash, as llm-d reads them
//!   (llm-d/llm-d-router:pkg/kvevents/engineadapter/common.go).
//!
//! Fields epp does not use (`lora_id`, `extra_keys`, `group_idx`, the KV-spec fields, …) are skipped
//! whatever they hold. A malformed payload is a [`DecodeError`], never a panic.

use rmp::Marker;

pub use super::msgpack::DecodeError;
use super::msgpack::{unexpected, Reader};

/// One KV-cache event.
#[derive(Debug, Clone, PartialEq)]
pub enum KvEvent {
    /// Blocks now held by the engine: `block_hashes[i]` covers `token_ids[i * block_size..][..block_size]`.
    BlockStored(BlockStored),
    /// Blocks the engine dropped from `medium`.
    BlockRemoved { block_hashes: Vec<u64>, medium: Option<String> },
    /// Everything the engine held is gone (a reset).
    AllBlocksCleared,
}

/// A `BlockStored` event's fields that routing uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockStored {
    pub block_hashes: Vec<u64>,
    /// The engine hash of the block before the first one; `None` when the first block starts the prompt.
    pub parent_block_hash: Option<u64>,
    pub token_ids: Vec<u32>,
    pub block_size: u32,
    /// Where the blocks live: `GPU`, `CPU`, … (`None`: the engine did not say, i.e. GPU).
    pub medium: Option<String>,
    /// The adapter the blocks were computed for; llm-d keys such blocks under this name.
    pub lora_name: Option<String>,
    /// The adapter's numeric id, which older vLLM sends without `lora_name`: such blocks cannot be keyed
    /// by the name requests carry, so the index skips them rather than credit the base model.
    pub lora_id: Option<i64>,
}

/// One published batch.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// The publisher's clock, Unix seconds.
    pub ts: f64,
    pub events: Vec<KvEvent>,
    pub data_parallel_rank: Option<i64>,
    /// Events of a type this decoder does not know (a newer engine's), skipped: the batch's other events
    /// still apply.
    pub unknown_events: usize,
}

/// Decodes one batch payload (the last frame of a live or replayed message).
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let mut r = Reader { data: payload, pos: 0 };
    let batch = match r.peek()? {
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => batch_from_array(&mut r)?,
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => batch_from_map(&mut r)?,
        other => return Err(unexpected("a batch (array or map)", other)),
    };
    match payload.len() - r.pos {
        0 => Ok(batch),
        extra => Err(DecodeError::TrailingBytes(extra)),
    }
}

fn batch_from_array(r: &mut Reader<'_>) -> Result<EventBatch, DecodeError> {
    let len = r.array_len()?;
    let mut batch = EventBatch { ts: 0.0, events: Vec::new(), data_parallel_rank: None, unknown_events: 0 };
    for i in 0..len {
        match i {
            0 => batch.ts = r.float()?,
            1 => (batch.events, batch.unknown_events) = events(r)?,
            2 => batch.data_parallel_rank = r.opt_int()?,
            _ => r.skip(0)?,
        }
    }
    Ok(batch)
}

fn batch_from_map(r: &mut Reader<'_>) -> Result<EventBatch, DecodeError> {
    let len = r.map_len()?;
    let mut batch = EventBatch { ts: 0.0, events: Vec::new(), data_parallel_rank: None, unknown_events: 0 };
    for _ in 0..len {
        match r.str()? {
            "ts" => batch.ts = r.float()?,
            "events" => (batch.events, batch.unknown_events) = events(r)?,
            "data_parallel_rank" | "attn_dp_rank" => batch.data_parallel_rank = r.opt_int()?,
            _ => r.skip(0)?,
        }
    }
    Ok(batch)
}

/// The batch's events, and how many were of an unknown type (skipped whole).
fn events(r: &mut Reader<'_>) -> Result<(Vec<KvEvent>, usize), DecodeError> {
    let len = r.array_len()?;
    let (mut events, mut unknown) = (Vec::with_capacity(len.min(1024)), 0);
    for _ in 0..len {
        let event = match r.peek()? {
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => event_from_map(r)?,
            _ => event_from_array(r)?,
        };
        match event {
            Some(event) => events.push(event),
            None => unknown += 1,
        }
    }
    Ok((events, unknown))
}

/// An event from its map form; `None` for a type this decoder does not know.
fn event_from_map(r: &mut Reader<'_>) -> Result<Option<KvEvent>, DecodeError> {
    let len = r.map_len()?;
    let (mut tag, mut stored, mut removed_medium) = (None, BlockStored::default(), None);
    for _ in 0..len {
        match r.str()? {
            "type" => tag = Some(r.str()?.to_string()),
            "block_hashes" => stored.block_hashes = r.hashes()?,
            "parent_block_hash" => stored.parent_block_hash = r.opt_hash()?,
            "token_ids" => stored.token_ids = r.tokens()?,
            "block_size" => stored.block_size = r.u32()?,
            "medium" => {
                let medium = r.opt_str()?;
                removed_medium.clone_from(&medium);
                stored.medium = medium;
            }
            "lora_name" => stored.lora_name = r.opt_str()?,
            "lora_id" => stored.lora_id = r.opt_int()?,
            _ => r.skip(0)?,
        }
    }
    Ok(match tag.as_deref() {
        Some("BlockStored") => Some(KvEvent::BlockStored(stored)),
        Some("BlockRemoved") => {
            Some(KvEvent::BlockRemoved { block_hashes: stored.block_hashes, medium: removed_medium })
        }
        Some("AllBlocksCleared") => Some(KvEvent::AllBlocksCleared),
        Some(_) => None,
        None => return Err(DecodeError::UnknownEvent("<no type>".to_string())),
    })
}

/// Positional fields, after the tag: `BlockStored` = block_hashes, parent_block_hash, token_ids,
/// block_size, lora_id, medium, lora_name, extra_keys, …; `BlockRemoved` = block_hashes, medium, ….
fn event_from_array(r: &mut Reader<'_>) -> Result<Option<KvEvent>, DecodeError> {
    let len = r.array_len()?;
    if len == 0 {
        return Err(DecodeError::UnknownEvent("<empty array>".to_string()));
    }
    let tag = r.str()?.to_string();
    match tag.as_str() {
        "BlockStored" => {
            let mut stored = BlockStored::default();
            for i in 1..len {
                match i {
                    1 => stored.block_hashes = r.hashes()?,
                    2 => stored.parent_block_hash = r.opt_hash()?,
                    3 => stored.token_ids = r.tokens()?,
                    4 => stored.block_size = r.u32()?,
                    5 => stored.lora_id = r.opt_int()?,
                    6 => stored.medium = r.opt_str()?,
                    7 => stored.lora_name = r.opt_str()?,
                    _ => r.skip(0)?,
                }
            }
            Ok(Some(KvEvent::BlockStored(stored)))
        }
        "BlockRemoved" => {
            let (mut block_hashes, mut medium) = (Vec::new(), None);
            for i in 1..len {
                match i {
                    1 => block_hashes = r.hashes()?,
                    2 => medium = r.opt_str()?,
                    _ => r.skip(0)?,
                }
            }
            Ok(Some(KvEvent::BlockRemoved { block_hashes, medium }))
        }
        "AllBlocksCleared" => {
            for _ in 1..len {
                r.skip(0)?;
            }
            Ok(Some(KvEvent::AllBlocksCleared))
        }
        _ => {
            for _ in 1..len {
                r.skip(0)?;
            }
            Ok(None)
        }
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
