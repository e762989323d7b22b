//! The director: everything between "the request is fully received" and "send it to this endpoint".
//! Parse → model rewrite → objective and flow → [flow control: wait in the queue] → candidates (subset
//! hint) → [legacy: shed sheddable requests when saturated] → data producers → admitters → scheduling →
//! pre-request hooks → the routing mutation. Independent of gRPC, so it is tested directly and reused by
//! any front end.
//!
//! With flow control the queue comes before candidate lookup, so an empty pool waits (scale from zero)
//! instead of failing with 503; an explicitly empty subset list still fails at once.

mod active;
mod mutation;
mod rewrite;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

pub use active::{ActiveRequest, OwnedLabels};
pub use mutation::RoutingMutation;
pub use rewrite::RewriteRule;

use crate::datastore::{locate, Datastore, InvalidSubsetEntry, SubsetHint, SubsetMatch};
use crate::error::RequestError;
use crate::flowcontrol::policies::parse_slo_ttft;
use crate::flowcontrol::{Admission, FlowRequest};
use crate::metrics::EppMetrics;
use crate::request::{parse_request, splice_model, Headers, TokenEstimator};
use crate::scheduling::{Candidate, DispatchInfo, Observer, Pipeline, SchedulingRequest};
use crate::wire::{
    CONTROL_HEADERS, DEFAULT_FAIRNESS_ID, DESTINATION_KEY, FAIRNESS_HEADER, MODEL_REWRITE_HEADER,
    OBJECTIVE_HEADER, REQUEST_ID_HEADER, SLO_TTFT_HEADERS,
};

const NO_CANDIDATES: &str = "failed to find endpoint candidates for serving the request";

/// Everything the director needs that comes from configuration and flags.
#[derive(Debug, Clone, Default)]
pub struct DirectorOptions {
    /// InferenceObjective name → priority.
    pub objectives: HashMap<String, i32>,
    pub rewrites: Vec<RewriteRule>,
    pub token_estimator: TokenEstimator,
    pub subset_match: SubsetMatch,
    /// Emit per-endpoint scores in the `x-gateway-destination-endpoint-scores` metadata key.
    pub emit_scores: bool,
    /// Parse bodies as OpenAI (false: the passthrough parser forwards any body, routing on headers).
    pub parse_bodies: bool,
}

/// A fully received request, as the stream handler hands it over.
#[derive(Debug, Clone, Default)]
pub struct IncomingRequest {
    pub request_id: String,
    /// True when epp generated the id (it is then set upstream).
    pub generated_id: bool,
    pub headers: Headers,
    pub path: String,
    pub body: Vec<u8>,
    /// A request without a body (e.g. GET): routed on headers alone.
    pub header_only: bool,
    pub subset: SubsetHint,
    /// A subset hint the gateway sent that did not parse: the request is answered 400 naming the entry.
    pub invalid_subset: Option<InvalidSubsetEntry>,
    pub received_at: Option<Instant>,
}

/// The director's answer for a routed request.
#[derive(Debug)]
pub struct Routed {
    pub mutation: RoutingMutation,
    /// The rewritten body, only when the model was rewritten; otherwise the original bytes go upstream.
    pub new_body: Option<Vec<u8>>,
    pub active: ActiveRequest,
    /// `"stream": true` in the request.
    pub stream: bool,
    pub incoming_model: String,
    pub target_model: String,
}

/// Orchestrates one request from parsed body to routing decision.
pub struct Director {
    datastore: Arc<Datastore>,
    pipeline: Arc<Pipeline>,
    admission: Admission,
    metrics: Arc<EppMetrics>,
    observer: Arc<dyn Observer>,
    options: DirectorOptions,
}

impl std::fmt::Debug for Director {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Director").field("pipeline", &self.pipeline).field("options", &self.options).finish()
    }
}

impl Director {
    pub fn new(
        datastore: Arc<Datastore>,
        pipeline: Arc<Pipeline>,
        admission: Admission,
        metrics: Arc<EppMetrics>,
        observer: Arc<dyn Observer>,
        options: DirectorOptions,
    ) -> Self {
        Self { datastore, pipeline, admission, metrics, observer, options }
    }

