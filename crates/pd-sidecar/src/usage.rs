//! The client's usage must report the prompt tokens the *prefill* engine found cached: the decode engine
//! counts the transferred blocks as cached, so its own figure overstates the hit (the vllm-router #193
//! class of bug; llm-d rewrites it, llm-d/llm-d-router:pkg/sidecar/proxy/cached_tokens_usage_rewriter.go).
//!
//! A JSON answer is rewritten whole. A server-sent-event stream is passed through event by event: only an
//! event whose `data:` JSON carries a non-null `usage` is re-serialised; every other byte goes out as it
//! came, and a partial event waits only for its own end.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

/// Sets `usage.prompt_tokens_details.cached_tokens` in `answer` when it has a usage object.
fn rewrite_value(answer: &mut Value, cached_tokens: u64) -> bool {
    let Some(usage) = answer.get_mut("usage").filter(|u| u.is_object()) else { return false };
    let details = usage
        .as_object_mut()
        .map(|u| u.entry("prompt_tokens_details").or_insert_with(|| serde_json::json!({})));
    match details {
        Some(Value::Object(d)) => {
            d.insert("cached_tokens".into(), cached_tokens.into());
            true
        }
        Some(slot) => {
            *slot = serde_json::json!({"cached_tokens": cached_tokens});
            true
        }
        None => false,
    }
}

/// A whole JSON answer, rewritten (returned unchanged when it is not JSON or has no usage).
pub fn rewrite_json(answer: Bytes, cached_tokens: u64) -> Bytes {
    let Ok(mut value) = serde_json::from_slice::<Value>(&answer) else { return answer };
    if !rewrite_value(&mut value, cached_tokens) {
        return answer;
    }
    serde_json::to_vec(&value).map(Bytes::from).unwrap_or(answer)
}

/// Rewrites the usage of an SSE stream as it passes.
#[derive(Debug)]
pub struct SseRewriter {
    cached_tokens: u64,
    pending: BytesMut,
}

impl SseRewriter {
    pub fn new(cached_tokens: u64) -> Self {
        Self { cached_tokens, pending: BytesMut::new() }
    }

    /// The complete events of `chunk` (and of what was pending), rewritten; a trailing partial event is
    /// kept for the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        let Some(end) = last_event_end(&self.pending) else { return Bytes::new() };
        let complete = self.pending.split_to(end).freeze();
        self.rewrite_events(complete)
    }

    /// Whatever is left at the end of the stream, rewritten if it is a whole event.
    pub fn finish(&mut self) -> Bytes {
        let rest = self.pending.split().freeze();
        self.rewrite_events(rest)
    }

    fn rewrite_events(&self, events: Bytes) -> Bytes {
        // Fast path: no usage anywhere in these events.
        if memfind(&events, b"\"usage\"").is_none() {
            return events;
        }
        let Ok(text) = std::str::from_utf8(&events) else { return events };
        let mut out = String::with_capacity(text.len() + 32);
        for line in text.split_inclusive('\n') {
            out.push_str(&self.rewrite_line(line));
        }
        Bytes::from(out)
    }

    fn rewrite_line(&self, line: &str) -> String {
        let Some(data) = line.strip_prefix("data:") else { return line.to_string() };
        let body = data.trim();
        let Ok(mut value) = serde_json::from_str::<Value>(body) else { return line.to_string() };
        if value.get("usage").is_none_or(Value::is_null) || !rewrite_value(&mut value, self.cached_tokens) {
            return line.to_string();
        }
        let newline = &line[line.trim_end_matches(['\r', '\n']).len()..];
        format!("data: {value}{newline}")
    }
}

/// The end of the last complete event (after its blank line), if any.
fn last_event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).rposition(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).rposition(|w| w == b"\r\n\r\n").map(|i| i + 4);
    lf.max(crlf)
}

fn memfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_json_answer_reports_the_prefill_hit() {
        let answer = json!({"usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 96}}});
        let out = rewrite_json(Bytes::from(answer.to_string()), 32);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
        let bare = rewrite_json(Bytes::from(json!({"usage": {"prompt_tokens": 5}}).to_string()), 0);
        assert_eq!(
            serde_json::from_slice::<Value>(&bare).unwrap()["usage"]["prompt_tokens_details"]
                ["cached_tokens"],
            0
        );
        let none = Bytes::from_static(b"{\"choices\": []}");
        assert_eq!(rewrite_json(none.clone(), 7), none);
    }

    #[test]
    fn a_stream_is_rewritten_only_where_usage_is_even_split_across_chunks() {
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 8}}});
        let stream = format!(
            "data: {{\"choices\":[{{\"text\":\"a\"}}],\"usage\":null}}\n\ndata: {usage}\n\ndata: [DONE]\n\n"
        );
        let mut r = SseRewriter::new(3);
        let mut out = Vec::new();
        for piece in stream.as_bytes().chunks(7) {
            out.extend_from_slice(&r.push(piece));
        }
        out.extend_from_slice(&r.finish());
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n"), "{text}");
        assert!(text.contains("\"cached_tokens\":3"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert_eq!(text.matches("\n\n").count(), 3);
    }
}
