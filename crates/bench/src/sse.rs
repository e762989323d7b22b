//! Reads an OpenAI server-sent-events stream as it arrives and times it: first content token, the gap
//! before every later content event, `[DONE]`, the final `usage`, and in-stream errors.
//!
//! Why it takes arrival times from the caller: the network delivers bytes in arbitrary pieces (an event
//! may be split, several may share one read), and the scanner only has to attribute each complete event
//! to the moment its last byte arrived. Passing that moment in keeps the parsing testable without clocks.
//!
//! Why not the product's `epp::request::UsageScanner` (src/request/usage.rs): that scanner answers one
//! question, the stream's last `usage`, and exposes no per-event hook, so it cannot time content events
//! or see `[DONE]` and error events; widening it would change the product for the benchmark's sake. The
//! two share the line rules (split on `\n`, strip a trailing `\r`, `data:` prefix) and the bound on a
//! partial line (1 MiB, [`MAX_LINE_BYTES`]; vLLM's events are a few hundred bytes), and a test checks
//! they read the same `usage` from the same stream. They differ past the bound on purpose: the product
//! drops the long line and keeps scanning (usage accounting must never break a response), the bench
//! marks the stream broken (a measurement that skipped events would misreport TTFT and gaps).

use std::time::Duration;

use serde::Deserialize;

/// Longest line kept while waiting for its end; a stream exceeding it is treated as broken. The same
/// bound as the product's `MAX_PENDING_LINE` (src/request/usage.rs).
pub const MAX_LINE_BYTES: usize = 1 << 20;

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<Usage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    text: Option<String>,
    delta: Option<Delta>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    completion_tokens: Option<u64>,
}

