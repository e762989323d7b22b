//! The errors a request can end with, and how each maps to an HTTP status on the wire.
//!
//! The Go EPP's codes and body format (`inference error: <Code> - <message>`) are kept so that clients and
//! dashboards that match on them keep working.

use std::fmt;

/// The class of a request failure. Each maps to one HTTP status in an `ImmediateResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    BadRequest,
    ResourceExhausted,
    ServiceUnavailable,
    Internal,
    ModelServerError,
    /// `Prefer: if-available` and the chosen decode pod's cache holds none of the prompt (llm-d's
    /// conditional decode: the coordinator then runs the full pipeline).
    PreconditionFailed,
}

impl ErrorCode {
    /// The code's name as it appears in the error body and in the `error_code` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BadRequest",
            ErrorCode::ResourceExhausted => "ResourceExhausted",
            ErrorCode::ServiceUnavailable => "ServiceUnavailable",
            ErrorCode::Internal => "Internal",
            ErrorCode::ModelServerError => "ModelServerError",
            ErrorCode::PreconditionFailed => "PreconditionFailed",
        }
    }

    /// The HTTP status Envoy returns to the client for this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::ResourceExhausted => 429,
            ErrorCode::ServiceUnavailable => 503,
            ErrorCode::PreconditionFailed => 412,
            ErrorCode::Internal | ErrorCode::ModelServerError => 500,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a request was refused before it reached a model server, in llm-d's words: the value of the
/// `x-llm-d-request-dropped-reason` response header (llm-d/llm-d-router:pkg/common/error/error.go), so a
/// client or a dashboard can tell load from an empty pool without parsing the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The pool (or epp itself) has no room now: retry later (429, or 503 for epp's own body budget).
    Saturated,
    /// The pool has no endpoint to serve it (503).
    NoEndpoints,
    /// It waited in flow control's queue past its TTL.
    TtlExpired,
    /// epp is shutting down.
    ShuttingDown,
}

impl DropReason {
    pub const ALL: [DropReason; 4] =
        [DropReason::Saturated, DropReason::NoEndpoints, DropReason::TtlExpired, DropReason::ShuttingDown];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Saturated => "rejected-saturated",
            DropReason::NoEndpoints => "rejected-no-endpoints",
            DropReason::TtlExpired => "rejected-ttl-expired",
            DropReason::ShuttingDown => "rejected-shutting-down",
        }
    }
}

/// A request failure with its code and a human-readable reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inference error: {code} - {message}")]
pub struct RequestError {
    pub code: ErrorCode,
    pub message: String,
    /// Set on refusals of load or capacity (every 429 and 503 epp answers itself).
    pub dropped: Option<DropReason>,
}

impl RequestError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), dropped: None }
    }
    /// The same error, saying why the request was dropped.
    pub fn dropped(mut self, reason: DropReason) -> Self {
        self.dropped = Some(reason);
        self
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn exhausted(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ResourceExhausted, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ServiceUnavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_format_matches_the_go_epp() {
        let e = RequestError::bad_request("model not found in request body");
        assert_eq!(e.to_string(), "inference error: BadRequest - model not found in request body");
        assert_eq!(e.code.http_status(), 400);
        assert_eq!(ErrorCode::ResourceExhausted.http_status(), 429);
        assert_eq!(ErrorCode::ServiceUnavailable.http_status(), 503);
        assert_eq!(ErrorCode::Internal.http_status(), 500);
    }
}