    pub fn metrics(&self) -> &Arc<EppMetrics> {
        &self.metrics
    }

    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Routes a fully received request, or says why it cannot be routed.
    pub async fn route(&self, req: &IncomingRequest) -> Result<Routed, (RequestError, OwnedLabels)> {
        let mut labels = OwnedLabels {
            fairness_id: req.headers.get(FAIRNESS_HEADER).unwrap_or(DEFAULT_FAIRNESS_ID).to_string(),
            ..Default::default()
        };
        if let Some(invalid) = &req.invalid_subset {
            return Err((RequestError::bad_request(invalid.to_string()), labels));
        }
        let parsed = if req.header_only || !self.options.parse_bodies {
            None
        } else {
            Some(parse_request(&req.path, &req.body).map_err(|e| (e, labels.clone()))?)
        };
        let incoming_model = parsed.as_ref().map(|p| p.model.clone()).unwrap_or_default();
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let target_model = self.target_model(&incoming_model, &req.headers, &mut rng);
        labels.model_name = incoming_model.clone();
        labels.target_model_name = target_model.clone();
        labels.priority = req
            .headers
            .get(OBJECTIVE_HEADER)
            .and_then(|o| self.options.objectives.get(o).copied())
            .unwrap_or(0);
        let fail = |e: RequestError| (e, labels.clone());
        let (input_tokens, estimated_tokens) =
            self.options.token_estimator.estimate(req.body.len(), parsed.as_ref());

        // Flow control admits before candidates are located, so a request waits in the queue while the
        // pool or its subset is empty (scale from zero) instead of failing. The ticket keeps the request
        // counted as pending load until it is registered as running below.
        let flow_ticket = match self.admission.flow_controller() {
            Some(controller) => {
                if req.subset.is_explicitly_empty(self.options.subset_match) {
                    return Err(fail(RequestError::unavailable(NO_CANDIDATES)));
                }
                let flow_req = FlowRequest {
                    labels: labels.as_labels(),
                    byte_size: req.body.len() as u64,
                    tokens: estimated_tokens,
                    subset: &req.subset,
                    received_at: req.received_at.unwrap_or_else(Instant::now),
                    slo_ttft: slo_ttft(&req.headers),
                };
                Some(controller.enqueue_and_wait(flow_req).await.map_err(|e| fail(e.into()))?)
            }
            None => None,
        };

        let pool = self.datastore.endpoints();
        if pool.is_empty() {
            return Err(fail(RequestError::unavailable("no endpoints available in the pool")));
        }
        let located = locate(&pool, &req.subset, self.options.subset_match);
        if located.is_empty() {
            return Err(fail(RequestError::unavailable(NO_CANDIDATES)));
        }

        let mut sreq = SchedulingRequest {
            request_id: &req.request_id,
            target_model: &target_model,
            headers: &req.headers,
            body: &req.body,
            parsed: parsed.as_ref(),
            priority: labels.priority,
            fairness_id: &labels.fairness_id,
            input_tokens,
            estimated_tokens,
            now: Instant::now(),
        };
        // Flow control (above) may have waited, so the candidates' telemetry is loaded only now, once, and
        // serves both legacy shedding and scheduling.
        let processing_started = Instant::now();
        sreq.now = processing_started;
        let mut candidates: Vec<Candidate> = located.into_iter().map(Candidate::new).collect();
        // Only sheddable requests can be shed (legacy mode; flow control queued them instead).
        if flow_ticket.is_none() && labels.priority < 0 {
            self.admission.admit(&sreq, &candidates).await.map_err(fail)?;
        }
        self.pipeline.prepare(&sreq, &mut candidates, self.observer.as_ref());
        if let Err((id, reason)) = self.pipeline.admit(&sreq, &candidates, self.observer.as_ref()) {
            return Err(fail(RequestError::internal(format!(
                "request cannot be admitted by {}: {reason}",
                id.name
            ))));
        }
        let scheduled = self.pipeline.schedule(&sreq, &candidates, &mut rng, self.observer.as_ref());
        let result = match scheduled {
            Ok(r) => r,
            Err(e) => {
                self.metrics.record_scheduling(processing_started.elapsed(), &target_model, None);
                return Err(fail(RequestError::exhausted(format!("failed to find target endpoint: {e}"))));
            }
        };
        let targets = result.targets();
        let Some(primary) = targets.first().cloned() else {
            return Err(fail(RequestError::internal("scheduler returned no target")));
        };
        self.metrics.record_scheduling(processing_started.elapsed(), &target_model, Some(&primary));

        let info = DispatchInfo {
            request_id: req.request_id.clone(),
            target_model: target_model.clone(),
            fairness_id: labels.fairness_id.clone(),
            priority: labels.priority,
            endpoint: primary,
            input_tokens,
            estimated_tokens,
            dispatched_at: Instant::now(),
        };
        self.pipeline.pre_request(&sreq, &result, &info, self.observer.as_ref());

        let new_body = match &parsed {
            Some(p) if p.model != target_model => {
                Some(splice_model(&req.body, p.model_span.clone(), &target_model))
            }
            _ => None,
        };
        let mutation = self.mutation(req, &result, new_body.as_ref().map_or(req.body.len(), Vec::len));
        tracing::debug!(
            request_id = %req.request_id,
            model = %incoming_model,
            target_model = %target_model,
            destination = %mutation.destination,
            scores = ?result.primary().map(|r| r.scores.iter().map(|(e, s)| (e.host_port.as_str(), *s)).collect::<Vec<_>>()),
            "scheduled"
        );
        self.metrics.record_request(labels.as_labels(), req.body.len());
        let received_at = req.received_at.unwrap_or(processing_started);
        let active = ActiveRequest::start(
            self.pipeline.clone(),
            self.metrics.clone(),
            self.observer.clone(),
            info,
            labels,
            received_at,
            self.admission.flow_controller().map(|fc| fc.waker()),
        );
        // Now running (and counted by whatever tracks in-flight load): no longer pending.
        drop(flow_ticket);
        Ok(Routed {
            mutation,
            new_body,
            active,
            stream: parsed.as_ref().is_some_and(|p| p.stream),
            incoming_model,
            target_model,
        })
    }

