//! A model server's response body on its way back: SSE detection, the `usage` it reports (SSE events or a
//! JSON body), and the model name rewritten back.
//!
//! Input: a flags byte, a count of cut points and the cuts (each a fraction of the body, in 1/256ths), then
//! the body. Invariants beyond "no panic":
//! - the usage read does not depend on how the body was cut into chunks (Envoy's chunking is arbitrary);
//! - the SSE scanner fed one byte at a time reads what it reads from the whole body;
//! - reported counts never exceed [`MAX_REPORTED_TOKENS`].

use epp::request::{Headers, ResponseReader, Usage, UsageScanner, MAX_REPORTED_TOKENS};

const STREAMED: u8 = 1;
const EVENT_STREAM: u8 = 2;
const RENAMED: u8 = 4;

pub fn run(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else { return };
    let Some((&cut_count, rest)) = rest.split_first() else { return };
    let cut_count = usize::from(cut_count % 8).min(rest.len());
    let (cut_bytes, body) = rest.split_at(cut_count);
    let mut cuts: Vec<usize> = cut_bytes.iter().map(|&c| body.len() * usize::from(c) / 256).collect();
    cuts.sort_unstable();

    let whole = read(flags, &[body]);
    let mut chunks = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        chunks.push(&body[start..cut]);
        start = cut;
    }
    chunks.push(&body[start..]);
    let chunked = read(flags, &chunks);
    assert_eq!(whole, chunked, "usage depends on the chunking {:?}", chunks.iter().map(|c| c.len()));

    let mut scanner = UsageScanner::new();
    for b in body {
        scanner.feed(std::slice::from_ref(b));
    }
    let mut at_once = UsageScanner::new();
    at_once.feed(body);
    assert_eq!(scanner.usage(), at_once.usage(), "the SSE scanner depends on the chunking");

    if let Some(u) = whole {
        for count in [u.prompt_tokens, u.completion_tokens, u.cached_tokens] {
            assert!(count <= MAX_REPORTED_TOKENS, "usage count {count} above the clamp");
        }
    }
}

/// Reads a response made of `chunks` the way a routed request's `ActiveRequest` does.
fn read(flags: u8, chunks: &[&[u8]]) -> Option<Usage> {
    let target = if flags & RENAMED != 0 { "served-model" } else { "asked-model" };
    let mut reader = ResponseReader::new(flags & STREAMED != 0, "asked-model", target);
    let mut headers = Headers::new();
    headers.push(":status", "200");
    if flags & EVENT_STREAM != 0 {
        headers.push("content-type", "text/event-stream");
    }
    assert_eq!(reader.on_headers(&headers), Some(200));
    for chunk in chunks {
        if let Some(rewritten) = reader.on_chunk(chunk) {
            assert!(flags & RENAMED != 0, "a chunk was rewritten for a request whose model was not");
            assert_ne!(rewritten.as_slice(), *chunk, "a rewrite that changed nothing was returned");
        }
    }
    reader.usage()
}
