//! Pure builders for the `ProcessingResponse` messages epp sends to Envoy. No I/O and no state: the
//! stream handler decides *what* to say, these functions say it in Envoy's protobuf.

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderValue, HeaderValueOption,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, common_response::ResponseStatus, processing_response::Response, BodyMutation,
    BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse, ProcessingResponse,
    StreamedBodyResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

pub use crate::director::RoutingMutation;
use crate::error::RequestError;
use crate::wire::{DESTINATION_KEY, DESTINATION_NAMESPACE, DROPPED_REASON_HEADER, SCORES_KEY};

/// Envoy's recommended limit for one streamed body chunk is 64 KiB; the Go EPP uses 62,000 bytes.
pub const BODY_CHUNK_LIMIT: usize = 62_000;

fn header(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: String::new(),
            raw_value: value.as_bytes().to_vec(),
        }),
        // Overwrite, never append: a client-sent copy of a routing header must not survive next to ours.
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

fn string_value(s: &str) -> Value {
    Value { kind: Some(Kind::StringValue(s.to_string())) }
}

/// `{"envoy.lb": {"x-gateway-destination-endpoint": dest, ...}}`.
pub fn routing_metadata(mutation: &RoutingMutation) -> Struct {
    let mut lb = HashMap::new();
    lb.insert(DESTINATION_KEY.to_string(), string_value(&mutation.destination));
    if let Some(scores) = &mutation.scores {
        lb.insert(SCORES_KEY.to_string(), string_value(scores));
    }
    let mut fields = HashMap::new();
    fields.insert(
        DESTINATION_NAMESPACE.to_string(),
        Value { kind: Some(Kind::StructValue(Struct { fields: lb })) },
    );
    Struct { fields }
}

fn routing_common_response(mutation: &RoutingMutation, body: Option<Vec<u8>>) -> CommonResponse {
    let mut set = Vec::with_capacity(2 + mutation.set_headers.len());
    set.push(header(DESTINATION_KEY, &mutation.destination));
    set.push(header("content-length", &mutation.content_length.to_string()));
    set.extend(mutation.set_headers.iter().map(|(k, v)| header(k, v)));
    CommonResponse {
        status: ResponseStatus::Continue as i32,
        header_mutation: Some(HeaderMutation {
            set_headers: set,
            remove_headers: mutation.remove_headers.clone(),
        }),
        body_mutation: body.map(|b| BodyMutation { mutation: Some(Mutation::Body(b)) }),
        trailers: None,
        clear_route_cache: true,
    }
}

/// FULL_DUPLEX_STREAMED (and header-only requests): the deferred answer to the request-headers message,
/// carrying the destination header, `Content-Length`, removals and the `envoy.lb` metadata.
pub fn routed_request_headers(mutation: &RoutingMutation) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::RequestHeaders(HeadersResponse {
            response: Some(routing_common_response(mutation, None)),
        })),
        dynamic_metadata: Some(routing_metadata(mutation)),
        ..Default::default()
    }
}

/// BUFFERED: the answer to the whole-body message, carrying the routing mutation and, only when the body
/// changed, the new body.
pub fn routed_request_body(mutation: &RoutingMutation, new_body: Option<Vec<u8>>) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::RequestBody(BodyResponse {
            response: Some(routing_common_response(mutation, new_body)),
        })),
        dynamic_metadata: Some(routing_metadata(mutation)),
        ..Default::default()
    }
}

/// An empty CONTINUE answer to a request-headers message (BUFFERED mode: Envoy waits for it before it
/// sends the body).
pub fn continue_request_headers() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::RequestHeaders(HeadersResponse {
            response: Some(CommonResponse::default()),
        })),
        ..Default::default()
    }
}

fn streamed_chunk(chunk: &[u8], end_of_stream: bool, request: bool) -> ProcessingResponse {
    let body = BodyResponse {
        response: Some(CommonResponse {
            body_mutation: Some(BodyMutation {
                mutation: Some(Mutation::StreamedResponse(StreamedBodyResponse {
                    body: chunk.to_vec(),
                    end_of_stream,
                    ..Default::default()
                })),
            }),
            ..Default::default()
        }),
    };
    let response = if request { Response::RequestBody(body) } else { Response::ResponseBody(body) };
    ProcessingResponse { response: Some(response), ..Default::default() }
}

/// FULL_DUPLEX_STREAMED: `body` as streamed body responses of at most [`BODY_CHUNK_LIMIT`] bytes, the last
/// one carrying `end_of_stream`. An empty body yields one empty chunk.
pub fn streamed_body(body: &[u8], end_of_stream: bool, request: bool) -> Vec<ProcessingResponse> {
    if body.is_empty() {
        return vec![streamed_chunk(&[], end_of_stream, request)];
    }
    let n = body.len().div_ceil(BODY_CHUNK_LIMIT);
    body.chunks(BODY_CHUNK_LIMIT)
        .enumerate()
        .map(|(i, c)| streamed_chunk(c, end_of_stream && i + 1 == n, request))
        .collect()
}

