//! How a request leaves the flow-control layer (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/flowcontrol/types/outcomes.go). The names are the
//! values of the `outcome` metric label, and each failure maps to the HTTP status the Go EPP returns.

use crate::error::{DropReason, RequestError};

use super::queue::CapacityError;

/// A request's final flow-control outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Dispatched,
    RejectedCapacity,
    RejectedOther,
    EvictedTtl,
    EvictedContextCancelled,
    EvictedOther,
}

impl Outcome {
    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Dispatched => "Dispatched",
            Outcome::RejectedCapacity => "RejectedCapacity",
            Outcome::RejectedOther => "RejectedOther",
            Outcome::EvictedTtl => "EvictedTTL",
            Outcome::EvictedContextCancelled => "EvictedContextCancelled",
            Outcome::EvictedOther => "EvictedOther",
        }
    }
}

/// The `outcome` label of the enqueue-duration histograms for a request that was queued.
pub const NOT_YET_FINALIZED: &str = "NotYetFinalized";

/// Why a request is refused when flow control is closing.
pub(crate) const SHUTTING_DOWN: &str = "epp is shutting down";

/// Why a request did not get through flow control. A client that goes away never sees an error: its
/// waiting future is dropped, and the drop records `EvictedContextCancelled`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// A queue limit was full at enqueue (429).
    #[error("request rejected by flow control: {0}")]
    RejectedCapacity(#[from] CapacityError),
    /// Not queued for another reason, e.g. epp is shutting down (500).
    #[error("internal flow control error: {0}")]
    RejectedOther(&'static str),
    /// The request waited longer than its TTL (503).
    #[error("request timed out in queue")]
    EvictedTtl,
    /// The controller went away while the request waited (500).
    #[error("internal flow control error: {0}")]
    EvictedOther(&'static str),
}

impl FlowError {
    pub fn outcome(&self) -> Outcome {
        match self {
            FlowError::RejectedCapacity(_) => Outcome::RejectedCapacity,
            FlowError::RejectedOther(_) => Outcome::RejectedOther,
            FlowError::EvictedTtl => Outcome::EvictedTtl,
            FlowError::EvictedOther(_) => Outcome::EvictedOther,
        }
    }
}

impl From<FlowError> for RequestError {
    fn from(e: FlowError) -> Self {
        match e {
            FlowError::RejectedCapacity(_) => {
                RequestError::exhausted(e.to_string()).dropped(DropReason::Saturated)
            }
            FlowError::EvictedTtl => RequestError::unavailable(e.to_string()).dropped(DropReason::TtlExpired),
            FlowError::RejectedOther(SHUTTING_DOWN) => {
                RequestError::internal(e.to_string()).dropped(DropReason::ShuttingDown)
            }
            FlowError::RejectedOther(_) | FlowError::EvictedOther(_) => RequestError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn errors_map_to_the_go_statuses() {
        let cap: RequestError = FlowError::from(CapacityError::GlobalRequests { limit: 3 }).into();
        assert_eq!(cap.code, ErrorCode::ResourceExhausted);
        assert_eq!(cap.code.http_status(), 429);
        let ttl: RequestError = FlowError::EvictedTtl.into();
        assert_eq!((ttl.code.http_status(), ttl.message.as_str()), (503, "request timed out in queue"));
        let other: RequestError = FlowError::EvictedOther("shutting down").into();
        assert_eq!(other.code.http_status(), 500);
    }

    #[test]
    fn outcome_labels_match_go() {
        assert_eq!(Outcome::EvictedTtl.as_str(), "EvictedTTL");
        assert_eq!(FlowError::EvictedTtl.outcome(), Outcome::EvictedTtl);
        assert_eq!(Outcome::EvictedContextCancelled.as_str(), "EvictedContextCancelled");
    }
}
