//! A msgpack cursor over one payload: markers come from `rmp`, lengths and values are read here, every read
//! bounds-checked, so any byte string is a value or a [`DecodeError`], never a panic.

use rmp::Marker;

/// Nesting allowed in skipped values: a hostile payload cannot recurse the decoder off its stack.
pub(super) const MAX_DEPTH: usize = 32;

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

pub(super) fn unexpected(expected: &'static str, found: Marker) -> DecodeError {
    DecodeError::Unexpected { expected, found: format!("{found:?}") }
}

/// A cursor over one msgpack payload.
pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn peek(&self) -> Result<Marker, DecodeError> {
        self.data.get(self.pos).map(|&b| Marker::from_u8(b)).ok_or(DecodeError::Truncated)
    }

    pub(super) fn next_marker(&mut self) -> Result<Marker, DecodeError> {
        let marker = self.peek()?;
        self.pos += 1;
        Ok(marker)
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end =
            self.pos.checked_add(n).filter(|&end| end <= self.data.len()).ok_or(DecodeError::Truncated)?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    pub(super) fn be(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    pub(super) fn array_len(&mut self) -> Result<usize, DecodeError> {
        match self.next_marker()? {
            Marker::FixArray(n) => Ok(usize::from(n)),
            Marker::Array16 => Ok(self.be(2)? as usize),
            Marker::Array32 => Ok(self.be(4)? as usize),
            other => Err(unexpected("an array", other)),
        }
    }

    pub(super) fn map_len(&mut self) -> Result<usize, DecodeError> {
        match self.next_marker()? {
            Marker::FixMap(n) => Ok(usize::from(n)),
            Marker::Map16 => Ok(self.be(2)? as usize),
            Marker::Map32 => Ok(self.be(4)? as usize),
            other => Err(unexpected("a map", other)),
        }
    }

    pub(super) fn str(&mut self) -> Result<&'a str, DecodeError> {
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

    /// Consumes a nil if one is next.
    fn take_nil(&mut self) -> Result<bool, DecodeError> {
        let nil = self.peek()? == Marker::Null;
        self.pos += usize::from(nil);
        Ok(nil)
    }

    pub(super) fn opt_str(&mut self) -> Result<Option<String>, DecodeError> {
        if self.take_nil()? {
            return Ok(None);
        }
        self.str().map(|s| Some(s.to_string()))
    }

    /// Any integer marker, as i128 so that u64 and negative values both fit.
    pub(super) fn int(&mut self) -> Result<i128, DecodeError> {
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

    pub(super) fn u32(&mut self) -> Result<u32, DecodeError> {
        let value = self.int()?;
        u32::try_from(value)
            .map_err(|_| DecodeError::Unexpected { expected: "a 32-bit count", found: value.to_string() })
    }

    pub(super) fn opt_int(&mut self) -> Result<Option<i64>, DecodeError> {
        if self.take_nil()? {
            return Ok(None);
        }
        let value = self.int()?;
        i64::try_from(value)
            .map(Some)
            .map_err(|_| DecodeError::Unexpected { expected: "a 64-bit integer", found: value.to_string() })
    }

    pub(super) fn float(&mut self) -> Result<f64, DecodeError> {
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
    pub(super) fn hash(&mut self) -> Result<u64, DecodeError> {
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

    pub(super) fn opt_hash(&mut self) -> Result<Option<u64>, DecodeError> {
        if self.take_nil()? {
            return Ok(None);
        }
        self.hash().map(Some)
    }

    pub(super) fn hashes(&mut self) -> Result<Vec<u64>, DecodeError> {
        let len = self.array_len()?;
        let mut hashes = Vec::with_capacity(len.min(self.data.len() - self.pos));
        for _ in 0..len {
            hashes.push(self.hash()?);
        }
        Ok(hashes)
    }

    pub(super) fn tokens(&mut self) -> Result<Vec<u32>, DecodeError> {
        let len = self.array_len()?;
        let mut tokens = Vec::with_capacity(len.min(self.data.len() - self.pos));
        for _ in 0..len {
            tokens.push(self.u32()?);
        }
        Ok(tokens)
    }

    /// Skips one value of any type (`depth`: how deep the caller already is).
    pub(super) fn skip(&mut self, depth: usize) -> Result<(), DecodeError> {
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
