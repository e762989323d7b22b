//! The director: everything between "the request is fully received" and "send it to this endpoint",
//! in four steps (each its own file, each tested on its own):
//!
//! 1. [`Director::prepare`] (sync): parse, model rewrite, labels, token estimate — or a 400;
//! 2. [`Director::admit`] (the one async step): with flow control, wait in the queue;
//! 3. [`decide`] (sync, no I/O, over the candidates' telemetry snapshot): legacy shedding, data
//!    producers, admitters, scheduling profiles, pre-request hooks — the same function the lab calls;
//! 4. [`Director::finish`]: the routing answer, the spliced body, and the [`ActiveRequest`].
//!
//! Candidates are located between 2 and 3: with flow control the queue comes first, so an empty pool
//! waits (scale from zero) instead of failing with 503; an explicitly empty subset list still fails at
//! once. Endpoint health ([`crate::health`]) narrows the candidates there too, whatever the profile.
//! Independent of gRPC, so any front end can drive it.

mod active;
mod candidates;
mod decide;
mod finish;
mod metrics;
mod metrics_names;
mod mutation;
#[cfg(test)]
mod pd_tests;
mod prepare;
mod probe;
mod probe_view;
mod series;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::Span as _;
use opentelemetry::KeyValue;
use rand::rngs::SmallRng;
use rand::SeedableRng;

pub use active::ActiveRequest;
pub use decide::{decide, Decision, Refusal};
pub use finish::routing_mutation;
pub use metrics::RequestMetrics;

pub use mutation::RoutingMutation;
pub use prepare::Prepared;
pub use probe::{explain, Explained, ProbeRequest, RouteProbe};
pub use probe_view::RouteExplanation;
pub use series::{OwnedLabels, RequestSeries, MAX_KEPT_FLOWS};

use crate::datastore::{Datastore, Endpoint, InvalidSubsetEntry, SubsetHint, SubsetMatch};
use crate::error::{DropReason, RequestError};
use crate::flowcontrol::{Admission, DispatchTicket, FlowRequest};
use crate::health::HealthMonitor;
use crate::metrics::MetricsRegistry;
use crate::otel::{RequestTrace, TracedObserver, Tracing};
use crate::request::{Headers, PolicyStore, TokenEstimator};
use crate::scheduling::{ExtensionPoint, Observer, Pipeline, SchedulerMetrics, SchedulingRequest};

const NO_CANDIDATES: &str = "failed to find endpoint candidates for serving the request";

/// A request that cannot be routed: the error for the client and the labels to count it under.
pub type Rejection = (RequestError, OwnedLabels);

/// Everything the director needs that comes from configuration and flags.
#[derive(Debug, Clone, Default)]
pub struct DirectorOptions {
    /// InferenceObjective priorities and model rewrites: the config's, with the cluster's laid over
    /// them, read per request (a lock-free load).
    pub policies: Arc<PolicyStore>,
    pub token_estimator: TokenEstimator,
    pub subset_match: SubsetMatch,
    /// Emit per-endpoint scores in the `x-gateway-destination-endpoint-scores` metadata key.
    pub emit_scores: bool,
    /// Parse bodies as OpenAI (false: the passthrough parser forwards any body, routing on headers).
    pub parse_bodies: bool,
    /// Ignore the client's `x-gateway-model-name-rewrite` header (upstream honours it and expects the
    /// gateway to strip it from untrusted clients; this does it in epp).
    pub ignore_model_rewrite_header: bool,
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
    /// A request routed on its headers alone: it has no body (e.g. GET), or Envoy sends none
    /// (`request_body_mode: NONE`).
    pub header_only: bool,
    /// The request ended with its headers: it has no body at all (not merely one Envoy does not send).
    pub no_body: bool,
    pub subset: SubsetHint,
    /// A subset hint the gateway sent that did not parse: the request is answered 400 naming the entry.
    pub invalid_subset: Option<InvalidSubsetEntry>,
    pub received_at: Option<Instant>,
    /// The request's trace, when tracing is on: the director's steps become its child spans, and its
    /// `traceparent` goes upstream.
    pub trace: Option<RequestTrace>,
}

