//! epp's own overhead, as the wire layer sees it: time spent on the request path (headers received →
//! routing answer sent, excluding flow-control queueing) and on the response's messages, summed per
//! request (`llm_d_epp_{request,response}_processing_duration_seconds`; one observation per request each,
//! as llm-d-router records them).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{alpha, MetricsRegistry, OVERHEAD};

/// The wire layer's families.
#[derive(Debug)]
pub struct OverheadMetrics {
    request_processing: Histogram,
    response_processing: Histogram,
}

impl OverheadMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let m = Self { request_processing: OVERHEAD.histogram(), response_processing: OVERHEAD.histogram() };
        registry.register(
            "llm_d_epp_request_processing_duration_seconds",
            alpha(
                "EPP request orchestration latency distribution in seconds, from request receipt through \
                 endpoint selection and request preparation, excluding admission-control time",
            ),
            m.request_processing.clone(),
        );
        registry.register(
            "llm_d_epp_response_processing_duration_seconds",
            alpha(
                "EPP response processing latency distribution in seconds, accumulated across response \
                 handlers and excluding model server generation time",
            ),
            m.response_processing.clone(),
        );
        Arc::new(m)
    }

    /// Time epp spent on the request path, excluding flow-control queueing.
    pub fn observe_request_processing(&self, duration: Duration) {
        self.request_processing.observe(duration.as_secs_f64());
    }

    /// Time epp spent handling one request's response messages, summed (the gaps between chunks are the
    /// model server's).
    pub fn observe_response_processing(&self, duration: Duration) {
        self.response_processing.observe(duration.as_secs_f64());
    }
}
