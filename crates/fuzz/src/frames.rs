//! The byte format the ext_proc stream target reads: a sequence of frames, each turned into one message
//! Envoy could send (or one that fails to decode, as tonic reports it).
//!
//! Structured frames (headers, bodies, trailers, a protocol configuration, metadata) let the fuzzer reach
//! the routing and response states with a few mutations; the raw frame hands arbitrary bytes to prost, as a
//! broken peer would. [`Frames`] writes the same format, for the seeds.
//!
//! A frame is `kind: u8, len: u16 LE, payload[len]` (a short input takes what is left). Kinds, modulo 9:
//! 0 protocol configuration for the next message (`[request mode, response mode]`); 1 request headers and
//! 4 response headers (`[flags]` then `name:value` lines; flag 1: end of stream, flag 2: values in the
//! `value` string rather than `raw_value`); 2 request body and 5 response body (`[flags]` then the bytes);
//! 3 request trailers; 6 response trailers; 7 a raw protobuf `ProcessingRequest`; 8 metadata for the next
//! message (`[flags]` then comma-separated entries: the subset hint, or with flag 2 the served endpoint;
//! flag 1 adds a number where a string belongs).

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request as Msg, HttpBody, HttpHeaders, HttpTrailers, ProcessingRequest,
    ProtocolConfiguration,
};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use epp::wire::{DESTINATION_NAMESPACE, SERVED_KEY, SUBSET_KEY, SUBSET_NAMESPACE};
use prost::Message;
use tonic::Status;

pub const CONFIG: u8 = 0;
pub const REQUEST_HEADERS: u8 = 1;
pub const REQUEST_BODY: u8 = 2;
pub const REQUEST_TRAILERS: u8 = 3;
pub const RESPONSE_HEADERS: u8 = 4;
pub const RESPONSE_BODY: u8 = 5;
pub const RESPONSE_TRAILERS: u8 = 6;
pub const RAW: u8 = 7;
pub const METADATA: u8 = 8;
const KINDS: u8 = 9;

pub const END_OF_STREAM: u8 = 1;
pub const STRING_VALUES: u8 = 2;
pub const NON_STRING_ENTRY: u8 = 1;
pub const SERVED: u8 = 2;

/// The messages a frame sequence stands for, in order. After a raw frame that does not decode the
/// sequence ends, as tonic ends a stream after a decode error.
pub fn decode(mut data: &[u8]) -> Vec<Result<ProcessingRequest, Status>> {
    let mut out = Vec::new();
    let (mut config, mut metadata) = (None, None);
    while let Some((&kind, rest)) = data.split_first() {
        let (len, rest) = match rest {
            [lo, hi, rest @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])), rest),
            _ => (rest.len(), &[][..]),
        };
        let (payload, rest) = rest.split_at(len.min(rest.len()));
        data = rest;
        let flags = payload.first().copied().unwrap_or(0);
        let tail = payload.get(1..).unwrap_or(&[]);
        let eos = flags & END_OF_STREAM != 0;
        let request = match kind % KINDS {
            CONFIG => {
                let mode = |i: usize| i32::from(payload.get(i).map_or(0, |m| m % 6));
                config = Some(ProtocolConfiguration {
                    request_body_mode: mode(0),
                    response_body_mode: mode(1),
                    ..Default::default()
                });
                continue;
            }
            METADATA => {
                metadata = Some(metadata_of(flags, tail));
                continue;
            }
            RAW => match ProcessingRequest::decode(payload) {
                Ok(m) => {
                    out.push(Ok(m));
                    continue;
                }
                Err(e) => {
                    // tonic's ProstDecoder reports a decode error as Internal with prost's message.
                    out.push(Err(Status::internal(e.to_string())));
                    break;
                }
            },
            REQUEST_HEADERS => Msg::RequestHeaders(headers_of(flags, tail)),
            RESPONSE_HEADERS => Msg::ResponseHeaders(headers_of(flags, tail)),
            REQUEST_BODY => {
                Msg::RequestBody(HttpBody { body: tail.to_vec(), end_of_stream: eos, ..Default::default() })
            }
            RESPONSE_BODY => {
                Msg::ResponseBody(HttpBody { body: tail.to_vec(), end_of_stream: eos, ..Default::default() })
            }
            REQUEST_TRAILERS => Msg::RequestTrailers(HttpTrailers { trailers: Some(HeaderMap::default()) }),
            _ => Msg::ResponseTrailers(HttpTrailers { trailers: Some(HeaderMap::default()) }),
        };
        out.push(Ok(ProcessingRequest {
            request: Some(request),
            protocol_config: config.take(),
            metadata_context: metadata.take(),
            ..Default::default()
        }));
    }
    out
}

fn headers_of(flags: u8, lines: &[u8]) -> HttpHeaders {
    let headers = lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| {
            // Pseudo-headers start with ':', so the separator is the first ':' after the first byte.
            let at = line.iter().skip(1).position(|&b| b == b':').map_or(line.len(), |p| p + 1);
            let key = String::from_utf8_lossy(&line[..at]).into_owned();
            let value = line.get(at + 1..).unwrap_or(&[]);
            if flags & STRING_VALUES != 0 {
                HeaderValue { key, value: String::from_utf8_lossy(value).into_owned(), raw_value: Vec::new() }
            } else {
                HeaderValue { key, value: String::new(), raw_value: value.to_vec() }
            }
        })
        .collect();
    HttpHeaders {
        headers: Some(HeaderMap { headers }),
        end_of_stream: flags & END_OF_STREAM != 0,
        ..Default::default()
    }
}

fn metadata_of(flags: u8, entries: &[u8]) -> Metadata {
    let string = |s: &[u8]| Value { kind: Some(Kind::StringValue(String::from_utf8_lossy(s).into_owned())) };
    let (namespace, key, value) = if flags & SERVED != 0 {
        (DESTINATION_NAMESPACE, SERVED_KEY, string(entries))
    } else {
        let mut values: Vec<Value> = entries.split(|&b| b == b',').map(string).collect();
        if flags & NON_STRING_ENTRY != 0 {
            values.push(Value { kind: Some(Kind::NumberValue(8000.0)) });
        }
        (SUBSET_NAMESPACE, SUBSET_KEY, Value { kind: Some(Kind::ListValue(ListValue { values })) })
    };
    Metadata {
        filter_metadata: HashMap::from([(
            namespace.to_string(),
            Struct { fields: HashMap::from([(key.to_string(), value)]) },
        )]),
        ..Default::default()
    }
}

/// Writes frames in the format [`decode`] reads (for seed inputs).
#[derive(Debug, Default, Clone)]
pub struct Frames(Vec<u8>);

impl Frames {
    pub fn new() -> Self {
        Self::default()
    }

    /// A frame of `kind` with `payload` (truncated to 65,535 bytes).
    pub fn frame(mut self, kind: u8, payload: &[u8]) -> Self {
        let payload = &payload[..payload.len().min(usize::from(u16::MAX))];
        self.0.push(kind);
        self.0.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        self.0.extend_from_slice(payload);
        self
    }

    /// A frame whose payload is a flags byte and then `bytes`.
    pub fn flagged(self, kind: u8, flags: u8, bytes: &[u8]) -> Self {
        let mut payload = Vec::with_capacity(bytes.len() + 1);
        payload.push(flags);
        payload.extend_from_slice(bytes);
        self.frame(kind, &payload)
    }

    /// Request or response headers from `(name, value)` pairs.
    pub fn headers(self, kind: u8, flags: u8, pairs: &[(&str, &str)]) -> Self {
        let lines: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        self.flagged(kind, flags, lines.join("\n").as_bytes())
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}
