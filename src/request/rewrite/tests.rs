use super::*;
use crate::request::parse_request;

fn rewrite(chunk: &str, from: &str, to: &str) -> Option<String> {
    rewrite_response_model(chunk.as_bytes(), from, to).map(|v| String::from_utf8(v).unwrap())
}

#[test]
fn escaping_matches_serde_json() {
    let mut all_ascii = String::new();
    for c in 0u8..=127 {
        all_ascii.push(c as char);
    }
    for s in ["", "plain", "a\"b\\c/d", "tab\there\nnl\r\u{8}\u{c}\u{0}\u{1f}\u{7f}", "é中😀", &all_ascii]
    {
        let expected = serde_json::to_string(s).unwrap();
        let mut out = Vec::new();
        push_escaped(&mut out, s);
        assert_eq!(format!("\"{}\"", String::from_utf8(out).unwrap()), expected);
        assert_eq!(escaped_len(s) + 2, expected.len());
        assert_eq!(format!("\"{}\"", escape(s)), expected);
    }
    assert!(matches!(escape("meta-llama/Llama-3.1-8B"), Cow::Borrowed(_)));
}

#[test]
fn splice_replaces_only_the_literal() {
    let body = br#"{"model" : "old\/m", "prompt":"keep \"model\":\"old\/m\" here","n":12345678901234567890}"#;
    let p = parse_request("/v1/completions", body).unwrap();
    let out = splice_model(body, p.model_span.clone(), "new-model");
    let expected =
        br#"{"model" : "new-model", "prompt":"keep \"model\":\"old\/m\" here","n":12345678901234567890}"#;
    assert_eq!(out, expected.to_vec());
    assert_eq!(out.capacity(), out.len());
}

#[test]
fn splice_output_reparses_with_new_model_and_keeps_every_other_byte() {
    let bodies = [
        r#"{"model":"a","messages":[{"role":"user","content":"hi"}]}"#,
        "{\n  \"messages\": [{\"role\":\"user\",\"content\":\"\u{4f60}\"}],\n  \"model\":\t\"org/m\u{e9}\" ,\"stream\":true}",
        r#"{"stream":false,"model":"x\u0041","messages":[{"role":"user","content":[{"type":"text","text":"t"}]}]}"#,
        r#"{"model":"","messages":[{}],"max_tokens":5}"#,
    ];
    let new_models = ["b", "", "with \"quotes\" and \\ and \n", "unicode é 😀", "ctl\u{1}\u{1f}", "a/b:c@d"];
    for body in bodies {
        let before = parse_request("/v1/chat/completions", body.as_bytes()).unwrap();
        for new_model in new_models {
            let out = splice_model(body.as_bytes(), before.model_span.clone(), new_model);
            let after = parse_request("/v1/chat/completions", &out).unwrap();
            assert_eq!(after.model, new_model);
            assert_eq!(after.stream, before.stream);
            assert_eq!(after.max_tokens, before.max_tokens);
            assert_eq!(after.prefix_bytes(&out), before.prefix_bytes(body.as_bytes()));
            // Bytes before and after the literal are untouched.
            assert_eq!(&out[..before.model_span.start], &body.as_bytes()[..before.model_span.start]);
            assert_eq!(&out[after.model_span.end..], &body.as_bytes()[before.model_span.end..]);
            assert_eq!(after.model_span.start, before.model_span.start);
            let literal = &out[after.model_span.clone()];
            assert_eq!(literal, serde_json::to_string(new_model).unwrap().as_bytes());
            assert_eq!(out.capacity(), out.len(), "preallocated exactly");
        }
    }
}

#[test]
fn splice_with_bad_span_returns_body_unchanged() {
    let body = br#"{"model":"a"}"#;
    assert_eq!(splice_model(body, 5..100, "x"), body.to_vec());
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 9..5;
    assert_eq!(splice_model(body, reversed, "x"), body.to_vec());
}

#[test]
fn response_json_rewrite() {
    let body = r#"{"id":"c1","object":"chat.completion","model":"target","choices":[]}"#;
    assert_eq!(
        rewrite(body, "target", "incoming").unwrap(),
        r#"{"id":"c1","object":"chat.completion","model":"incoming","choices":[]}"#
    );
    assert_eq!(rewrite(body, "other", "incoming"), None);
    assert_eq!(rewrite(body, "target", "target"), None);
    assert_eq!(rewrite(body, "targ", "x"), None, "a prefix of the name is not the name");
}

#[test]
fn whitespace_variants() {
    for (chunk, expected) in [
        (r#"{"model": "t"}"#, r#"{"model": "new"}"#),
        (r#"{"model" :  "t"}"#, r#"{"model" :  "new"}"#),
        ("{\"model\"\n:\t\"t\"}", "{\"model\"\n:\t\"new\"}"),
    ] {
        assert_eq!(rewrite(chunk, "t", "new").unwrap(), expected);
    }
}

#[test]
fn sse_chunk_with_several_events_and_done() {
    let chunk = "data: {\"model\":\"t\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
                 data: {\"model\":\"t\",\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n";
    let out = rewrite(chunk, "t", "in").unwrap();
    assert_eq!(out, chunk.replace("\"model\":\"t\"", "\"model\":\"in\""));
    assert!(out.ends_with("data: [DONE]\n\n"));
    assert_eq!(rewrite("data: [DONE]\n\n", "t", "in"), None);
    assert_eq!(rewrite("", "t", "in"), None);
}

#[test]
fn model_text_inside_strings_is_left_alone() {
    let chunk = r#"{"content":"the \"model\":\"t\" field","model":"t"}"#;
    assert_eq!(rewrite(chunk, "t", "n").unwrap(), r#"{"content":"the \"model\":\"t\" field","model":"n"}"#);
}

#[test]
fn names_needing_escapes() {
    let chunk = r#"{"model":"a\"b"}"#;
    assert_eq!(rewrite(chunk, "a\"b", "c\\d").unwrap(), r#"{"model":"c\\d"}"#);
    let chunk = "{\"model\":\"caf\u{e9}\"}";
    assert_eq!(rewrite(chunk, "caf\u{e9}", "x").unwrap(), r#"{"model":"x"}"#);
}

#[test]
fn truncated_or_garbage_chunks_do_not_panic() {
    for chunk in ["\"model\"", "\"model\":", "\"model\": \"t", "\\\"model\":\"t\"", "\u{0}\"model\"\"t\""] {
        assert_eq!(rewrite(chunk, "t", "n"), None, "{chunk:?}");
    }
    let garbage: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    assert_eq!(rewrite_response_model(&garbage, "t", "n"), None);
    // A split pair (documented limitation): neither half is rewritten.
    assert_eq!(rewrite("{\"model\":\"ta", "target", "n"), None);
}
