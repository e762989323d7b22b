//! epp's own Prometheus registry: the GIE names (`inference_objective_*`, `inference_pool_*`,
//! `inference_extension_*`) and their llm-d-router equivalents (`llm_d_epp_*`), so existing dashboards
//! and the llm-d KEDA guides work unchanged.
//!
//! SKELETON: the API below is the contract the rest of the crate codes against; bodies are filled in by
//! the metrics work.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::datastore::Endpoint;
use crate::error::ErrorCode;
use crate::scheduling::{ExtensionPoint, PluginId, Usage};

/// Labels that identify a request's model, objective and flow in the per-request families.
#[derive(Debug, Clone, Copy)]
pub struct RequestLabels<'a> {
    pub model_name: &'a str,
    pub target_model_name: &'a str,
    pub priority: i32,
    pub fairness_id: &'a str,
}

/// All metric families epp exports, registered in one registry.
#[derive(Debug)]
pub struct EppMetrics {
    pool_name: String,
}

impl EppMetrics {
    pub fn new(pool_name: &str) -> Self {
        Self { pool_name: pool_name.to_string() }
    }

    pub fn pool_name(&self) -> &str {
        &self.pool_name
    }

    /// The exposition text served at `/metrics`.
    pub fn encode(&self) -> String {
        String::new()
    }

    /// A request was scheduled and forwarded (`inference_objective_request_total`, `llm_d_epp_request_total`).
    pub fn record_request(&self, _l: RequestLabels<'_>, _request_bytes: usize) {}
    /// A request ended with an error (`*_request_error_total{error_code}`).
    pub fn record_error(&self, _l: RequestLabels<'_>, _code: ErrorCode) {}
    /// A request finished: total duration, response bytes, token usage.
    pub fn record_response(
        &self,
        _l: RequestLabels<'_>,
        _duration: Duration,
        _response_bytes: usize,
        _usage: Option<Usage>,
    ) {
    }
    /// Time to first response byte, as seen by epp.
    pub fn record_ttft(&self, _l: RequestLabels<'_>, _ttft: Duration, _streaming: bool) {}
    pub fn running_inc(&self, _l: RequestLabels<'_>) {}
    pub fn running_dec(&self, _l: RequestLabels<'_>) {}
    /// One scheduling cycle's duration and outcome.
    pub fn record_scheduling(&self, _duration: Duration, _target_model: &str, _endpoint: Option<&Endpoint>) {}
    pub fn observe_plugin(&self, _point: ExtensionPoint, _id: &PluginId, _secs: f64) {}
    /// Time epp spent on the request path (headers received → routing answer sent), excluding flow-control queueing.
    pub fn observe_request_processing(&self, _duration: Duration) {}
    /// Time epp spent handling one response message.
    pub fn observe_response_processing(&self, _duration: Duration) {}
    pub fn record_model_rewrite(&self, _rewrite_name: &str, _model: &str, _target: &str) {}
    pub fn set_prefix_indexer_size(&self, _entries: i64) {}
    pub fn observe_prefix_hit(&self, _ratio: f64, _hit_bytes: usize) {}
    pub fn set_inflight(&self, _endpoint: &Endpoint, _producer_name: &str, _requests: i64, _tokens: i64) {}
    /// Drops every per-endpoint series of an endpoint that left the pool.
    pub fn remove_endpoint(&self, _endpoint: &Endpoint) {}
    /// Recomputes the pool gauges from the current endpoints.
    pub fn update_pool(&self, _endpoints: &[Arc<Endpoint>], _now: Instant, _staleness: Duration) {}
}
