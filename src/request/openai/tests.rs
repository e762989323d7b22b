use super::*;
use crate::error::ErrorCode;

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";

fn parse(path: &str, body: &str) -> Result<ParsedRequest, RequestError> {
    parse_request(path, body.as_bytes())
}

fn err(path: &str, body: &str) -> String {
    let e = parse(path, body).unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    e.message
}

fn slice<'a>(body: &'a str, span: &Range<usize>) -> &'a str {
    &body[span.clone()]
}

#[test]
fn api_by_path_suffix() {
    assert_eq!(api_kind_for_path("/v1/chat/completions"), ApiKind::ChatCompletions);
    assert_eq!(api_kind_for_path("/v1/chat/completions?foo=bar"), ApiKind::ChatCompletions);
    assert_eq!(api_kind_for_path("/v1/chat/completions/"), ApiKind::ChatCompletions);
    assert_eq!(api_kind_for_path("/openai/v1/completions"), ApiKind::Completions);
    assert_eq!(api_kind_for_path("/v1/embeddings"), ApiKind::Embeddings);
    assert_eq!(api_kind_for_path("/v1/responses"), ApiKind::Responses);
    assert_eq!(api_kind_for_path("/v1/conversations"), ApiKind::Conversations);
    assert_eq!(api_kind_for_path("/v1/conversations/conv_1/items"), ApiKind::Conversations);
    assert_eq!(api_kind_for_path("/v1/models"), ApiKind::Completions);
    assert_eq!(api_kind_for_path(""), ApiKind::Completions);
    assert_eq!(api_kind_for_path("/v1/embeddings?x=/chat/completions"), ApiKind::Embeddings);
}

#[test]
fn chat_completions_basic() {
    let body =
        r#"{"model":"llama","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":7}"#;
    let p = parse(CHAT, body).unwrap();
    assert_eq!(p.api, ApiKind::ChatCompletions);
    assert_eq!(p.model, "llama");
    assert_eq!(slice(body, &p.model_span), r#""llama""#);
    assert!(p.stream);
    assert_eq!(p.max_tokens, Some(7));
    assert_eq!(slice(body, &p.prefix_span), r#"[{"role":"user","content":"hi"}]"#);
    assert_eq!(p.prefix_bytes(body.as_bytes()), br#"[{"role":"user","content":"hi"}]"#);
    assert_eq!(p.prompt_token_ids, None);
    assert_eq!(p.cache_salt, None);
}

#[test]
fn chat_prefers_max_completion_tokens() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":9}"#;
    assert_eq!(parse(CHAT, body).unwrap().max_tokens, Some(9));
    let body = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":null,"max_tokens":5}"#;
    assert_eq!(parse(CHAT, body).unwrap().max_tokens, Some(5));
}

#[test]
fn chat_structured_content_and_tools_parse() {
    let body = r#"{
        "model": "vlm",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{\"a\": [1, 2]}"}}]}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    }"#;
    let p = parse(CHAT, body).unwrap();
    assert_eq!(p.model, "vlm");
    assert!(slice(body, &p.prefix_span).starts_with('['));
    assert!(slice(body, &p.prefix_span).ends_with(']'));
    assert!(slice(body, &p.prefix_span).contains("image_url"));
    assert!(!p.stream);
    assert_eq!(p.max_tokens, None);
}

