//! The order an ext_proc stream's messages must come in, checked before any of them is acted on.
//!
//! One stream carries one HTTP request: request headers once, then body chunks and trailers. Envoy never
//! breaks that order; a peer that does is broken or hostile, and acting on it would dispatch a request
//! twice (a second headers message) or route a body nobody announced. Such a stream ends with a
//! gRPC `INVALID_ARGUMENT` naming the violation, and nothing is dispatched for it (a request already
//! dispatched is completed as aborted, like any stream that ends early).

use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    AwaitingHeaders,
    ReceivingBody,
    Routed,
    /// An immediate response was sent; nothing more is answered.
    Finished,
}

/// A message that may not come where it came.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Violation {
    #[error("request headers received twice on one stream")]
    RepeatedHeaders,
    #[error("request {0} before the request headers")]
    BeforeHeaders(&'static str),
    #[error("request body after the request was complete")]
    BodyAfterRequest,
}

/// Whether `msg` may come in `phase` (`Finished` streams are not checked: their remaining messages are
/// ignored).
///
/// Two orders that look wrong are Envoy's own and stay allowed: request trailers after routing (with
/// `request_body_mode: NONE`, or a buffered body sent with end of stream, epp routes before the trailers
/// come), and response messages before routing (Envoy's own local replies — a 413 for a body over its
/// buffer limit, a 408 for a slow upload — pass the ext_proc filter while the request is unfinished;
/// they are passed through untouched).
pub(super) fn check(phase: Phase, msg: &Msg) -> Result<(), Violation> {
    use Phase::*;
    match (msg, phase) {
        (_, Finished) => Ok(()),
        (Msg::RequestHeaders(_), AwaitingHeaders) => Ok(()),
        (Msg::RequestHeaders(_), _) => Err(Violation::RepeatedHeaders),
        (Msg::RequestBody(_), AwaitingHeaders) => Err(Violation::BeforeHeaders("body")),
        (Msg::RequestTrailers(_), AwaitingHeaders) => Err(Violation::BeforeHeaders("trailers")),
        (Msg::RequestBody(_), Routed) => Err(Violation::BodyAfterRequest),
        (Msg::RequestBody(_) | Msg::RequestTrailers(_), ReceivingBody | Routed) => Ok(()),
        (Msg::ResponseHeaders(_) | Msg::ResponseBody(_) | Msg::ResponseTrailers(_), _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ext_proc::v3::{HttpBody, HttpHeaders, HttpTrailers};

    fn all() -> [(Msg, &'static str); 6] {
        [
            (Msg::RequestHeaders(HttpHeaders::default()), "request headers"),
            (Msg::RequestBody(HttpBody::default()), "request body"),
            (Msg::RequestTrailers(HttpTrailers::default()), "request trailers"),
            (Msg::ResponseHeaders(HttpHeaders::default()), "response headers"),
            (Msg::ResponseBody(HttpBody::default()), "response body"),
            (Msg::ResponseTrailers(HttpTrailers::default()), "response trailers"),
        ]
    }

    fn allowed(phase: Phase) -> Vec<&'static str> {
        all().into_iter().filter(|(m, _)| check(phase, m).is_ok()).map(|(_, n)| n).collect()
    }

    const RESPONSE: [&str; 3] = ["response headers", "response body", "response trailers"];

    #[test]
    fn each_phase_admits_only_its_messages() {
        assert_eq!(allowed(Phase::AwaitingHeaders), [&["request headers"][..], &RESPONSE].concat());
        assert_eq!(
            allowed(Phase::ReceivingBody),
            [&["request body", "request trailers"][..], &RESPONSE].concat()
        );
        assert_eq!(allowed(Phase::Routed), [&["request trailers"][..], &RESPONSE].concat());
        assert_eq!(allowed(Phase::Finished).len(), 6);
    }

    #[test]
    fn violations_name_what_came_out_of_order() {
        let second = check(Phase::ReceivingBody, &Msg::RequestHeaders(HttpHeaders::default()));
        assert_eq!(second.unwrap_err().to_string(), "request headers received twice on one stream");
        let early = check(Phase::AwaitingHeaders, &Msg::RequestBody(HttpBody::default()));
        assert_eq!(early.unwrap_err().to_string(), "request body before the request headers");
        let late = check(Phase::Routed, &Msg::RequestBody(HttpBody::default()));
        assert_eq!(late.unwrap_err().to_string(), "request body after the request was complete");
    }
}
