//! Token usage reported by the model server, from a complete JSON response or from an SSE stream.
//!
//! Only the `usage` object is decoded; the rest of the response (choices, logprobs, ...) is skipped by
//! serde without being materialised. The streaming scanner is fed chunks as Envoy delivers them, so it
//! must cope with an SSE line split across chunks while keeping memory bounded whatever the server sends.

use std::fmt;
use std::sync::LazyLock;

use memchr::{memchr, memmem};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Token usage reported by the model server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
}

/// The most tokens a reported usage count may carry (100 M, far above any model's context window);
/// larger values are clamped to it.
pub const MAX_REPORTED_TOKENS: u64 = 100_000_000;

/// Longest partial SSE line kept between chunks. A longer line is dropped (up to its newline) rather
/// than buffered: usage events are a few hundred bytes, so nothing of interest is lost.
pub(super) const MAX_PENDING_LINE: usize = 1 << 20;

/// The `usage` object in either naming convention (chat/completions or Responses API).
#[derive(Deserialize)]
struct UsageFields {
    prompt_tokens: Option<Count>,
    completion_tokens: Option<Count>,
    input_tokens: Option<Count>,
    output_tokens: Option<Count>,
    prompt_tokens_details: Option<Details>,
    /// The Go EPP reads this misspelling; some servers may emit it.
    prompt_token_details: Option<Details>,
    input_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<Count>,
}

impl UsageFields {
    fn to_usage(&self) -> Usage {
        let get = |c: &Option<Count>| c.as_ref().map(|c| c.0);
        let cached = [&self.prompt_tokens_details, &self.prompt_token_details, &self.input_tokens_details]
            .into_iter()
            .flatten()
            .find_map(|d| get(&d.cached_tokens));
        // A backend can report any number; one absurd value must not leave the token-sum metrics wrong
        // for good, so counts are clamped to more than any real request holds.
        let clamp = |v: u64| v.min(MAX_REPORTED_TOKENS);
        Usage {
            prompt_tokens: clamp(get(&self.prompt_tokens).or(get(&self.input_tokens)).unwrap_or(0)),
            completion_tokens: clamp(get(&self.completion_tokens).or(get(&self.output_tokens)).unwrap_or(0)),
            cached_tokens: clamp(cached.unwrap_or(0)),
        }
    }
}

/// A token count: a non-negative integer, or a float truncated toward zero (negative → 0).
struct Count(u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl Visitor<'_> for CountVisitor {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).unwrap_or(0)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                // `as` maps NaN to 0 and saturates, which is the right clamp here.
                Ok(Count(v as u64))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

#[derive(Deserialize)]
struct UsageEnvelope {
    usage: Option<UsageFields>,
}

/// Usage from a complete (non-streaming) response body; `None` when the body has no `usage` object or
/// is not the JSON expected.
pub fn parse_usage_json(body: &[u8]) -> Option<Usage> {
    let envelope: UsageEnvelope = serde_json::from_slice(body).ok()?;
    envelope.usage.map(|u| u.to_usage())
}

/// One SSE `data:` event: chat/completions put `usage` at the top level (vLLM in the last chunk when
/// `stream_options.include_usage` is set, or in every chunk with continuous usage stats); the Responses
/// API nests it in `response` of the `response.completed` (or `response.incomplete`) event.
#[derive(Deserialize)]
struct StreamEvent<'a> {
    usage: Option<UsageFields>,
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    response: Option<UsageEnvelope>,
}

/// The `"usage"` key, searched for in every streamed event: built once, since building a SIMD searcher
/// costs more than running it over a short token chunk.
static USAGE_KEY: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\"usage\""));

fn usage_from_data_line(line: &[u8]) -> Option<Usage> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let data = line.strip_prefix(b"data:")?;
    let data = data.strip_prefix(b" ").unwrap_or(data);
    // Token chunks carry no usage: skip them without parsing (this also skips `[DONE]`).
    USAGE_KEY.find(data)?;
    let event: StreamEvent<'_> = serde_json::from_slice(data).ok()?;
    if let Some(usage) = event.usage {
        return Some(usage.to_usage());
    }
    // `response.incomplete` (stopped by max_output_tokens) reports usage the same way.
    if matches!(event.kind.as_deref(), Some("response.completed" | "response.incomplete")) {
        return event.response?.usage.map(|u| u.to_usage());
    }
    None
}

/// Incremental SSE usage scanner: feed it every response chunk in order, read [`usage`](Self::usage)
/// at the end. The last event carrying usage wins (continuous usage stats are cumulative).
#[derive(Debug, Default)]
pub struct UsageScanner {
    /// The start of a line whose newline has not arrived yet.
    pending: Vec<u8>,
    /// The current line outgrew [`MAX_PENDING_LINE`]: drop bytes until its newline.
    discarding: bool,
    usage: Option<Usage>,
}

impl UsageScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scans the next chunk of the stream.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        // Finish the line carried over from earlier chunks.
        if self.discarding || !self.pending.is_empty() {
            let Some(newline) = memchr(b'\n', rest) else {
                self.keep_partial(rest);
                return;
            };
            if !self.discarding {
                self.pending.extend_from_slice(&rest[..newline]);
                let line = std::mem::take(&mut self.pending);
                self.scan_line(&line);
                // Give the buffer back so its capacity is reused.
                self.pending = line;
                self.pending.clear();
            }
            self.discarding = false;
            rest = &rest[newline + 1..];
        }
        while let Some(newline) = memchr(b'\n', rest) {
            self.scan_line(&rest[..newline]);
            rest = &rest[newline + 1..];
        }
        self.keep_partial(rest);
    }

    /// The usage of the last event that reported it. A final `data:` line the stream ended without a
    /// newline also counts.
    pub fn usage(&self) -> Option<Usage> {
        if !self.discarding && !self.pending.is_empty() {
            if let Some(usage) = usage_from_data_line(&self.pending) {
                return Some(usage);
            }
        }
        self.usage
    }

    fn scan_line(&mut self, line: &[u8]) {
        if let Some(usage) = usage_from_data_line(line) {
            self.usage = Some(usage);
        }
    }

    fn keep_partial(&mut self, bytes: &[u8]) {
        if self.discarding || bytes.is_empty() {
            return;
        }
        if self.pending.len() + bytes.len() > MAX_PENDING_LINE {
            self.pending.clear();
            self.pending.shrink_to(64 * 1024);
            self.discarding = true;
        } else {
            self.pending.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests;