    fn target_model(&self, incoming: &str, headers: &Headers, rng: &mut SmallRng) -> String {
        let mut target =
            headers.get(MODEL_REWRITE_HEADER).filter(|m| !m.is_empty()).unwrap_or(incoming).to_string();
        if let Some(rule) = self.options.rewrites.iter().find(|r| r.match_model == incoming) {
            if let Some(picked) = rule.pick(rng) {
                self.metrics.record_model_rewrite(&rule.name, incoming, picked);
                target = picked.to_string();
            }
        }
        target
    }

    fn mutation(
        &self,
        req: &IncomingRequest,
        result: &crate::scheduling::SchedulingResult,
        content_length: usize,
    ) -> RoutingMutation {
        let targets = result.targets();
        let mut destination = String::with_capacity(targets.len() * 22);
        for (i, t) in targets.iter().enumerate() {
            if i > 0 {
                destination.push(',');
            }
            destination.push_str(&t.host_port);
        }
        let mut set_headers = Vec::new();
        if req.generated_id {
            set_headers.push((REQUEST_ID_HEADER.to_string(), req.request_id.clone()));
        }
        let remove_headers = CONTROL_HEADERS
            .iter()
            .filter(|h| **h != DESTINATION_KEY && req.headers.contains(h))
            .map(|h| h.to_string())
            .collect();
        let scores = if self.options.emit_scores { result.primary().map(scores_json) } else { None };
        RoutingMutation { destination, set_headers, remove_headers, content_length, scores }
    }
}

/// The request's TTFT objective, from the first SLO header that parses.
fn slo_ttft(headers: &Headers) -> Option<std::time::Duration> {
    SLO_TTFT_HEADERS.iter().find_map(|h| headers.get(h).and_then(parse_slo_ttft))
}

fn scores_json(r: &crate::scheduling::ProfileRunResult) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        r.scores.iter().map(|(e, s)| (e.host_port.clone(), serde_json::json!(s))).collect();
    serde_json::Value::Object(map).to_string()
}
