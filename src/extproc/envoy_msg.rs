//! Reading what epp needs out of Envoy's request messages: headers, metadata hints, processing modes.

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, Metadata};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::google::protobuf::value::Kind;

use crate::datastore::{InvalidSubsetEntry, SubsetHint};
use crate::request::Headers;
use crate::wire::{DESTINATION_NAMESPACE, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE};

/// Takes Envoy's header map without copying it: names are lower-cased in place; the value is `raw_value`
/// when set (replacing bytes that are not UTF-8, as Envoy's never are), else `value`.
pub fn headers_from(map: Option<HeaderMap>) -> Headers {
    let Some(map) = map else { return Headers::new() };
    let mut headers = Headers::with_capacity(map.headers.len());
    for h in map.headers {
        let value = if h.raw_value.is_empty() {
            h.value
        } else {
            String::from_utf8(h.raw_value)
                .unwrap_or_else(|invalid| String::from_utf8_lossy(invalid.as_bytes()).into_owned())
        };
        headers.push_owned(h.key, value);
    }
    headers
}

/// The entries of a list (or comma-separated string) value. A list element that is not a string keeps a
/// textual form (`123`, `true`, `null`, `<list>`), so that it fails address parsing and is reported rather
/// than silently dropped.
fn list_of_strings(kind: Option<&Kind>) -> Option<Vec<String>> {
    match kind? {
        Kind::ListValue(list) => Some(
            list.values
                .iter()
                .map(|v| match &v.kind {
                    Some(Kind::StringValue(s)) => s.clone(),
                    Some(Kind::NumberValue(n)) => n.to_string(),
                    Some(Kind::BoolValue(b)) => b.to_string(),
                    Some(Kind::NullValue(_)) | None => "null".to_string(),
                    Some(Kind::ListValue(_)) => "<list>".to_string(),
                    Some(Kind::StructValue(_)) => "<struct>".to_string(),
                })
                .collect(),
        ),
        // Tolerate a single comma-separated string.
        Kind::StringValue(s) => {
            Some(s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect())
        }
        _ => None,
    }
}

/// The subset hint, if the gateway sent one, parsed into addresses; a malformed entry is an error (the
/// request is answered 400). A value that is neither a list nor a string lists no endpoint.
pub fn subset_hint(md: Option<&Metadata>) -> Option<Result<SubsetHint, InvalidSubsetEntry>> {
    let ns = md?.filter_metadata.get(SUBSET_NAMESPACE)?;
    let value = ns.fields.get(SUBSET_KEY)?;
    let entries = list_of_strings(value.kind.as_ref()).unwrap_or_default();
    Some(SubsetHint::parse(entries.iter().map(String::as_str)))
}

/// The endpoint Envoy reports it served the request from.
pub fn served_endpoint(md: Option<&Metadata>) -> Option<String> {
    let ns = md?.filter_metadata.get(DESTINATION_NAMESPACE)?;
    match ns.fields.get(SERVED_KEY)?.kind.as_ref()? {
        Kind::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

/// The body modes Envoy says it uses (sent in the first message of a stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyModes {
    pub request: BodySendMode,
    pub response: BodySendMode,
}

impl Default for BodyModes {
    /// Without a protocol configuration, assume the mode the EPP protocol mandates.
    fn default() -> Self {
        Self { request: BodySendMode::FullDuplexStreamed, response: BodySendMode::FullDuplexStreamed }
    }
}

pub fn body_mode(raw: i32) -> BodySendMode {
    BodySendMode::try_from(raw).unwrap_or(BodySendMode::None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::SubsetEntry;
    use envoy_types::pb::envoy::config::core::v3::HeaderValue;
    use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};
    use std::collections::HashMap;

    #[test]
    fn raw_value_wins_and_names_are_lowercased() {
        let map = HeaderMap {
            headers: vec![
                HeaderValue { key: "X-Request-Id".into(), value: "".into(), raw_value: b"abc".to_vec() },
                HeaderValue { key: ":path".into(), value: "/v1/completions".into(), raw_value: vec![] },
            ],
        };
        let h = headers_from(Some(map));
        assert_eq!(h.get("x-request-id"), Some("abc"));
        assert_eq!(h.get(":path"), Some("/v1/completions"));
    }

    #[test]
    fn a_raw_value_that_is_not_utf8_is_replaced_not_refused() {
        let map = HeaderMap {
            headers: vec![HeaderValue { key: "X-Odd".into(), value: "".into(), raw_value: vec![b'a', 0xff] }],
        };
        assert_eq!(headers_from(Some(map)).get("x-odd"), Some("a\u{fffd}"));
        assert!(headers_from(None).is_empty());
    }

    #[test]
    fn subset_hint_list_and_empty() {
        let list = |items: &[&str]| Value {
            kind: Some(Kind::ListValue(ListValue {
                values: items
                    .iter()
                    .map(|s| Value { kind: Some(Kind::StringValue(s.to_string())) })
                    .collect(),
            })),
        };
        let md = |v: Value| Metadata {
            filter_metadata: HashMap::from([(
                SUBSET_NAMESPACE.to_string(),
                Struct { fields: HashMap::from([(SUBSET_KEY.to_string(), v)]) },
            )]),
            ..Default::default()
        };
        assert_eq!(
            subset_hint(Some(&md(list(&["1.2.3.4:80"])))),
            Some(Ok(SubsetHint::Only(vec![SubsetEntry::Exact("1.2.3.4:80".parse().unwrap())])))
        );
        assert_eq!(subset_hint(Some(&md(list(&[])))), Some(Ok(SubsetHint::Only(vec![]))));
        assert_eq!(subset_hint(None), None);
        let bad = subset_hint(Some(&md(list(&["1.2.3.4:80", "pod-a"])))).unwrap().unwrap_err();
        assert_eq!(bad.entry, "pod-a");
        let number = Value {
            kind: Some(Kind::ListValue(ListValue {
                values: vec![Value { kind: Some(Kind::NumberValue(123.0)) }],
            })),
        };
        assert_eq!(subset_hint(Some(&md(number))).unwrap().unwrap_err().entry, "123");
    }
}
