//! Model-name rewrites by splicing bytes, never by re-serialising.
//!
//! The Go EPP re-marshals the whole request map to change one string, which reorders keys, drops
//! whitespace, rounds big numbers through float64 and copies the prompt. Here the request body is
//! rebuilt from three slices (before the model literal, the new literal, after it) into one exactly
//! sized buffer, and a response is patched only where `"model": "<name>"` actually occurs.

use std::borrow::Cow;
use std::ops::Range;

use memchr::memmem;

/// A new body with the bytes in `span` (the model string literal, quotes included, as found by
/// [`parse_request`](super::parse_request)) replaced by `new_model` as a JSON string literal.
///
/// Every other byte is kept as is. A span that does not lie within `body` cannot come from the parser;
/// the body is then returned unchanged rather than cut at an arbitrary place.
pub fn splice_model(body: &[u8], span: Range<usize>, new_model: &str) -> Vec<u8> {
    if span.start > span.end || span.end > body.len() {
        return body.to_vec();
    }
    let literal_len = escaped_len(new_model) + 2;
    let mut out = Vec::with_capacity(body.len() - span.len() + literal_len);
    out.extend_from_slice(&body[..span.start]);
    out.push(b'"');
    push_escaped(&mut out, new_model);
    out.push(b'"');
    out.extend_from_slice(&body[span.end..]);
    out
}

/// Replaces every `"model":"<from>"` in a response body or SSE chunk with `"model":"<to>"`, tolerating
/// whitespace around the colon. `None` when nothing matched (or `from == to`), so the caller forwards
/// the chunk untouched without a copy; `data: [DONE]` never matches.
///
/// Limitations, shared with the Go EPP: a `"model"` pair split across two chunks is not rewritten, and
/// the name is matched in the escaped form serde_json writes (a server that escapes `/` as `\/`, or
/// writes `\u` escapes for non-ASCII, is not matched). Model names are plain ASCII in practice.
pub fn rewrite_response_model(chunk: &[u8], from: &str, to: &str) -> Option<Vec<u8>> {
    if from == to {
        return None;
    }
    let from_escaped = escape(from);
    let from_bytes = from_escaped.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    for key_at in memmem::find_iter(chunk, b"\"model\"") {
        if key_at < copied || quote_is_escaped(chunk, key_at) {
            continue;
        }
        let Some(value) = string_value_after_key(chunk, key_at + b"\"model\"".len(), from_bytes) else {
            continue;
        };
        let buf = out.get_or_insert_with(|| Vec::with_capacity(chunk.len() + to.len() + 8));
        buf.extend_from_slice(&chunk[copied..value.start]);
        buf.push(b'"');
        push_escaped(buf, to);
        buf.push(b'"');
        copied = value.end;
    }
    let mut buf = out?;
    buf.extend_from_slice(&chunk[copied..]);
    Some(buf)
}

/// After a `"model"` key ending at `at`: the range of the following `"<expected>"` literal, if that is
/// what follows the colon.
fn string_value_after_key(chunk: &[u8], at: usize, expected: &[u8]) -> Option<Range<usize>> {
    let colon = skip_whitespace(chunk, at);
    if chunk.get(colon) != Some(&b':') {
        return None;
    }
    let start = skip_whitespace(chunk, colon + 1);
    let end = start + expected.len() + 2;
    let literal = chunk.get(start..end)?;
    let matches =
        literal[0] == b'"' && literal[end - start - 1] == b'"' && &literal[1..end - start - 1] == expected;
    matches.then_some(start..end)
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Whether the quote at `at` is preceded by an odd number of backslashes, i.e. sits inside a string.
fn quote_is_escaped(bytes: &[u8], at: usize) -> bool {
    bytes[..at].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// How serde_json escapes a string byte: `None` when it is written as is.
fn escape_of(b: u8) -> Option<&'static [u8]> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Six-byte `\u00XX` forms for the control characters without a short escape.
    static CONTROL: [[u8; 6]; 32] = {
        let mut table = [[0u8; 6]; 32];
        let mut i = 0;
        while i < 32 {
            table[i] = [b'\\', b'u', b'0', b'0', HEX[i >> 4], HEX[i & 0xf]];
            i += 1;
        }
        table
    };
    match b {
        b'"' => Some(b"\\\""),
        b'\\' => Some(b"\\\\"),
        b'\n' => Some(b"\\n"),
        b'\r' => Some(b"\\r"),
        b'\t' => Some(b"\\t"),
        0x08 => Some(b"\\b"),
        0x0c => Some(b"\\f"),
        0x00..=0x1f => Some(&CONTROL[b as usize]),
        _ => None,
    }
}

/// Length of `s` as the inside of a JSON string literal.
fn escaped_len(s: &str) -> usize {
    s.bytes().map(|b| escape_of(b).map_or(1, <[u8]>::len)).sum()
}

/// Appends `s` JSON-escaped (without quotes), exactly as serde_json would write it.
fn push_escaped(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if let Some(escaped) = escape_of(b) {
            out.extend_from_slice(&bytes[plain_from..i]);
            out.extend_from_slice(escaped);
            plain_from = i + 1;
        }
    }
    out.extend_from_slice(&bytes[plain_from..]);
}

/// `s` JSON-escaped, borrowed when nothing needs escaping (the usual case for model names).
fn escape(s: &str) -> Cow<'_, str> {
    if s.bytes().all(|b| escape_of(b).is_none()) {
        return Cow::Borrowed(s);
    }
    let mut out = Vec::with_capacity(escaped_len(s));
    push_escaped(&mut out, s);
    // Escaping only replaces ASCII bytes with ASCII sequences, so UTF-8 stays valid.
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests;
