//! What the sidecar answers when it cannot serve a request: a status, a stable code, and a message that
//! says what failed and never quotes an upstream's body (a prefill error may quote the prompt). Codes
//! follow Dynamo's sidecar contract (ai-dynamo/dynamo:deploy/inference-gateway/sidecar/PROTOCOL.md) where
//! it has one.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The response header carrying the error code, so gateways and logs can tell the sidecar's errors from
/// the engine's.
pub const ERROR_HEADER: &str = "x-pd-sidecar-error";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SidecarError {
    /// `x-prefiller-host-port` is empty, repeated, a list, or not one `host:port`.
    #[error("x-prefiller-host-port must be exactly one host:port, got {0:?}")]
    InvalidEppMetadata(String),
    /// The named prefiller is not a member of the pool.
    #[error("prefiller {0} is not a member of the pool")]
    PrefillerNotAllowed(String),
    #[error("request body is not a JSON object: {0}")]
    InvalidRequest(String),
    /// Clients may not hand the engines KV-transfer parameters.
    #[error("kv_transfer_params may not be sent by clients")]
    ClientKvTransferParams,
    #[error("disaggregated serving supports n = 1 only, got n = {0}")]
    UnsupportedVariant(u64),
    #[error("request body over {0} bytes")]
    BodyTooLarge(usize),
    #[error("prefill pod {0} could not be reached")]
    PrefillUnavailable(String),
    #[error("prefill pod {pod} did not answer within {after}")]
    PrefillTimeout { pod: String, after: String },
    /// The prefill leg answered with an error status; its body is not relayed.
    #[error("prefill pod {pod} answered {status}")]
    PrefillFailed { pod: String, status: u16 },
    #[error("prefill pod {pod} returned no usable kv_transfer_params: {why}")]
    InvalidHandoff { pod: String, why: String },
    #[error("the local engine could not be reached: {0}")]
    DecodeUnavailable(String),
    #[error("the local engine did not answer within {0}")]
    DecodeTimeout(String),
}

impl SidecarError {
    /// The stable code clients and dashboards match on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidEppMetadata(_) => "invalid_epp_metadata",
            Self::PrefillerNotAllowed(_) => "prefiller_not_allowed",
            Self::InvalidRequest(_) | Self::ClientKvTransferParams => "invalid_pd_request",
            Self::UnsupportedVariant(_) => "unsupported_pd_variant",
            Self::BodyTooLarge(_) => "request_too_large",
            Self::PrefillUnavailable(_) => "prefill_upstream_unavailable",
            Self::PrefillTimeout { .. } => "prefill_deadline_exceeded",
            Self::PrefillFailed { .. } => "prefill_upstream_error",
            Self::InvalidHandoff { .. } => "invalid_prefill_handoff",
            Self::DecodeUnavailable(_) => "decode_upstream_unavailable",
            Self::DecodeTimeout(_) => "decode_upstream_timeout",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) | Self::ClientKvTransferParams | Self::UnsupportedVariant(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            // A client error on the prefill leg is the request's fault: the client learns the class.
            Self::PrefillFailed { status, .. } if (400..500).contains(status) => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            Self::PrefillTimeout { .. } | Self::DecodeTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

impl IntoResponse for SidecarError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"type": self.code(), "message": self.to_string(), "code": self.status().as_u16()}
        });
        let mut response =
            (self.status(), [("content-type", "application/json")], body.to_string()).into_response();
        response.headers_mut().insert(ERROR_HEADER, HeaderValue::from_static(self.code()));
        response
    }
}
