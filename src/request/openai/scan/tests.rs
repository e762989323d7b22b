use super::*;

/// What serde_json finds in the same body, or `None` where it refuses it.
fn by_serde(body: &str) -> Option<FieldValues<'_>> {
    let fields: super::super::RequestFields<'_> = serde_json::from_str(body).ok()?;
    Some(fields.values())
}

/// The walk accepts `body` and agrees with serde_json.
fn agrees(body: &str) -> FieldValues<'_> {
    let walked = scan_fields(body.as_bytes()).unwrap_or_else(|| panic!("the walk declined {body:?}"));
    assert_eq!(Some(&walked), by_serde(body).as_ref(), "{body}");
    walked
}

/// The walk leaves `body` to serde_json.
fn declines(body: &[u8]) {
    assert_eq!(scan_fields(body), None, "{}", String::from_utf8_lossy(body));
}

#[test]
fn finds_the_fields_routing_reads() {
    let body = r#" { "model" : "m\u00e9" , "messages":[{"role":"user","content":"a\"b\\c\/\n\u12aF"}],
        "stream":true,"max_tokens":7,"temperature":-1.5e-3,"tools":null,"x":{"y":[[],{}]},"cache_salt":"s"} "#;
    let values = agrees(body);
    assert_eq!(values.get(Field::Model), Some(r#""m\u00e9""#));
    assert_eq!(values.get(Field::Stream), Some("true"));
    assert_eq!(values.get(Field::MaxTokens), Some("7"));
    assert_eq!(values.get(Field::CacheSalt), Some(r#""s""#));
    assert!(values.get(Field::Messages).is_some_and(|m| m.starts_with('[') && m.ends_with(']')));
    assert_eq!(values.get(Field::Prompt), None);
}

#[test]
fn null_reads_as_absent_and_unknown_fields_may_repeat() {
    let values = agrees(r#"{"model":null,"stream":null,"x":1,"x":2}"#);
    assert_eq!(values, FieldValues::default());
    agrees("{}");
    agrees(r#"{"prompt":[1,2,[3]],"a":[0,-0,0.5,1E+2,2e-0,true,false,null,"",{"k":{}}]}"#);
}

#[test]
fn long_strings_across_blocks() {
    // Escapes and quotes on every side of a 64-byte edge, and non-ASCII text.
    for pad in 0..140 {
        let text = format!("{}\\\\\\\"\\u00e9é中\\n{}", "a".repeat(pad), "b".repeat(pad % 70));
        let body = format!(r#"{{"model":"m","prompt":"{text}"}}"#);
        let values = agrees(&body);
        assert_eq!(values.get(Field::Prompt), Some(format!(r#""{text}""#).as_str()));
    }
}

#[test]
fn declines_what_serde_json_refuses() {
    for body in [
        &br#"{"model":"m""#[..],
        br#"{"model":"m",}"#,
        br#"{"model":"m"} x"#,
        br#"{"model":"a\qb"}"#,
        br#"{"model":"\u12G4"}"#,
        br#"{"model":"\u12"}"#,
        b"{\"model\":\"a\x01b\"}",
        b"{\"model\":\"a\nb\"}",
        br#"{"model":01}"#,
        br#"{"model":1.}"#,
        br#"{"model":1e}"#,
        br#"{"model":-}"#,
        br#"{"model":+1}"#,
        br#"{"model":tru}"#,
        br#"{"model":[1,]}"#,
        br#"{"model":{"a"}}"#,
        br#"{"model":{"a":1,}}"#,
        br#"{"model":[}"#,
        br#"{"model":"m","model":"n"}"#,
        br#"{"model":"m","mod\u0065l":"n"}"#,
        b"{\"model\":\"\xff\"}",
        b"{\"model\":\x0c1}",
        br#"{"model":"unterminated\"}"#,
        br#"{"a":"ends in a backslash\"#,
    ] {
        declines(body);
    }
}

#[test]
fn deep_nesting_is_left_to_serde_json() {
    let deep = |n: usize| format!(r#"{{"model":"m","x":{}{}}}"#, "[".repeat(n), "]".repeat(n));
    agrees(&deep(MAX_DEPTH));
    declines(deep(MAX_DEPTH + 1).as_bytes());
    assert!(by_serde(&deep(MAX_DEPTH + 1)).is_some(), "serde_json skips any depth");
}

#[test]
fn every_field_lands_in_its_own_slot_on_both_paths() {
    // Each field's value names the field, so a slot filled from the wrong key shows.
    let body = format!(
        "{{{}}}",
        FIELD_NAMES.iter().map(|name| format!(r#""{name}":"{name}""#)).collect::<Vec<_>>().join(",")
    );
    let values = agrees(&body);
    for (slot, name) in FIELD_NAMES.iter().enumerate() {
        assert_eq!(values.0[slot], Some(format!(r#""{name}""#).as_str()), "slot {slot}");
    }
    for field in [Field::Model, Field::MaxOutputTokens, Field::Items, Field::CacheSalt] {
        assert_eq!(values.get(field), Some(format!(r#""{}""#, FIELD_NAMES[field as usize]).as_str()));
    }
}