#[test]
fn chat_message_errors() {
    assert_eq!(err(CHAT, r#"{"model":"m"}"#), "messages not found in request body");
    assert_eq!(err(CHAT, r#"{"model":"m","messages":[]}"#), "messages not found in request body");
    assert_eq!(err(CHAT, r#"{"model":"m","messages":[ ]}"#), "messages not found in request body");
    assert_eq!(err(CHAT, r#"{"model":"m","messages":null}"#), "messages not found in request body");
    assert_eq!(err(CHAT, r#"{"model":"m","messages":"hi"}"#), "messages must be an array");
    assert_eq!(err(CHAT, r#"{"model":"m","messages":{}}"#), "messages must be an array");
}

#[test]
fn model_errors() {
    let msgs = r#""messages":[{"role":"user","content":"x"}]"#;
    assert_eq!(err(CHAT, &format!("{{{msgs}}}")), "model not found in request body");
    assert_eq!(err(CHAT, &format!(r#"{{"model":null,{msgs}}}"#)), "model not found in request body");
    assert_eq!(err(CHAT, &format!(r#"{{"model":3,{msgs}}}"#)), "model not found in request body");
    assert_eq!(err(CHAT, &format!(r#"{{"model":["a"],{msgs}}}"#)), "model not found in request body");
    let surrogate = err(CHAT, &format!(r#"{{"model":"\ud800",{msgs}}}"#));
    assert!(surrogate.starts_with(r#"invalid model name "\ud800": "#), "{surrogate}");
}

#[test]
fn model_escapes_are_unescaped_and_span_covers_literal() {
    let body = r#"{"prompt":"x", "model" :  "org\/m\u00e9\"q\"\\n" }"#;
    let p = parse(COMPLETIONS, body).unwrap();
    assert_eq!(p.model, "org/mé\"q\"\\n");
    assert_eq!(slice(body, &p.model_span), r#""org\/m\u00e9\"q\"\\n""#);
    let body = "{\"model\":\"mod\u{e8}le-\u{1F600}\",\"prompt\":\"x\"}";
    let p = parse(COMPLETIONS, body).unwrap();
    assert_eq!(p.model, "mod\u{e8}le-\u{1F600}");
    assert_eq!(slice(body, &p.model_span), "\"mod\u{e8}le-\u{1F600}\"");
}

#[test]
fn duplicate_known_keys_are_rejected() {
    let m = err(COMPLETIONS, r#"{"model":"a","prompt":"x","model":"b"}"#);
    assert!(m.starts_with("error unmarshaling request body: duplicate field `model`"), "{m}");
    let m = err(CHAT, r#"{"model":"a","messages":[{}],"messages":[{}]}"#);
    assert!(m.contains("duplicate field `messages`"), "{m}");
    // Unknown fields are not ours to police.
    assert!(parse(COMPLETIONS, r#"{"model":"a","prompt":"x","user":"u","user":"v"}"#).is_ok());
}

#[test]
fn invalid_json_and_non_objects() {
    for body in ["", "   ", "{", r#"{"model":"a",}"#, r#"{"model":"a"} x"#, "nul", r#"{"model":"a\x"}"#] {
        let m = err(COMPLETIONS, body);
        assert!(m.starts_with("error unmarshaling request body: "), "{body:?}: {m}");
    }
    for body in ["[]", r#"["model","x"]"#, "\"s\"", "42", "null", " true "] {
        assert_eq!(err(COMPLETIONS, body), "request body must be a JSON object", "{body:?}");
    }
    let m = parse_request(COMPLETIONS, b"{\"model\":\"\xff\",\"prompt\":\"x\"}").unwrap_err().message;
    assert!(m.starts_with("error unmarshaling request body: "), "{m}");
}

#[test]
fn stream_flag() {
    let base = r#""model":"m","prompt":"p""#;
    assert!(!parse(COMPLETIONS, &format!("{{{base}}}")).unwrap().stream);
    assert!(!parse(COMPLETIONS, &format!(r#"{{{base},"stream":false}}"#)).unwrap().stream);
    assert!(!parse(COMPLETIONS, &format!(r#"{{{base},"stream":null}}"#)).unwrap().stream);
    assert!(parse(COMPLETIONS, &format!(r#"{{{base},"stream": true }}"#)).unwrap().stream);
    assert_eq!(err(COMPLETIONS, &format!(r#"{{{base},"stream":"true"}}"#)), "stream must be a boolean");
}

#[test]
fn max_tokens_types() {
    let base = r#""model":"m","prompt":"p""#;
    let max = |v: &str| parse(COMPLETIONS, &format!(r#"{{{base},"max_tokens":{v}}}"#));
    assert_eq!(max("0").unwrap().max_tokens, Some(0));
    assert_eq!(max("null").unwrap().max_tokens, None);
    assert_eq!(max("18446744073709551615").unwrap().max_tokens, Some(u64::MAX));
    for bad in ["-1", "1.5", "\"10\"", "true", "[1]", "1e3", "18446744073709551616"] {
        assert_eq!(max(bad).unwrap_err().message, "max_tokens must be a non-negative integer", "{bad}");
    }
    let chat = r#""model":"m","messages":[{"role":"user","content":"x"}]"#;
    let m = err(CHAT, &format!(r#"{{{chat},"max_completion_tokens":"x"}}"#));
    assert_eq!(m, "max_completion_tokens must be a non-negative integer");
    // Fields another API uses are ignored.
    let p = parse(CHAT, &format!(r#"{{{chat},"max_output_tokens":"x"}}"#)).unwrap();
    assert_eq!(p.max_tokens, None);
}

#[test]
fn completions_prompt_variants() {
    let p = parse(COMPLETIONS, r#"{"model":"m","prompt":"hello"}"#).unwrap();
    assert_eq!((p.api, p.prompt_token_ids), (ApiKind::Completions, None));
    let body = r#"{"model":"m","prompt":["a","b"],"max_tokens":3}"#;
    let p = parse(COMPLETIONS, body).unwrap();
    assert_eq!(slice(body, &p.prefix_span), r#"["a","b"]"#);
    assert_eq!(p.max_tokens, Some(3));
    let body = r#"{"model":"m","prompt":[1, 2, 3]}"#;
    let p = parse(COMPLETIONS, body).unwrap();
    assert_eq!(p.prompt_token_ids, Some(3));
    assert_eq!(slice(body, &p.prefix_span), "[1, 2, 3]");
    let p = parse(COMPLETIONS, r#"{"model":"m","prompt":[[1,2],[3,4,5]]}"#).unwrap();
    assert_eq!(p.prompt_token_ids, Some(5));
    // An unknown path is completions.
    assert_eq!(parse("/generate", r#"{"model":"m","prompt":"x"}"#).unwrap().api, ApiKind::Completions);
}

#[test]
fn completions_prompt_errors() {
    for body in [
        r#"{"model":"m"}"#,
        r#"{"model":"m","prompt":""}"#,
        r#"{"model":"m","prompt":[]}"#,
        r#"{"model":"m","prompt":[[]]}"#,
        r#"{"model":"m","prompt":null}"#,
    ] {
        assert_eq!(err(COMPLETIONS, body), "prompt not found in request body", "{body}");
    }
    let m = err(COMPLETIONS, r#"{"model":"m","prompt":5}"#);
    assert_eq!(m, "prompt must be a string, an array of strings, or an array of token IDs");
    assert_eq!(err(COMPLETIONS, r#"{"model":"m","prompt":["a",1]}"#), "prompt: mixed types in array");
    assert!(err(COMPLETIONS, r#"{"model":"m","prompt":[-1]}"#).starts_with("prompt: array elements"));
    // The model check comes first, as in the Go EPP.
    assert_eq!(err(COMPLETIONS, r#"{"prompt":""}"#), "model not found in request body");
}

#[test]
fn embeddings() {
    let body = r#"{"model":"e","input":["x","y"]}"#;
    let p = parse("/v1/embeddings", body).unwrap();
    assert_eq!(p.api, ApiKind::Embeddings);
    assert_eq!(slice(body, &p.prefix_span), r#"["x","y"]"#);
    let p = parse("/v1/embeddings", r#"{"model":"e","input":[[1],[2,3]],"max_tokens":"ignored"}"#).unwrap();
    assert_eq!((p.prompt_token_ids, p.max_tokens), (Some(3), None));
    assert_eq!(err("/v1/embeddings", r#"{"model":"e","input":""}"#), "input not found in request body");
    assert_eq!(err("/v1/embeddings", r#"{"model":"e","prompt":"x"}"#), "input not found in request body");
    let m = err("/v1/embeddings", r#"{"model":"e","input":{}}"#);
    assert_eq!(m, "input must be a string, an array of strings, or an array of token IDs");
}

#[test]
fn responses() {
    let body = r#"{"model":"r","instructions":"sys","input":"hello","max_output_tokens":64,"stream":true}"#;
    let p = parse("/v1/responses", body).unwrap();
    assert_eq!(p.api, ApiKind::Responses);
    assert_eq!(slice(body, &p.prefix_span), r#""hello""#);
    assert_eq!((p.max_tokens, p.stream), (Some(64), true));
    let body = r#"{"model":"r","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}"#;
    let p = parse("/v1/responses", body).unwrap();
    assert!(slice(body, &p.prefix_span).contains("input_text"));
    assert_eq!(err("/v1/responses", r#"{"model":"r"}"#), "input not found in request body");
    assert_eq!(err("/v1/responses", r#"{"model":"r","input":[]}"#), "input not found in request body");
    assert_eq!(err("/v1/responses", r#"{"model":"r","input":7}"#), "input must be a string or an array");
    let m = err("/v1/responses", r#"{"model":"r","input":"x","max_output_tokens":-2}"#);
    assert_eq!(m, "max_output_tokens must be a non-negative integer");
}

#[test]
fn conversations() {
    let body = r#"{"model":"c","items":[{"type":"message","role":"user","content":"hi"}]}"#;
    let p = parse("/v1/conversations", body).unwrap();
    assert_eq!(p.api, ApiKind::Conversations);
    assert_eq!(slice(body, &p.prefix_span), r#"[{"type":"message","role":"user","content":"hi"}]"#);
    assert_eq!(err("/v1/conversations", r#"{"model":"c"}"#), "items not found in request body");
    assert_eq!(err("/v1/conversations", r#"{"model":"c","items":[]}"#), "items not found in request body");
    assert_eq!(err("/v1/conversations", r#"{"model":"c","items":{}}"#), "items must be an array");
}

#[test]
fn cache_salt() {
    let p = parse(COMPLETIONS, r#"{"model":"m","prompt":"x","cache_salt":"s\u0041lt"}"#).unwrap();
    assert_eq!(p.cache_salt.as_deref(), Some("sAlt"));
    let p = parse(COMPLETIONS, r#"{"model":"m","prompt":"x","cache_salt":null}"#).unwrap();
    assert_eq!(p.cache_salt, None);
    assert_eq!(
        err(COMPLETIONS, r#"{"model":"m","prompt":"x","cache_salt":1}"#),
        "cache_salt must be a string"
    );
}

#[test]
fn whitespace_and_unicode_everywhere() {
    let body = "\r\n\t {\n \"messages\" :\n [ {\"role\":\"user\",\"content\":\"\u{4f60}\u{597d} \\ud83d\\ude00\"} ] ,\n \"model\"\t:\t\"m\"\n}\n ";
    let p = parse(CHAT, body).unwrap();
    assert_eq!(p.model, "m");
    assert_eq!(slice(body, &p.model_span), "\"m\"");
    assert!(slice(body, &p.prefix_span).starts_with("[ {"));
    assert!(slice(body, &p.prefix_span).ends_with("} ]"));
}

#[test]
fn huge_body() {
    let text = "Lorem ipsum \\\"dolor\\\" sit am\u{e9}t \u{1F600}\\n".repeat(20_000);
    let body =
        format!(r#"{{"model":"big","messages":[{{"role":"user","content":"{text}"}}],"max_tokens":1}}"#);
    assert!(body.len() > 700_000);
    let p = parse(CHAT, &body).unwrap();
    assert_eq!(p.model, "big");
    assert_eq!(p.prefix_span.len(), body.len() - r#"{"model":"big","messages":,"max_tokens":1}"#.len());
    let ids = vec!["12345"; 100_000].join(",");
    let p = parse(COMPLETIONS, &format!(r#"{{"model":"m","prompt":[{ids}]}}"#)).unwrap();
    assert_eq!(p.prompt_token_ids, Some(100_000));
}

#[test]
fn deep_nesting_does_not_crash() {
    // serde_json skips unknown values with an explicit stack, so depth there costs memory, not stack.
    let deep =
        format!(r#"{{"model":"m","prompt":"x","extra":{}{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    assert!(parse(COMPLETIONS, &deep).is_ok());
    let deep = format!(r#"{{"model":"m","prompt":{}{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    assert!(err(COMPLETIONS, &deep).starts_with("prompt: array elements"));
}
