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
}

/// One published batch.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// The publisher's clock, Unix seconds.
    pub ts: f64,
    pub events: Vec<KvEvent>,
    pub data_parallel_rank: Option<i64>,
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated msgpack: the payload ends inside a value")]
    Truncated,
    #[error("expected {expected}, found msgpack marker {found:?}")]
    Unexpected { expected: &'static str, found: String },
    #[error("unknown event type {0:?}")]
    UnknownEvent(String),
    #[error("{0} bytes after the batch")]
    TrailingBytes(usize),
    #[error("nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// Nesting allowed in skipped values: a hostile payload cannot recurse the decoder off its stack.
const MAX_DEPTH: usize = 32;

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
    let mut batch = EventBatch { ts: 0.0, events: Vec::new(), data_parallel_rank: None };
    for i in 0..len {
        match i {
            0 => batch.ts = r.float()?,
            1 => batch.events = events(r)?,
            2 => batch.data_parallel_rank = r.opt_int()?,
            _ => r.skip(0)?,
        }
    }
    Ok(batch)
}

fn batch_from_map(r: &mut Reader<'_>) -> Result<EventBatch, DecodeError> {
    let len = r.map_len()?;
    let mut batch = EventBatch { ts: 0.0, events: Vec::new(), data_parallel_rank: None };
    for _ in 0..len {
        match r.str()? {
            "ts" => batch.ts = r.float()?,
            "events" => batch.events = events(r)?,
            "data_parallel_rank" | "attn_dp_rank" => batch.data_parallel_rank = r.opt_int()?,
            _ => r.skip(0)?,
        }
    }
    Ok(batch)
}

fn events(r: &mut Reader<'_>) -> Result<Vec<KvEvent>, DecodeError> {
    let len = r.array_len()?;
    let mut events = Vec::with_capacity(len.min(1024));
    for _ in 0..len {
        events.push(match r.peek()? {
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => event_from_map(r)?,
            _ => event_from_array(r)?,
        });
    }
    Ok(events)
}

fn event_from_map(r: &mut Reader<'_>) -> Result<KvEvent, DecodeError> {
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
            _ => r.skip(0)?,
        }
    }
    match tag.as_deref() {
        Some("BlockStored") => Ok(KvEvent::BlockStored(stored)),
        Some("BlockRemoved") => {
            Ok(KvEvent::BlockRemoved { block_hashes: stored.block_hashes, medium: removed_medium })
        }
        Some("AllBlocksCleared") => Ok(KvEvent::AllBlocksCleared),
        other => Err(DecodeError::UnknownEvent(other.unwrap_or("<no type>").to_string())),
    }
}

/// Positional fields, after the tag: `BlockStored` = block_hashes, parent_block_hash, token_ids,
/// block_size, lora_id, medium, lora_name, extra_keys, …; `BlockRemoved` = block_hashes, medium, ….
fn event_from_array(r: &mut Reader<'_>) -> Result<KvEvent, DecodeError> {
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
                    6 => stored.medium = r.opt_str()?,
                    7 => stored.lora_name = r.opt_str()?,
                    _ => r.skip(0)?,
                }
            }
            Ok(KvEvent::BlockStored(stored))
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
            Ok(KvEvent::BlockRemoved { block_hashes, medium })
        }
        "AllBlocksCleared" => {
            for _ in 1..len {
                r.skip(0)?;
            }
            Ok(KvEvent::AllBlocksCleared)
        }
        _ => Err(DecodeError::UnknownEvent(tag)),
    }
}

fn unexpected(expected: &'static str, found: Marker) -> DecodeError {
    DecodeError::Unexpected { expected, found: format!("{found:?}") }
}

