//! The fast path of the request parse: one structural walk of the body that validates it as JSON and
//! finds the top-level fields routing reads, skipping strings 64 bytes at a time ([`super::blocks`]).
//!
//! It accepts only what serde_json accepts, and gives up (returns `None`) on anything it does not
//! handle exactly as serde_json would — invalid UTF-8 anywhere, an escape in a top-level key, a field
//! routing reads given twice, nesting deeper than [`MAX_DEPTH`], any syntax error. The caller then
//! parses with serde_json, so every error message, and every body this path declines, is serde_json's.
//! The fuzz target `openai_request` checks that both paths agree on every body this one accepts.
//!
//! What serde_json checks, and so this does too: the JSON grammar (RFC 8259), control characters and
//! escapes inside every string (a `\u` needs four hex digits; a lone surrogate is accepted, as serde_json
//! accepts it in a value it does not decode), nothing but whitespace after the object. A `null` value of
//! a field reads as absent, as serde's `Option` does.

use super::blocks::{find_escaped, Masks, BLOCK};

/// The top-level fields epp reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Field {
    Model,
    Stream,
    MaxTokens,
    MaxCompletionTokens,
    MaxOutputTokens,
    Messages,
    Prompt,
    Input,
    Items,
    CacheSalt,
}

/// Their names, in [`Field`]'s order.
pub(super) const FIELD_NAMES: [&str; 10] = [
    "model",
    "stream",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "messages",
    "prompt",
    "input",
    "items",
    "cache_salt",
];

/// The containers within one field's value this path follows before it leaves the body to serde_json
/// (which has no limit for values it skips).
const MAX_DEPTH: usize = 128;

/// Each field's raw JSON text, borrowed from the body; `None` when absent or `null`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct FieldValues<'a>(pub(super) [Option<&'a str>; FIELD_NAMES.len()]);

impl<'a> FieldValues<'a> {
    pub(super) fn get(&self, field: Field) -> Option<&'a str> {
        self.0[field as usize]
    }
}

/// Validates `body` as one JSON object and returns its fields routing reads, or `None` to leave the body
/// to serde_json.
pub(super) fn scan_fields(body: &[u8]) -> Option<FieldValues<'_>> {
    let text = simdutf8::basic::from_utf8(body).ok()?;
    let mut walk = Walk { body, pos: 0 };
    let mut values = FieldValues::default();
    let mut seen = 0u16;
    walk.whitespace();
    walk.expect(b'{')?;
    walk.whitespace();
    if walk.peek() == Some(b'}') {
        walk.pos += 1;
    } else {
        loop {
            let key = walk.key()?;
            if key.contains(&b'\\') {
                return None;
            }
            let start = walk.pos;
            walk.value()?;
            if let Some(slot) = FIELD_NAMES.iter().position(|name| name.as_bytes() == key) {
                if seen & (1 << slot) != 0 {
                    return None;
                }
                seen |= 1 << slot;
                let raw = text.get(start..walk.pos)?;
                values.0[slot] = (raw != "null").then_some(raw);
            }
            walk.whitespace();
            match walk.next()? {
                b',' => walk.whitespace(),
                b'}' => break,
                _ => return None,
            }
        }
    }
    walk.whitespace();
    (walk.pos == body.len()).then_some(values)
}

/// A cursor over the body.
struct Walk<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> Walk<'a> {
    fn peek(&self) -> Option<u8> {
        self.body.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// An object key and its colon, leaving the cursor on the value; returns the key's raw bytes (a
    /// top-level key with an escape is left to serde_json, which compares keys unescaped).
    fn key(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.pos;
        self.pos = skip_string(self.body, start)?;
        let key = self.body.get(start..self.pos - 1)?;
        self.whitespace();
        self.expect(b':')?;
        self.whitespace();
        Some(key)
    }

    /// One value of any kind, nested containers included, without recursion: `open` holds the
    /// containers entered and not yet closed.
    fn value(&mut self) -> Option<()> {
        let mut open = [0u8; MAX_DEPTH];
        let mut depth = 0;
        loop {
            // A value starts here.
            match self.next()? {
                b'"' => self.pos = skip_string(self.body, self.pos)?,
                container @ (b'{' | b'[') => {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    self.whitespace();
                    let close = if container == b'{' { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                    } else {
                        *open.get_mut(depth)? = container;
                        depth += 1;
                        if container == b'{' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                b't' => self.literal(b"rue")?,
                b'f' => self.literal(b"alse")?,
                b'n' => self.literal(b"ull")?,
                b'-' => self.number(None)?,
                digit @ b'0'..=b'9' => self.number(Some(digit))?,
                _ => return None,
            }
            // A value ended: close what it ends, or move to the next element.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.whitespace();
                match (self.next()?, open[depth - 1]) {
                    (b',', b'[') => {
                        self.whitespace();
                        break;
                    }
                    (b',', b'{') => {
                        self.whitespace();
                        self.key()?;
                        break;
                    }
                    (b']', b'[') | (b'}', b'{') => depth -= 1,
                    _ => return None,
                }
            }
        }
    }

    fn literal(&mut self, rest: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(rest.len())?;
        (self.body.get(self.pos..end)? == rest).then(|| self.pos = end)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// A number's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`. `first` is the digit
    /// already read, `None` after a minus sign.
    fn number(&mut self, first: Option<u8>) -> Option<()> {
        let first = match first {
            Some(digit) => digit,
            None => self.next().filter(u8::is_ascii_digit)?,
        };
        if first != b'0' {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            (self.digits() > 0).then_some(())?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            (self.digits() > 0).then_some(())?;
        }
        Some(())
    }
}

/// Skips a string whose opening quote is just before `start`, validating its control characters and
/// escapes; returns the index just past its closing quote.
pub(super) fn skip_string(body: &[u8], start: usize) -> Option<usize> {
    let mut carry = 0;
    let mut pos = start;
    loop {
        let rest = body.get(pos..)?;
        let mut padded = [b' '; BLOCK];
        let block: &[u8; BLOCK] = match rest.get(..BLOCK) {
            Some(full) => full.try_into().ok()?,
            None => {
                padded[..rest.len()].copy_from_slice(rest);
                &padded
            }
        };
        let masks = Masks::of(block);
        let escaped = find_escaped(masks.backslash, &mut carry);
        let closing = masks.quote & !escaped;
        // The bytes before the closing quote, or the whole block while the string goes on.
        let inside = if closing == 0 { u64::MAX } else { (1u64 << closing.trailing_zeros()) - 1 };
        if masks.control & inside != 0 {
            return None;
        }
        // An escaped quote or backslash is valid as it is; the rest are looked at one by one.
        let mut to_check = escaped & !(masks.backslash | masks.quote) & inside;
        while to_check != 0 {
            let i = to_check.trailing_zeros() as usize;
            match block[i] {
                b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                b'u' => four_hex_digits(body, pos + i + 1)?,
                _ => return None,
            }
            to_check &= to_check - 1;
        }
        if closing != 0 {
            return Some(pos + closing.trailing_zeros() as usize + 1);
        }
        if rest.len() <= BLOCK {
            return None;
        }
        pos += BLOCK;
    }
}

fn four_hex_digits(body: &[u8], start: usize) -> Option<()> {
    let digits = body.get(start..start.checked_add(4)?)?;
    digits.iter().all(u8::is_ascii_hexdigit).then_some(())
}

#[cfg(test)]
mod tests;