/// The director's answer for a routed request.
#[derive(Debug)]
pub struct Routed {
    pub mutation: RoutingMutation,
    /// The rewritten body, only when the model was rewritten; otherwise the original bytes go upstream.
    pub new_body: Option<Vec<u8>>,
    pub active: ActiveRequest,
}

/// The families the director records: per-request ones and the scheduler's.
#[derive(Debug, Clone)]
pub struct DirectorMetrics {
    pub requests: Arc<RequestMetrics>,
    pub scheduler: Arc<SchedulerMetrics>,
}

impl DirectorMetrics {
    /// Creates both components' families and registers them in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Self {
        Self { requests: RequestMetrics::register(registry), scheduler: SchedulerMetrics::register(registry) }
    }
}

/// Orchestrates one request from parsed body to routing decision.
pub struct Director {
    datastore: Arc<Datastore>,
    pipeline: Arc<Pipeline>,
    admission: Admission,
    metrics: Arc<RequestMetrics>,
    scheduler_metrics: Arc<SchedulerMetrics>,
    observer: Arc<dyn Observer>,
    options: DirectorOptions,
    /// Drops unhealthy endpoints from the candidates and hears how each request went.
    health: Option<Arc<HealthMonitor>>,
    /// Starts each stream's trace (off unless `--tracing`).
    tracing: Tracing,
    /// Said once: the gateway sends no response bodies and a plugin needs them.
    answers_kept_out_warning: std::sync::Once,
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
        metrics: DirectorMetrics,
        observer: Arc<dyn Observer>,
        options: DirectorOptions,
    ) -> Self {
        let DirectorMetrics { requests, scheduler } = metrics;
        Self {
            datastore,
            pipeline,
            admission,
            metrics: requests,
            scheduler_metrics: scheduler,
            observer,
            options,
            health: None,
            tracing: Tracing::disabled(),
            answers_kept_out_warning: std::sync::Once::new(),
        }
    }

    /// The gateway sends epp no response bodies (`response_body_mode: NONE`, so that answers cost epp
    /// nothing): requests still complete at the stream's end, but plugins that learn from the answer's
    /// chunks learn nothing. Warns once per process, naming them, if there are any.
    pub fn warn_once_if_answers_matter(&self) {
        self.answers_kept_out_warning.call_once(|| {
            let readers: Vec<&str> = self.pipeline.answer_chunk_readers().collect();
            if !readers.is_empty() {
                tracing::warn!(
                    plugins = ?readers,
                    "the gateway sends no response bodies (response_body_mode NONE): these plugins learn \
                     nothing from answers (set the gateway's response_body_mode to FULL_DUPLEX_STREAMED)"
                );
            }
        });
    }

    /// Traces each request through `tracing`.
    pub fn with_tracing(mut self, tracing: Tracing) -> Self {
        self.tracing = tracing;
        self
    }

    /// Where the stream handler starts each request's trace.
    pub fn tracing(&self) -> &Tracing {
        &self.tracing
    }

    /// Filters candidates by endpoint health (without it, every located endpoint is a candidate).
    pub fn with_health(mut self, health: Arc<HealthMonitor>) -> Self {
        self.health = Some(health);
        self
    }

    /// The per-request families (the wire layer counts rejections in them).
    pub fn metrics(&self) -> &Arc<RequestMetrics> {
        &self.metrics
    }

    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Routes a fully received request, or says why it cannot be routed.
    pub async fn route(&self, req: &IncomingRequest) -> Result<Routed, Rejection> {
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let prepared = self.prepare(req, &mut rng)?;
        let fail = |e: RequestError| (e, prepared.labels.clone());
        // Flow control admits before candidates are located, so a request waits while the pool or its
        // subset is empty; the ticket keeps it counted as pending load until `finish` registers it.
        if let Some(trace) = &req.trace {
            trace.set_attribute(KeyValue::new("gen_ai.request.model", prepared.labels.model_name.clone()));
            trace.set_attribute(KeyValue::new(
                "llm_d.epp.target_model",
                prepared.labels.target_model_name.clone(),
            ));
        }
        let ticket = self.admit_traced(req, &prepared).await.map_err(fail)?;
        let located = self.locate_candidates(req).map_err(fail)?;
        let token_ids = self.token_ids(&prepared.scheduling_request(req, Instant::now())).await;
        let processing_started = Instant::now();
        // Only the legacy mode sheds; flow control queued the request instead.
        let shedding = if ticket.is_none() { self.admission.shedding_detector() } else { None };
        // Decided and finished synchronously, over this worker's kept candidates (see `candidates`).
        located.with_candidates(move |candidates| {
            let mut sreq = prepared.scheduling_request(req, processing_started);
            sreq.token_ids = token_ids.as_deref();
            // Scheduling is timed up to the pick (pre-request hooks excluded), as upstream times it.
            let mut scheduled = |picked: Option<&Arc<Endpoint>>| {
                let elapsed = processing_started.elapsed();
                self.scheduler_metrics.record_scheduling(
                    elapsed,
                    prepared.target_model(),
                    picked.map(|e| &**e),
                );
            };
            let traced = req.trace.as_ref().map(|trace| TracedObserver::new(self.observer.as_ref(), trace));
            let observer = traced.as_ref().map_or(self.observer.as_ref(), |t| t as &dyn Observer);
            let decided =
                decide(&self.pipeline, shedding, &sreq, candidates, &mut rng, observer, &mut scheduled);
            drop(traced);
            match decided {
                Ok(decision) => {
                    Ok(self.finish(req, prepared, decision, candidates, ticket, processing_started))
                }
                Err(refusal) => Err((refusal.into_request_error(), prepared.labels)),
            }
        })
    }

    /// [`admit`](Self::admit), in a `llm_d.epp.flow_control` span when the request is traced and flow
    /// control is on (the span is the time spent queued).
    async fn admit_traced(
        &self,
        req: &IncomingRequest,
        prepared: &Prepared,
    ) -> Result<Option<DispatchTicket>, RequestError> {
        let span = req
            .trace
            .as_ref()
            .filter(|_| self.admission.flow_controller().is_some())
            .map(|trace| trace.child("llm_d.epp.flow_control"));
        let admitted = self.admit(req, prepared).await;
        if let Some(mut span) = span {
            if let Err(e) = &admitted {
                span.set_status(opentelemetry::trace::Status::error(e.message.clone()));
            }
            span.end();
        }
        admitted
    }

    /// The request's token ids from the pipeline's `token-producer`, when it has one (precise prefix
    /// matching reads them); outside the scheduling time, as the wait for admission is. Timed as the
    /// producer's `PrepareData` (llm-d runs its tokenizer as a data producer there), so a slow render
    /// call or tokenizer shows in `plugin_duration_seconds` before it shows in TTFT.
    async fn token_ids(&self, sreq: &SchedulingRequest<'_>) -> Option<Vec<u32>> {
        let (id, producer) = self.pipeline.token_producer()?;
        let started = Instant::now();
        let ids = producer.tokenize(sreq).await;
        if !sreq.dry_run {
            self.observer.record(ExtensionPoint::PrepareData, id, started.elapsed().as_secs_f64());
        }
        ids
    }

    /// The async step: with flow control, waits until the request may be scheduled (its ticket), or
    /// fails (queue full, TTL, shutdown); without, admits at once.
    pub async fn admit(
        &self,
        req: &IncomingRequest,
        prepared: &Prepared,
    ) -> Result<Option<DispatchTicket>, RequestError> {
        let Some(controller) = self.admission.flow_controller() else { return Ok(None) };
        if req.subset.is_explicitly_empty(self.options.subset_match) {
            return Err(RequestError::unavailable(NO_CANDIDATES).dropped(DropReason::NoEndpoints));
        }
        let flow_req = FlowRequest {
            labels: prepared.labels.as_labels(),
            byte_size: req.body.len() as u64,
            tokens: prepared.estimated_tokens,
            subset: &req.subset,
            received_at: req.received_at.unwrap_or_else(Instant::now),
            slo_ttft: prepared.slo.ttft(),
        };
        Ok(Some(controller.enqueue_and_wait(flow_req).await?))
    }
}