/// A msgpack cursor over one payload: markers come from `rmp`, lengths and values are read here, with
/// every read bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Result<Marker, DecodeError> {
        self.data.get(self.pos).map(|&b| Marker::from_u8(b)).ok_or(DecodeError::Truncated)
    }

    fn next_marker(&mut self) -> Result<Marker, DecodeError> {
        let marker = self.peek()?;
        self.pos += 1;
        Ok(marker)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end =
            self.pos.checked_add(n).filter(|&end| end <= self.data.len()).ok_or(DecodeError::Truncated)?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn array_len(&mut self) -> Result<usize, DecodeError> {
        match self.next_marker()? {
            Marker::FixArray(n) => Ok(usize::from(n)),
            Marker::Array16 => Ok(self.be(2)? as usize),
            Marker::Array32 => Ok(self.be(4)? as usize),
            other => Err(unexpected("an array", other)),
        }
    }

    fn map_len(&mut self) -> Result<usize, DecodeError> {
        match self.next_marker()? {
            Marker::FixMap(n) => Ok(usize::from(n)),
            Marker::Map16 => Ok(self.be(2)? as usize),
            Marker::Map32 => Ok(self.be(4)? as usize),
            other => Err(unexpected("a map", other)),
        }
    }

    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let len = match self.next_marker()? {
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 => self.be(1)? as usize,
            Marker::Str16 => self.be(2)? as usize,
            Marker::Str32 => self.be(4)? as usize,
            other => return Err(unexpected("a string", other)),
        };
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| DecodeError::Unexpected { expected: "UTF-8", found: "invalid UTF-8".to_string() })
    }

    fn opt_str(&mut self) -> Result<Option<String>, DecodeError> {
        if self.peek()? == Marker::Null {
            self.pos += 1;
            return Ok(None);
        }
        self.str().map(|s| Some(s.to_string()))
    }

    /// Any integer marker, as i128 so that u64 and negative values both fit.
    fn int(&mut self) -> Result<i128, DecodeError> {
        Ok(match self.next_marker()? {
            Marker::FixPos(n) => i128::from(n),
            Marker::FixNeg(n) => i128::from(n),
            Marker::U8 => i128::from(self.be(1)?),
            Marker::U16 => i128::from(self.be(2)?),
            Marker::U32 => i128::from(self.be(4)?),
            Marker::U64 => i128::from(self.be(8)?),
            Marker::I8 => i128::from(self.be(1)? as u8 as i8),
            Marker::I16 => i128::from(self.be(2)? as u16 as i16),
            Marker::I32 => i128::from(self.be(4)? as u32 as i32),
            Marker::I64 => i128::from(self.be(8)? as i64),
            other => return Err(unexpected("an integer", other)),
        })
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let value = self.int()?;
        u32::try_from(value)
            .map_err(|_| DecodeError::Unexpected { expected: "a 32-bit count", found: value.to_string() })
    }

    fn opt_int(&mut self) -> Result<Option<i64>, DecodeError> {
        if self.peek()? == Marker::Null {
            self.pos += 1;
            return Ok(None);
        }
        let value = self.int()?;
        i64::try_from(value)
            .map(Some)
            .map_err(|_| DecodeError::Unexpected { expected: "a 64-bit integer", found: value.to_string() })
    }

    fn float(&mut self) -> Result<f64, DecodeError> {
        match self.peek()? {
            Marker::F64 => {
                self.pos += 1;
                Ok(f64::from_bits(self.be(8)?))
            }
            Marker::F32 => {
                self.pos += 1;
                Ok(f64::from(f32::from_bits(self.be(4)? as u32)))
            }
            _ => Ok(self.int()? as f64),
        }
    }

    /// A block hash: an integer (its low 64 bits) or bytes (the last 8, big-endian).
    fn hash(&mut self) -> Result<u64, DecodeError> {
        let len = match self.peek()? {
            Marker::Bin8 | Marker::Str8 => {
                self.pos += 1;
                self.be(1)? as usize
            }
            Marker::Bin16 | Marker::Str16 => {
                self.pos += 1;
                self.be(2)? as usize
            }
            Marker::Bin32 | Marker::Str32 => {
                self.pos += 1;
                self.be(4)? as usize
            }
            Marker::FixStr(n) => {
                self.pos += 1;
                usize::from(n)
            }
            _ => return Ok(self.int()? as u64),
        };
        let bytes = self.take(len)?;
        Ok(bytes[len.saturating_sub(8)..].iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn opt_hash(&mut self) -> Result<Option<u64>, DecodeError> {
        if self.peek()? == Marker::Null {
            self.pos += 1;
            return Ok(None);
        }
        self.hash().map(Some)
    }

    fn hashes(&mut self) -> Result<Vec<u64>, DecodeError> {
        let len = self.array_len()?;
        let mut hashes = Vec::with_capacity(len.min(self.data.len() - self.pos));
        for _ in 0..len {
            hashes.push(self.hash()?);
        }
        Ok(hashes)
    }

    fn tokens(&mut self) -> Result<Vec<u32>, DecodeError> {
        let len = self.array_len()?;
        let mut tokens = Vec::with_capacity(len.min(self.data.len() - self.pos));
        for _ in 0..len {
            tokens.push(self.u32()?);
        }
        Ok(tokens)
    }

    /// Skips one value of any type (`depth`: how deep the caller already is).
    fn skip(&mut self, depth: usize) -> Result<(), DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        let (bytes, items) = match self.next_marker()? {
            Marker::Null | Marker::True | Marker::False | Marker::FixPos(_) | Marker::FixNeg(_) => (0, 0),
            Marker::U8 | Marker::I8 => (1, 0),
            Marker::U16 | Marker::I16 | Marker::FixExt1 => (2, 0),
            Marker::FixExt2 => (3, 0),
            Marker::U32 | Marker::I32 | Marker::F32 => (4, 0),
            Marker::FixExt4 => (5, 0),
            Marker::U64 | Marker::I64 | Marker::F64 => (8, 0),
            Marker::FixExt8 => (9, 0),
            Marker::FixExt16 => (17, 0),
            Marker::FixStr(n) => (usize::from(n), 0),
            Marker::Str8 | Marker::Bin8 => (self.be(1)? as usize, 0),
            Marker::Str16 | Marker::Bin16 => (self.be(2)? as usize, 0),
            Marker::Str32 | Marker::Bin32 => (self.be(4)? as usize, 0),
            Marker::Ext8 => (self.be(1)? as usize + 1, 0),
            Marker::Ext16 => (self.be(2)? as usize + 1, 0),
            Marker::Ext32 => (self.be(4)? as usize + 1, 0),
            Marker::FixArray(n) => (0, usize::from(n)),
            Marker::Array16 => (0, self.be(2)? as usize),
            Marker::Array32 => (0, self.be(4)? as usize),
            Marker::FixMap(n) => (0, 2 * usize::from(n)),
            Marker::Map16 => (0, 2 * self.be(2)? as usize),
            Marker::Map32 => (0, 2 * self.be(4)? as usize),
            Marker::Reserved => return Err(unexpected("a msgpack value", Marker::Reserved)),
        };
        self.take(bytes)?;
        for _ in 0..items {
            self.skip(depth + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
