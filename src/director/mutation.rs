//! The director's routing answer: what the gateway must set and remove on the upstream request. The wire
//! layer turns it into Envoy messages; it is built here because it is a decision, not protocol.

/// The routing answer for one request: what to set and remove on the upstream request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutingMutation {
    /// `ip:port` of the primary target, then fallbacks, comma-joined.
    pub destination: String,
    /// Extra headers to set upstream (e.g. a generated `x-request-id`).
    pub set_headers: Vec<(String, String)>,
    /// Client-sent control headers to remove upstream.
    pub remove_headers: Vec<String>,
    /// Length of the body that goes upstream.
    pub content_length: usize,
    /// Per-endpoint scores for the `x-gateway-destination-endpoint-scores` metadata key, when enabled.
    pub scores: Option<String>,
}
