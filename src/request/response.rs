//! What epp reads from a model server's response on its way back: whether it is an SSE stream, the token
//! `usage` (from the SSE events, or from a complete JSON body), and the model name to rewrite back to the
//! one the client asked for.
//!
//! The wire layer hands each chunk here and forwards whatever comes back; it knows nothing of OpenAI.
//! Memory is bounded: SSE lines by [`UsageScanner`]'s own limit, a JSON body by [`MAX_USAGE_BUFFER`]
//! (past it the body is no longer kept and its usage is unknown).

use super::{parse_usage_json, rewrite_response_model, Headers, Usage, UsageScanner};

/// Most bytes of a non-streamed response kept to read `usage` from.
pub const MAX_USAGE_BUFFER: usize = 4 << 20;

/// The response side of one routed request.
#[derive(Debug)]
pub struct ResponseReader {
    streaming: bool,
    sse: UsageScanner,
    json: Vec<u8>,
    json_overflow: bool,
    /// `(served as, asked for)` when the model was rewritten: the served name is rewritten back.
    rename: Option<(String, String)>,
}

impl ResponseReader {
    /// A reader for a request that asked for `"stream": true` (or not), was sent as `target_model` and
    /// asked for `incoming_model`.
    pub fn new(request_streamed: bool, incoming_model: &str, target_model: &str) -> Self {
        let rename = (target_model != incoming_model && !incoming_model.is_empty())
            .then(|| (target_model.to_string(), incoming_model.to_string()));
        Self {
            streaming: request_streamed,
            sse: UsageScanner::default(),
            json: Vec::new(),
            json_overflow: false,
            rename,
        }
    }

    /// Reads the response headers: the HTTP status, and `text/event-stream` makes the body an SSE stream
    /// whatever the request asked for.
    pub fn on_headers(&mut self, headers: &Headers) -> Option<u16> {
        if headers.get("content-type").is_some_and(|c| c.contains("text/event-stream")) {
            self.streaming = true;
        }
        headers.get(":status").and_then(|s| s.parse::<u16>().ok())
    }

    /// Whether the body is read as an SSE stream.
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    /// Reads one body chunk; returns the chunk to forward instead, when the model name was rewritten
    /// back in it (`None`: forward it as it is).
    pub fn on_chunk(&mut self, chunk: &[u8]) -> Option<Vec<u8>> {
        if self.streaming {
            self.sse.feed(chunk);
        } else if !self.json_overflow {
            if self.json.len() + chunk.len() <= MAX_USAGE_BUFFER {
                self.json.extend_from_slice(chunk);
            } else {
                self.json_overflow = true;
                self.json = Vec::new();
            }
        }
        let (served, asked) = self.rename.as_ref()?;
        rewrite_response_model(chunk, served, asked)
    }

    /// The usage the response carried, once it is complete; frees the kept body.
    pub fn usage(&mut self) -> Option<Usage> {
        let usage = if self.streaming { self.sse.usage() } else { parse_usage_json(&self.json) };
        self.json = Vec::new();
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    #[test]
    fn json_usage_is_read_from_the_whole_body() {
        let mut r = ResponseReader::new(false, "m", "m");
        assert_eq!(
            r.on_headers(&headers(&[(":status", "200"), ("content-type", "application/json")])),
            Some(200)
        );
        assert!(r.on_chunk(br#"{"usage":{"prompt_tokens":3,"#).is_none());
        assert!(r.on_chunk(br#""completion_tokens":5}}"#).is_none());
        assert_eq!(r.usage(), Some(Usage { prompt_tokens: 3, completion_tokens: 5, cached_tokens: 0 }));
    }

    #[test]
    fn an_event_stream_content_type_makes_the_body_sse() {
        let mut r = ResponseReader::new(false, "m", "m");
        r.on_headers(&headers(&[(":status", "200"), ("content-type", "text/event-stream")]));
        assert!(r.streaming());
        r.on_chunk(b"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
        assert_eq!(r.usage(), Some(Usage { prompt_tokens: 1, completion_tokens: 2, cached_tokens: 0 }));
    }

    #[test]
    fn a_rewritten_model_is_renamed_back_in_each_chunk() {
        let mut r = ResponseReader::new(true, "asked", "served");
        let out = r.on_chunk(br#"data: {"model":"served","choices":[]}"#).expect("renamed");
        assert_eq!(out, br#"data: {"model":"asked","choices":[]}"#.to_vec());
        let mut same = ResponseReader::new(true, "m", "m");
        assert!(same.on_chunk(br#"data: {"model":"m"}"#).is_none());
    }

    #[test]
    fn a_body_past_the_buffer_limit_has_no_usage() {
        let mut r = ResponseReader::new(false, "m", "m");
        r.on_chunk(br#"{"usage":{"prompt_tokens":3,"completion_tokens":5},"pad":""#);
        r.on_chunk(&vec![b'x'; MAX_USAGE_BUFFER]);
        r.on_chunk(br#""}"#);
        assert_eq!(r.usage(), None);
    }
}
