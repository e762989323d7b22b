//! The values a scheduling cycle works on: the request as the plugins see it, the candidate endpoints with
//! their telemetry and per-request attributes, and the results.

use std::sync::Arc;
use std::time::Instant;

use crate::datastore::{Endpoint, EndpointMetrics};
use crate::request::{Headers, ParsedRequest};

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
    /// Estimated prompt tokens.
    pub input_tokens: u64,
    /// Estimated prompt + output tokens.
    pub estimated_tokens: u64,
    pub now: Instant,
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

/// Work the EPP itself has dispatched to an endpoint and not yet seen finish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlightLoad {
    pub requests: i64,
    pub tokens: i64,
}

/// Per-request, per-endpoint attributes written by data producers and read by scorers and filters.
#[derive(Debug, Clone, Default)]
pub struct EndpointAttributes {
    pub prefix: Option<PrefixMatch>,
    pub inflight: InFlightLoad,
}

/// One endpoint as a scheduling cycle sees it: telemetry loaded once for the whole cycle.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub endpoint: Arc<Endpoint>,
    pub metrics: Arc<EndpointMetrics>,
    pub attrs: EndpointAttributes,
}

impl Candidate {
    pub fn new(endpoint: Arc<Endpoint>) -> Self {
        let metrics = endpoint.metrics();
        Self { endpoint, metrics, attrs: EndpointAttributes::default() }
    }
}

/// A candidate (by index into the cycle's candidate slice) with its weighted total score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredCandidate {
    pub index: usize,
    pub score: f64,
}

/// The outcome of one profile: the chosen endpoints in picker order (first = primary target), and the
/// total scores of every endpoint that survived the filters (for `--emit-endpoint-scores` and debug logs).
#[derive(Debug, Clone, Default)]
pub struct ProfileRunResult {
    pub targets: Vec<Arc<Endpoint>>,
    pub scores: Vec<(Arc<Endpoint>, f64)>,
}

/// The outcome of a scheduling cycle: one result per profile that ran, and which one is primary.
#[derive(Debug, Clone)]
pub struct SchedulingResult {
    pub profile_results: Vec<(String, ProfileRunResult)>,
    pub primary_profile: String,
}

impl SchedulingResult {
    /// The primary profile's result.
    pub fn primary(&self) -> Option<&ProfileRunResult> {
        self.profile_results.iter().find(|(n, _)| *n == self.primary_profile).map(|(_, r)| r)
    }

    /// The endpoints the request goes to, primary first, then fallbacks.
    pub fn targets(&self) -> &[Arc<Endpoint>] {
        self.primary().map(|r| r.targets.as_slice()).unwrap_or(&[])
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
