use super::*;

fn usage(prompt: u64, completion: u64, cached: u64) -> Usage {
    Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached }
}

fn scan(chunks: &[&[u8]]) -> Option<Usage> {
    let mut s = UsageScanner::new();
    for c in chunks {
        s.feed(c);
    }
    s.usage()
}

#[test]
fn json_chat_completion() {
    let body = br#"{"id":"x","object":"chat.completion","model":"m","choices":[{"message":{"content":"hi","usage":1}}],
        "usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":4}}}"#;
    assert_eq!(parse_usage_json(body), Some(usage(12, 8, 4)));
}

#[test]
fn json_responses_api_and_detail_spellings() {
    let body = br#"{"object":"response","usage":{"input_tokens":31,"output_tokens":9,"total_tokens":40,
        "input_tokens_details":{"cached_tokens":16},"output_tokens_details":{"reasoning_tokens":0}}}"#;
    assert_eq!(parse_usage_json(body), Some(usage(31, 9, 16)));
    let body =
        br#"{"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_token_details":{"cached_tokens":2}}}"#;
    assert_eq!(parse_usage_json(body), Some(usage(3, 1, 2)));
    let body = br#"{"usage":{"prompt_tokens":3,"prompt_tokens_details":null}}"#;
    assert_eq!(parse_usage_json(body), Some(usage(3, 0, 0)));
    let body = br#"{"usage":{"prompt_tokens":3.0,"completion_tokens":-1}}"#;
    assert_eq!(parse_usage_json(body), Some(usage(3, 0, 0)));
}

#[test]
fn json_without_usage_or_garbage() {
    assert_eq!(parse_usage_json(br#"{"object":"chat.completion","choices":[]}"#), None);
    assert_eq!(parse_usage_json(br#"{"usage":null}"#), None);
    assert_eq!(parse_usage_json(br#"{"usage":"lots"}"#), None);
    assert_eq!(parse_usage_json(br#"{"usage":{"prompt_tokens":"3"}}"#), None);
    assert_eq!(parse_usage_json(b""), None);
    assert_eq!(parse_usage_json(b"data: {}\n\n"), None);
    assert_eq!(parse_usage_json(b"[1,2]"), None);
    assert_eq!(parse_usage_json(b"\xff\xfe{"), None);
}

#[test]
fn sse_vllm_final_usage_chunk() {
    let stream = b"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
        data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"total_tokens\":17,\"completion_tokens\":10}}\n\n\
        data: [DONE]\n\n";
    assert_eq!(scan(&[stream]), Some(usage(7, 10, 0)));
}

#[test]
fn sse_null_usage_chunks_are_skipped_and_last_wins() {
    let stream = b"data: {\"choices\":[],\"usage\":null}\n\n\
        data: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\n\
        data: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n\
        data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n";
    assert_eq!(scan(&[stream]), Some(usage(7, 2, 0)));
}

#[test]
fn sse_responses_api_completed_event() {
    let stream = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
        event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"usage\"}\n\n\
        event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"object\":\"response\",\
        \"usage\":{\"input_tokens\":31,\"output_tokens\":5,\"input_tokens_details\":{\"cached_tokens\":8}}}}\r\n\r\n";
    assert_eq!(scan(&[stream]), Some(usage(31, 5, 8)));
    let other =
        b"data: {\"type\":\"response.in_progress\",\"response\":{\"usage\":{\"input_tokens\":1}}}\n\n";
    assert_eq!(scan(&[other]), None);
}

#[test]
fn sse_lines_split_across_chunks_at_every_position() {
    let stream: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n\
        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":70,\"completion_tokens\":11}}\n\ndata: [DONE]\n\n";
    for cut in 0..=stream.len() {
        assert_eq!(scan(&[&stream[..cut], &stream[cut..]]), Some(usage(70, 11, 0)), "cut at {cut}");
    }
    // One byte at a time.
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(scan(&bytes), Some(usage(70, 11, 0)));
}

#[test]
fn data_prefix_variants() {
    assert_eq!(scan(&[b"data:{\"usage\":{\"prompt_tokens\":1}}\n"]), Some(usage(1, 0, 0)));
    assert_eq!(scan(&[b"data:  {\"usage\":{\"prompt_tokens\":1}}\n"]), Some(usage(1, 0, 0)));
    assert_eq!(scan(&[b": comment \"usage\"\nid: 3\nevent: x\n"]), None);
    assert_eq!(scan(&[b"xdata: {\"usage\":{\"prompt_tokens\":1}}\n"]), None);
}

#[test]
fn final_line_without_newline_counts() {
    assert_eq!(scan(&[b"data: {\"usage\":{\"prompt_tokens\":5}}"]), Some(usage(5, 0, 0)));
    let mut s = UsageScanner::new();
    s.feed(b"data: {\"usage\":{\"prompt_tokens\":5}}\n\ndata: {\"usage\":{\"prompt_tok");
    assert_eq!(s.usage(), Some(usage(5, 0, 0)), "an incomplete line does not hide earlier usage");
}

#[test]
fn overlong_line_is_dropped_and_memory_stays_bounded() {
    let mut s = UsageScanner::new();
    s.feed(b"data: {\"usage\":{\"prompt_tokens\":1}}\n");
    s.feed(b"data: {\"pad\":\"");
    let pad = vec![b'a'; 64 * 1024];
    for _ in 0..40 {
        s.feed(&pad);
        assert!(s.pending.capacity() <= 2 * MAX_PENDING_LINE);
    }
    assert!(s.discarding);
    s.feed(b"\",\"usage\":{\"prompt_tokens\":999}}\ndata: {\"usage\":{\"prompt_tokens\":2}}\n");
    assert_eq!(s.usage(), Some(usage(2, 0, 0)));
    assert!(!s.discarding);
}

#[test]
fn garbage_never_panics() {
    let mut s = UsageScanner::new();
    let garbage: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    for c in garbage.chunks(997) {
        s.feed(c);
    }
    s.feed(b"data: {\"usage\":{\"prompt_tokens\":\xff}}\n");
    s.feed(b"data: {\"usage\":[1,2]}\ndata: [DONE]\ndata: \ndata:\n\n\n");
    assert_eq!(s.usage(), None);
    s.feed(b"");
    assert_eq!(s.usage(), None);
}

#[test]
fn absurd_counts_are_clamped() {
    let body = br#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1e30,"prompt_tokens_details":{"cached_tokens":5}}}"#;
    let u = parse_usage_json(body).expect("usage");
    assert_eq!(u, usage(MAX_REPORTED_TOKENS, MAX_REPORTED_TOKENS, 5));
}
