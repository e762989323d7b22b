//! The order an ext_proc stream's messages must come in, checked before any of them is acted on.
//!
//! One stream carries one HTTP request: request headers once, then body chunks and trailers, and response
//! messages only once the request has been answered. Envoy never breaks that order; a peer that does is
//! broken or hostile, and acting on it would dispatch a request twice (a second headers message), route
//! a body nobody announced, or answer a response for a request never routed. Such a stream ends with a
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
    #[error("request {0} after the request was complete")]
    AfterRequest(&'static str),
    #[error("response {0} before the request was routed")]
    ResponseBeforeRouting(&'static str),
}

/// Whether `msg` may come in `phase` (`Finished` streams are not checked: their remaining messages are
/// ignored).
pub(super) fn check(phase: Phase, msg: &Msg) -> Result<(), Violation> {
    use Phase::*;
    match (msg, phase) {
        (_, Finished) => Ok(()),
        (Msg::RequestHeaders(_), AwaitingHeaders) => Ok(()),
        (Msg::RequestHeaders(_), _) => Err(Violation::RepeatedHeaders),
        (Msg::RequestBody(_), AwaitingHeaders) => Err(Violation::BeforeHeaders("body")),
        (Msg::RequestTrailers(_), AwaitingHeaders) => Err(Violation::BeforeHeaders("trailers")),
        (Msg::RequestBody(_), Routed) => Err(Violation::AfterRequest("body")),
        (Msg::RequestTrailers(_), Routed) => Err(Violation::AfterRequest("trailers")),
        (Msg::RequestBody(_) | Msg::RequestTrailers(_), ReceivingBody) => Ok(()),
        (Msg::ResponseHeaders(_), AwaitingHeaders | ReceivingBody) => {
            Err(Violation::ResponseBeforeRouting("headers"))
        }
        (Msg::ResponseBody(_), AwaitingHeaders | ReceivingBody) => {
            Err(Violation::ResponseBeforeRouting("body"))
        }
        (Msg::ResponseTrailers(_), AwaitingHeaders | ReceivingBody) => {
            Err(Violation::ResponseBeforeRouting("trailers"))
        }
        (Msg::ResponseHeaders(_) | Msg::ResponseBody(_) | Msg::ResponseTrailers(_), Routed) => Ok(()),
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

    #[test]
    fn each_phase_admits_only_its_messages() {
        assert_eq!(allowed(Phase::AwaitingHeaders), ["request headers"]);
        assert_eq!(allowed(Phase::ReceivingBody), ["request body", "request trailers"]);
        assert_eq!(allowed(Phase::Routed), ["response headers", "response body", "response trailers"]);
        assert_eq!(allowed(Phase::Finished).len(), 6);
    }

    #[test]
    fn violations_name_what_came_out_of_order() {
        let second = check(Phase::ReceivingBody, &Msg::RequestHeaders(HttpHeaders::default()));
        assert_eq!(second.unwrap_err().to_string(), "request headers received twice on one stream");
        let early = check(Phase::AwaitingHeaders, &Msg::RequestBody(HttpBody::default()));
        assert_eq!(early.unwrap_err().to_string(), "request body before the request headers");
        let response = check(Phase::ReceivingBody, &Msg::ResponseHeaders(HttpHeaders::default()));
        assert_eq!(response.unwrap_err().to_string(), "response headers before the request was routed");
    }
}
