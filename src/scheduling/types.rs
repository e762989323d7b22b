//! The values a scheduling cycle works on: the request as the plugins see it, the candidate endpoints with
//! their telemetry and per-request attributes, and the results.

use std::sync::Arc;
use std::time::Instant;

use crate::datastore::{Endpoint, EndpointTelemetry};
use crate::predictor::features::Observation;
use crate::request::{Headers, ParsedRequest, Slo};

/// The request as the scheduling plugins see it. Everything a plugin may read, including the clock
/// (`now`), is here: plugins do no I/O and read no clock of their own.
#[derive(Debug, Clone, Copy)]
pub struct SchedulingRequest<'a> {
    pub request_id: &'a str,
    /// The model the request will be served as (after any rewrite).
    pub target_model: &'a str,
    /// Request headers, lower-case names.
    pub headers: &'a Headers,
    /// The raw body as received (empty for header-only requests).
    pub body: &'a [u8],
    /// The parsed body; `None` for header-only requests.
    pub parsed: Option<&'a ParsedRequest>,
    pub priority: i32,
    pub fairness_id: &'a str,
    /// The prompt's token ids as the engine tokenizes it, when a `token-producer` fetched them.
    pub token_ids: Option<&'a [u32]>,
    /// Estimated prompt tokens.
    pub input_tokens: u64,
    /// Estimated prompt + output tokens.
    pub estimated_tokens: u64,
    /// The latency objectives from the SLO headers (zero when none).
    pub slo: Slo,
    pub now: Instant,
    /// A route probe's request (`POST /debug/route`): plugins decide as usual but record no metrics, so
    /// explaining a decision is never counted as making one.
    pub dry_run: bool,
}

impl<'a> SchedulingRequest<'a> {
    /// The bytes to hash for prefix-cache affinity (empty when the request has none).
    pub fn prefix_text(&self) -> &'a [u8] {
        match self.parsed {
            Some(p) => p.prefix_bytes(self.body),
            None => &[],
        }
    }
}

/// How much of a request's prompt an endpoint is believed to have cached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixMatch {
    pub match_blocks: usize,
    pub total_blocks: usize,
    /// Block size in characters used for this match.
    pub block_chars: usize,
}

impl PrefixMatch {
    /// The fraction of the prompt's blocks matched, 0 when the prompt has none.
    pub fn ratio(&self) -> f64 {
        if self.total_blocks == 0 {
            0.0
        } else {
            self.match_blocks as f64 / self.total_blocks as f64
        }
    }
}

/// Work the EPP itself has dispatched to an endpoint and not yet seen finish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlightLoad {
    pub requests: i64,
    pub tokens: i64,
}

/// The predicted latency of a request on one endpoint, and its headroom against the request's SLO
/// (llm-d's `LatencyPredictionInfo`, llm-d/llm-d-router:pkg/epp/framework/plugins/datalayer/attribute/
/// latency/data_types.go), in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencyPrediction {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
    /// The prediction meets the TTFT objective (never true without one).
    pub ttft_valid: bool,
    /// The prediction meets the (buffered) TPOT objective; true when TPOT is not enforced.
    pub tpot_valid: bool,
    /// Objective minus prediction: negative when the prediction misses (−prediction without an objective).
    pub ttft_headroom_ms: f64,
    pub tpot_headroom_ms: f64,
    /// Requests epp has in flight on the endpoint.
    pub dispatched_requests: i64,
    /// The model generation that predicted.
    pub generation: u64,
    /// What routing the request here would cost the requests already decoding on the endpoint, in
    /// milliseconds of decode time summed over them: its predicted TTFT on an idle endpoint of the same
    /// class (the time its prefill chunks add to the steps they share) × the requests epp has decoding
    /// there. 0 unless the producer's `predictDecodeStall` is on. An epp extension (not in llm-d).
    pub decode_stall_ms: f64,
}

impl LatencyPrediction {
    /// Both objectives are predicted to be met.
    pub fn is_valid(&self) -> bool {
        self.ttft_valid && self.tpot_valid
    }
}

/// Per-request, per-endpoint attributes written by data producers and read by scorers and filters.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointAttributes {
    pub prefix: Option<PrefixMatch>,
    pub inflight: InFlightLoad,
    /// The predictor's inputs for this endpoint, captured once per request (the training row's features if
    /// the request goes there); written by `predicted-latency-producer` whether or not a model exists.
    pub observation: Option<Observation>,
    /// The predicted latency; `None` while no model exists (consumers then fall back).
    pub latency: Option<LatencyPrediction>,
}

impl EndpointAttributes {
    /// The prefix-cache match ratio, 0 when no producer matched anything.
    pub fn prefix_ratio(&self) -> f64 {
        self.prefix.map_or(0.0, |m| m.ratio())
    }
}

/// One endpoint as a scheduling cycle sees it: telemetry loaded once for the whole cycle.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub endpoint: Arc<Endpoint>,
    /// The endpoint's scraped telemetry, as of the decision (never a Prometheus handle: those are
    /// `*Metrics`).
    pub telemetry: Arc<EndpointTelemetry>,
    pub attrs: EndpointAttributes,
}

impl Candidate {
    pub fn new(endpoint: Arc<Endpoint>) -> Self {
        let telemetry = endpoint.telemetry();
        Self { endpoint, telemetry, attrs: EndpointAttributes::default() }
    }
}

/// A candidate (by index into the cycle's candidate slice) with its weighted total score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredCandidate {
    pub index: usize,
    pub score: f64,
}

/// The outcome of one profile: the chosen endpoints in picker order (first = primary target), and the
/// total scores of every endpoint that survived the filters (for `--emit-endpoint-scores` and debug logs),
/// by index into the cycle's candidates (every profile of a cycle runs over the same slice) — plain
/// numbers, so a cycle over 1,000 endpoints does not clone and drop 1,000 `Arc`s to keep them.
#[derive(Debug, Clone, Default)]
pub struct ProfileRunResult {
    pub targets: Vec<Arc<Endpoint>>,
    pub scores: Vec<ScoredCandidate>,
}

/// The outcome of a scheduling cycle: one result per profile that ran, and which one is primary.
#[derive(Debug, Clone)]
pub struct SchedulingResult {
    pub profile_results: Vec<(String, ProfileRunResult)>,
    pub primary_profile: String,
    /// What the profile handler made of the results beyond the primary target.
    pub extras: ResultExtras,
}

/// A profile handler's reading of a cycle's results beyond the primary target (P/D).
#[derive(Debug, Clone, Default)]
pub struct ResultExtras {
    /// The endpoint that runs the prefill leg, when it is not the primary target.
    pub prefill: Option<Arc<Endpoint>>,
    /// Headers the upstream request carries (`x-prefiller-host-port`).
    pub upstream_headers: Vec<(&'static str, String)>,
}

impl SchedulingResult {
    /// The primary profile's result.
    pub fn primary(&self) -> Option<&ProfileRunResult> {
        self.profile_results.iter().find(|(n, _)| *n == self.primary_profile).map(|(_, r)| r)
    }

    /// The endpoints the request goes to, primary first, then fallbacks.
    pub fn targets(&self) -> &[Arc<Endpoint>] {
        self.primary().map_or(&[], |r| r.targets.as_slice())
    }
}

/// Why a scheduling cycle produced no endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulingError {
    #[error("no endpoints available for the given request (profile {profile}: filter {filter} removed every endpoint)")]
    AllFiltered { profile: String, filter: String },
    #[error("no candidate endpoints")]
    NoCandidates,
    #[error("profile handler: {0}")]
    Handler(String),
}