/// A plain CONTINUE answer to a response body chunk (non-duplex response modes), optionally replacing it.
pub fn continue_response_body(replacement: Option<Vec<u8>>) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::ResponseBody(BodyResponse {
            response: Some(CommonResponse {
                body_mutation: replacement.map(|b| BodyMutation { mutation: Some(Mutation::Body(b)) }),
                ..Default::default()
            }),
        })),
        ..Default::default()
    }
}

/// The answer to the response-headers message, setting `set_headers` (from response hooks).
pub fn response_headers(set_headers: &[(String, String)]) -> ProcessingResponse {
    let header_mutation = if set_headers.is_empty() {
        None
    } else {
        Some(HeaderMutation {
            set_headers: set_headers.iter().map(|(k, v)| header(k, v)).collect(),
            remove_headers: Vec::new(),
        })
    };
    ProcessingResponse {
        response: Some(Response::ResponseHeaders(HeadersResponse {
            response: Some(CommonResponse { header_mutation, ..Default::default() }),
        })),
        ..Default::default()
    }
}

/// An empty answer to a trailers message.
pub fn trailers(request: bool) -> ProcessingResponse {
    let t = TrailersResponse::default();
    let response = if request { Response::RequestTrailers(t) } else { Response::ResponseTrailers(t) };
    ProcessingResponse { response: Some(response), ..Default::default() }
}

/// A local reply ending the request: status from the error code, body `inference error: <Code> - <msg>`.
pub fn immediate(error: &RequestError) -> ProcessingResponse {
    let headers = error.dropped.map(|reason| HeaderMutation {
        set_headers: vec![header(DROPPED_REASON_HEADER, reason.as_str())],
        remove_headers: Vec::new(),
    });
    ProcessingResponse {
        response: Some(Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus { code: i32::from(error.code.http_status()) }),
            headers,
            body: error.to_string().into_bytes(),
            details: format!("epp_{}", error.code.as_str()),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutation() -> RoutingMutation {
        RoutingMutation {
            destination: "10.0.0.1:8000".into(),
            set_headers: vec![("x-request-id".into(), "abc".into())],
            remove_headers: vec!["x-gateway-destination-endpoint-subset".into()],
            content_length: 42,
            scores: None,
        }
    }

    fn set_headers_of(r: &ProcessingResponse) -> Vec<(String, String)> {
        let common = match &r.response {
            Some(Response::RequestHeaders(h)) => h.response.clone(),
            Some(Response::RequestBody(b)) => b.response.clone(),
            _ => None,
        };
        common
            .and_then(|c| c.header_mutation)
            .map(|m| {
                m.set_headers
                    .into_iter()
                    .filter_map(|h| h.header)
                    .map(|h| (h.key, String::from_utf8_lossy(&h.raw_value).into_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn header_and_metadata_carry_the_same_destination() {
        let r = routed_request_headers(&mutation());
        let headers = set_headers_of(&r);
        assert!(headers.contains(&(DESTINATION_KEY.to_string(), "10.0.0.1:8000".to_string())));
        assert!(headers.contains(&("content-length".to_string(), "42".to_string())));
        let md = r.dynamic_metadata.unwrap();
        let Some(Kind::StructValue(lb)) = &md.fields[DESTINATION_NAMESPACE].kind else {
            panic!("no envoy.lb")
        };
        assert_eq!(lb.fields[DESTINATION_KEY].kind, Some(Kind::StringValue("10.0.0.1:8000".into())));
    }

    #[test]
    fn body_is_chunked_at_the_limit_with_eos_on_the_last() {
        let body = vec![b'a'; BODY_CHUNK_LIMIT * 2 + 5];
        let chunks = streamed_body(&body, true, true);
        assert_eq!(chunks.len(), 3);
        let eos: Vec<bool> = chunks
            .iter()
            .map(|c| match &c.response {
                Some(Response::RequestBody(b)) => match &b.response.as_ref().unwrap().body_mutation {
                    Some(BodyMutation { mutation: Some(Mutation::StreamedResponse(s)) }) => s.end_of_stream,
                    _ => panic!("not streamed"),
                },
                _ => panic!("not a body"),
            })
            .collect();
        assert_eq!(eos, vec![false, false, true]);
        assert_eq!(streamed_body(&[], true, true).len(), 1);
    }

    #[test]
    fn immediate_response_has_status_and_body() {
        let r = immediate(&RequestError::bad_request("model not found in request body"));
        let Some(Response::ImmediateResponse(i)) = r.response else { panic!() };
        assert_eq!(i.status.unwrap().code, 400);
        assert_eq!(i.body, b"inference error: BadRequest - model not found in request body");
        assert!(i.headers.is_none(), "no drop reason on a client error");
    }

    #[test]
    fn a_dropped_request_says_why() {
        let error = RequestError::unavailable("no endpoints").dropped(crate::error::DropReason::NoEndpoints);
        let Some(Response::ImmediateResponse(i)) = immediate(&error).response else { panic!() };
        let set = i.headers.unwrap().set_headers;
        let value = set.iter().find(|h| h.header.as_ref().is_some_and(|h| h.key == DROPPED_REASON_HEADER));
        let raw = value.and_then(|h| h.header.as_ref()).map(|h| h.raw_value.clone()).unwrap_or_default();
        assert_eq!(raw, b"rejected-no-endpoints");
    }
}