fn has_text(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

impl Event {
    /// Whether this event carries generated text (content, completion text or reasoning).
    fn has_content(&self) -> bool {
        self.choices.iter().any(|c| {
            has_text(&c.text)
                || c.delta.as_ref().is_some_and(|d| has_text(&d.content) || has_text(&d.reasoning_content))
        })
    }
}

/// Timing and outcome of one SSE stream.
#[derive(Debug, Default, Clone)]
pub struct SseScanner {
    pending: Vec<u8>,
    /// When the first content event completed (since the request was sent).
    pub first_content: Option<Duration>,
    last_content: Option<Duration>,
    /// Gap before each content event after the first.
    pub inter_token_gaps: Vec<Duration>,
    pub content_events: u64,
    /// `usage.completion_tokens` from the final chunk, when the server sent it.
    pub usage_completion_tokens: Option<u64>,
    /// `data: [DONE]` was seen.
    pub done: bool,
    /// An `error` object arrived inside the stream, or a line could not be parsed.
    pub error: Option<String>,
}

impl SseScanner {
    /// Feeds bytes that arrived `at` (time since the request was sent).
    pub fn feed(&mut self, bytes: &[u8], at: Duration) {
        // Taken out of self so lines can be borrowed from it while events update the other fields.
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(bytes);
        let mut consumed = 0;
        while let Some(newline) = memchr::memchr(b'\n', &pending[consumed..]) {
            let end = consumed + newline;
            self.on_line(trim_cr(&pending[consumed..end]), at);
            consumed = end + 1;
        }
        pending.drain(..consumed);
        self.pending = pending;
        if self.pending.len() > MAX_LINE_BYTES && self.error.is_none() {
            self.error = Some(format!("an SSE line longer than {MAX_LINE_BYTES} bytes"));
            self.pending.clear();
        }
    }

    fn on_line(&mut self, line: &[u8], at: Duration) {
        let Some(data) = line.strip_prefix(b"data:") else { return };
        let data = data.trim_ascii();
        if data == b"[DONE]" {
            self.done = true;
            return;
        }
        if data.is_empty() {
            return;
        }
        let event: Event = match serde_json::from_slice(data) {
            Ok(event) => event,
            Err(e) => {
                self.error.get_or_insert_with(|| format!("unparsable SSE event: {e}"));
                return;
            }
        };
        if let Some(error) = &event.error {
            self.error.get_or_insert_with(|| format!("error event in stream: {error}"));
        }
        if let Some(tokens) = event.usage.as_ref().and_then(|u| u.completion_tokens) {
            self.usage_completion_tokens = Some(tokens);
        }
        if event.has_content() {
            self.content_events += 1;
            match self.last_content {
                None => self.first_content = Some(at),
                Some(last) => self.inter_token_gaps.push(at.saturating_sub(last)),
            }
            self.last_content = Some(at);
        }
    }

    /// Output tokens: the server's `usage` when sent, else one per content event.
    pub fn output_tokens(&self) -> u64 {
        self.usage_completion_tokens.unwrap_or(self.content_events)
    }

    /// Whether the stream ended properly: `[DONE]` seen, no error event, nothing left half-read.
    pub fn complete(&self) -> bool {
        self.done && self.error.is_none()
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Time per output token after the first: `(e2e − ttft) / (tokens − 1)`; `None` for fewer than 2 tokens.
pub fn time_per_output_token(e2e: Duration, ttft: Duration, tokens: u64) -> Option<Duration> {
    if tokens < 2 {
        return None;
    }
    let tokens = u32::try_from(tokens - 1).unwrap_or(u32::MAX);
    Some(e2e.saturating_sub(ttft) / tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const ROLE_ONLY: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";

    fn chat(content: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\n")
    }

    #[test]
    fn ttft_is_the_first_content_event_and_gaps_follow() {
        let mut s = SseScanner::default();
        s.feed(ROLE_ONLY.as_bytes(), ms(5)); // no content yet: not the first token
        s.feed(chat("a").as_bytes(), ms(20));
        s.feed(chat("b").as_bytes(), ms(30));
        s.feed(format!("{}{}", chat("c"), chat("d")).as_bytes(), ms(45)); // two events in one read
        s.feed(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", ms(46));
        s.feed(b"data: [DONE]\n\n", ms(47));
        assert_eq!(s.first_content, Some(ms(20)));
        assert_eq!(s.inter_token_gaps, vec![ms(10), ms(15), ms(0)]);
        assert_eq!(s.content_events, 4);
        assert_eq!(s.output_tokens(), 4);
        assert!(s.complete());
    }

    #[test]
    fn events_split_across_reads_count_when_their_line_ends() {
        let mut s = SseScanner::default();
        let event = chat("hello");
        let (head, tail) = event.as_bytes().split_at(17);
        s.feed(head, ms(10));
        assert_eq!(s.first_content, None);
        s.feed(tail, ms(12));
        assert_eq!(s.first_content, Some(ms(12)));
        s.feed(b"data: [DO", ms(13));
        assert!(!s.done);
        s.feed(b"NE]\r\n\r\n", ms(14));
        assert!(s.done);
    }

    #[test]
    fn completions_text_and_missing_usage() {
        let mut s = SseScanner::default();
        for (i, at) in [3, 7, 12].into_iter().enumerate() {
            let line = format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"t{i}\"}}]}}\n\n");
            s.feed(line.as_bytes(), ms(at));
        }
        assert_eq!(s.output_tokens(), 3);
        assert_eq!(s.inter_token_gaps, vec![ms(4), ms(5)]);
        assert!(!s.complete()); // no [DONE]: broken
    }

    #[test]
    fn error_events_and_garbage_mark_the_stream() {
        let mut s = SseScanner::default();
        s.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", ms(1));
        assert!(s.done && !s.complete());
        assert!(s.error.as_deref().unwrap().contains("boom"));
        let mut g = SseScanner::default();
        g.feed(b": comment\nevent: x\ndata: {nope\n\n", ms(1));
        assert!(g.error.as_deref().unwrap().contains("unparsable"));
    }

    #[test]
    fn usage_agrees_with_the_products_scanner_and_long_lines_break_the_stream() {
        let stream = format!(
            "{}{}data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":2}}}}\r\n\r\ndata: [DONE]\n\n",
            chat("a"),
            chat("b")
        );
        let (mut bench, mut product) = (SseScanner::default(), epp::request::UsageScanner::new());
        // Fed in 7-byte pieces so both must carry partial lines between reads.
        for (i, piece) in stream.as_bytes().chunks(7).enumerate() {
            bench.feed(piece, ms(i as u64));
            product.feed(piece);
        }
        let product_tokens = product.usage().map(|u| u.completion_tokens);
        assert_eq!(bench.usage_completion_tokens, product_tokens);
        assert_eq!(bench.usage_completion_tokens, Some(2));
        assert!(bench.complete());
        let mut long = SseScanner::default();
        long.feed(b"data: {\"choices\":[{\"text\":\"", ms(1));
        long.feed(&vec![b'x'; MAX_LINE_BYTES], ms(2));
        assert!(long.error.as_deref().is_some_and(|e| e.contains("longer than")), "{:?}", long.error);
    }

    #[test]
    fn tpot_formula() {
        assert_eq!(time_per_output_token(ms(110), ms(10), 11), Some(ms(10)));
        assert_eq!(time_per_output_token(ms(110), ms(10), 1), None);
    }
}
