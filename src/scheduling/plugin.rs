//! The extension points. A plugin type implements one or more of these traits; the registry builds it from
//! its config entry into a [`BuiltPlugin`] that says which roles it fills.
//!
//! Scheduling-cycle traits (`Filter`, `Scorer`, `Picker`, `ProfileHandler`, `DataProducer`, `Admitter`)
//! are synchronous and pure over the cycle's candidates: no I/O, no locks held across calls, no clock but
//! `SchedulingRequest::now`. Request-lifecycle traits (`PreRequest`, `ResponseHook`) may update the
//! plugin's own state (prefix index, in-flight counters).

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;

use super::types::{
    Candidate, EndpointAttributes, ProfileRunResult, ResultExtras, SchedulingRequest, SchedulingResult,
    ScoredCandidate,
};
use crate::datastore::Endpoint;
use crate::request::Usage;

/// Identity of a configured plugin instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginId {
    pub type_name: &'static str,
    pub name: String,
}

/// Endpoint attributes a producer writes and a consumer reads; used to order producers and to create
/// missing default producers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataKey {
    PrefixCacheMatch,
    InFlightLoad,
    LatencyPrediction,
}

/// Keeps the endpoints the request may go to. `kept` holds indices into `candidates`; a filter removes
/// entries from it (it may also restore the original list to fail open).
pub trait Filter: Send + Sync {
    fn filter(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>);
}

/// What a scorer measures; informational (the Go EPP uses it for validation and docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScorerCategory {
    Affinity,
    Distribution,
    Balance,
}

/// Scores the endpoints in `subset` (indices into `candidates`), writing `scores[i]` for `subset[i]`.
/// Scores are clamped to [0, 1] by the framework.
pub trait Scorer: Send + Sync {
    fn category(&self) -> ScorerCategory;
    fn score(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        scores: &mut [f64],
    );
}

/// Chooses the target endpoint(s) from the scored survivors, writing candidate indices into `out`, the
/// primary first. `scored` may be reordered.
pub trait Picker: Send + Sync {
    fn pick(&self, scored: &mut [ScoredCandidate], rng: &mut SmallRng, out: &mut Vec<usize>);
}

/// What a profile handler sees when it picks the next profiles.
#[derive(Debug, Clone, Copy)]
pub struct ProfileCycle<'a> {
    /// Every configured profile, in config order.
    pub profiles: &'a [String],
    /// The profiles already run, including any that found no endpoint.
    pub done: &'a [String],
    /// The results of those that found one.
    pub results: &'a [(String, ProfileRunResult)],
    /// The cycle's candidates, with the producers' attributes (a decider reads the chosen decode pod's
    /// prefix match here).
    pub candidates: &'a [Candidate],
}

impl ProfileCycle<'_> {
    /// The result of profile `name`, if it ran and found an endpoint.
    pub fn result(&self, name: &str) -> Option<&ProfileRunResult> {
        self.results.iter().find(|(n, _)| n == name).map(|(_, r)| r)
    }

    /// The candidate behind `endpoint`.
    pub fn candidate(&self, endpoint: &Arc<Endpoint>) -> Option<&Candidate> {
        self.candidates.iter().find(|c| Arc::ptr_eq(&c.endpoint, endpoint))
    }
}

/// Decides which profiles run and which result is primary.
pub trait ProfileHandler: Send + Sync {
    /// Names of the profiles to run next; empty ends the cycle.
    fn pick_profiles(&self, req: &SchedulingRequest<'_>, cycle: &ProfileCycle<'_>) -> Vec<String>;
    /// Chooses the primary profile among the results.
    fn primary_profile(&self, results: &[(String, ProfileRunResult)]) -> Result<String, String>;
    /// Whether a profile that finds no endpoint fails the cycle. `false` lets the cycle go on without it
    /// (a P/D prefill profile with no prefill pod left: the decode pod prefills locally).
    fn profile_required(&self, _profile: &str) -> bool {
        true
    }
    /// What the cycle's result means beyond the primary target: the prefill leg's endpoint and the
    /// headers that tell the decode sidecar about it. Called once per cycle, after `primary_profile`.
    fn extras(&self, _result: &SchedulingResult) -> ResultExtras {
        ResultExtras::default()
    }
    /// Resolves this handler's references to other plugins (a disaggregation handler's deciders) and
    /// checks the profiles it needs exist, once every plugin and profile is known. The error names the
    /// parameter (the loader adds the handler's name).
    fn link(&self, _plugins: &[BuiltPlugin], _profiles: &[String]) -> Result<(), String> {
        Ok(())
    }
}

/// Decides, for a request and the decode endpoint chosen for it, whether a disaggregation stage runs
/// (llm-d's `deciderPlugin`).
pub trait Decider: Send + Sync {
    fn disaggregate(&self, req: &SchedulingRequest<'_>, decode: &Candidate) -> bool;
}

/// Attaches per-endpoint attributes to the cycle's candidates before filtering and scoring.
pub trait DataProducer: Send + Sync {
    fn produces(&self) -> &'static [DataKey];
    fn consumes(&self) -> &'static [DataKey] {
        &[]
    }
    fn prepare(&self, req: &SchedulingRequest<'_>, candidates: &mut [Candidate]);
}

/// May deny a request after candidates are known and before scheduling (denial → 500, or 429 when the
/// admitter says its denials mean load).
pub trait Admitter: Send + Sync {
    fn admit(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate]) -> Result<(), String>;
    /// Whether a denial means "not now, the pool cannot serve this in time" (429, which clients retry with
    /// backoff) rather than a server fault (500, GIE's answer for every admitter).
    fn denial_is_load(&self) -> bool {
        false
    }
}

/// Runs after scheduling, before the request is forwarded (e.g. record the prefix in the index, count
/// in-flight load).
pub trait PreRequest: Send + Sync {
    fn pre_request(&self, req: &SchedulingRequest<'_>, result: &SchedulingResult, dispatch: &DispatchInfo);
}

/// What the request-lifecycle hooks know about a dispatched request; the same value is handed to
/// `pre_request` and to every response hook, so releases mirror acquisitions exactly.
#[derive(Debug, Clone)]
pub struct DispatchInfo {
    /// Unique per dispatch in this process (a client's `x-request-id` need not be): the key for per-request
    /// plugin state.
    pub dispatch_id: u64,
    pub request_id: String,
    pub target_model: String,
    pub fairness_id: String,
    pub priority: i32,
    /// The primary target.
    pub endpoint: Arc<Endpoint>,
    /// The endpoint running the prefill leg of a disaggregated request (P/D); `None` when the primary
    /// target prefills locally.
    pub prefill_endpoint: Option<Arc<Endpoint>>,
    pub input_tokens: u64,
    pub estimated_tokens: u64,
    pub dispatched_at: Instant,
    /// The primary target's attributes as the producers wrote them for this request (prefix match,
    /// in-flight load, the predictor's inputs and prediction), for the response hooks.
    pub attrs: EndpointAttributes,
}

/// How a dispatched request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// The response ended normally (whatever its HTTP status).
    Finished,
    /// The stream ended before the response did (client cancel, Envoy reset, epp shutdown).
    Aborted,
}

/// The end of a dispatched request, seen by `ResponseHook::on_complete` exactly once.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub kind: CompletionKind,
    pub status: Option<u16>,
    pub usage: Option<Usage>,
    pub now: Instant,
}

/// Response-side hooks. `on_complete` is called exactly once for every request that reached
/// `pre_request`, however the request ends.
pub trait ResponseHook: Send + Sync {
    /// Response headers arrived. `served` is the endpoint Envoy reports it used, if it says; headers to
    /// add to the response go into `set_headers`.
    fn on_response_headers(
        &self,
        _info: &DispatchInfo,
        _status: Option<u16>,
        _served: Option<&str>,
        _set_headers: &mut Vec<(String, String)>,
    ) {
    }
    /// A response body chunk passed through (`first` for the first one). Called only on hooks whose
    /// [`handles_response_chunks`](Self::handles_response_chunks) is true.
    fn on_response_chunk(&self, _info: &DispatchInfo, _chunk: &[u8], _first: bool, _now: Instant) {}
    /// True when [`on_response_chunk`](Self::on_response_chunk) does anything. Only such hooks are called,
    /// and timed under `ResponseStreaming`, for each chunk of an answer (llm-d-router times only its
    /// ResponseStreaming plugins there): a hook that needs only the headers or the end costs nothing per
    /// chunk.
    fn handles_response_chunks(&self) -> bool {
        false
    }
    fn on_complete(&self, _info: &DispatchInfo, _completion: &Completion) {}
    /// True when the hook learns from the answer's chunks (a streamed TTFT or TPOT). Behind a gateway that
    /// sends epp no response body it learns nothing, and epp says so once.
    fn reads_answer_chunks(&self) -> bool {
        false
    }
}

/// Fetches a request's token ids before its scheduling cycle: the one asynchronous step a plugin may take
/// (llm-d's `token-producer`). The cycle's producers read the result as `SchedulingRequest::token_ids`;
/// `None` (no tokenizer answer) leaves precise prefix matching without tokens for that request.
pub trait TokenProducer: Send + Sync {
    fn tokenize<'a>(
        &'a self,
        req: &'a SchedulingRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Option<Vec<u32>>>;
}

/// Called when endpoints leave the pool, so plugins drop their per-endpoint state.
pub trait EndpointListener: Send + Sync {
    fn on_endpoints_removed(&self, removed: &[Arc<Endpoint>]);
}

/// A configured plugin instance with the roles it fills.
#[derive(Clone)]
pub struct BuiltPlugin {
    pub id: PluginId,
    pub filter: Option<Arc<dyn Filter>>,
    pub scorer: Option<Arc<dyn Scorer>>,
    pub picker: Option<Arc<dyn Picker>>,
    pub profile_handler: Option<Arc<dyn ProfileHandler>>,
    pub producer: Option<Arc<dyn DataProducer>>,
    pub admitter: Option<Arc<dyn Admitter>>,
    pub pre_request: Option<Arc<dyn PreRequest>>,
    pub response: Option<Arc<dyn ResponseHook>>,
    pub endpoint_listener: Option<Arc<dyn EndpointListener>>,
    pub token_producer: Option<Arc<dyn TokenProducer>>,
    pub decider: Option<Arc<dyn Decider>>,
    /// How saturated a set of endpoints is, for admission and flow control (`saturationDetector.pluginRef`).
    pub saturation_detector: Option<Arc<dyn crate::scheduling::SaturationDetector>>,
    /// Data this plugin reads that a producer must supply.
    pub consumes: Vec<DataKey>,
}

impl std::fmt::Debug for BuiltPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltPlugin")
            .field("id", &self.id)
            .field("filter", &self.filter.is_some())
            .field("scorer", &self.scorer.is_some())
            .field("picker", &self.picker.is_some())
            .field("profile_handler", &self.profile_handler.is_some())
            .field("producer", &self.producer.is_some())
            .field("saturation_detector", &self.saturation_detector.is_some())
            .finish()
    }
}

impl BuiltPlugin {
    pub fn new(type_name: &'static str, name: &str) -> Self {
        Self {
            id: PluginId { type_name, name: name.to_string() },
            filter: None,
            scorer: None,
            picker: None,
            profile_handler: None,
            producer: None,
            admitter: None,
            pre_request: None,
            response: None,
            endpoint_listener: None,
            token_producer: None,
            decider: None,
            saturation_detector: None,
            consumes: Vec::new(),
        }
    }
    pub fn filter(mut self, p: Arc<dyn Filter>) -> Self {
        self.filter = Some(p);
        self
    }
    pub fn scorer(mut self, p: Arc<dyn Scorer>) -> Self {
        self.scorer = Some(p);
        self
    }
    pub fn picker(mut self, p: Arc<dyn Picker>) -> Self {
        self.picker = Some(p);
        self
    }
    pub fn profile_handler(mut self, p: Arc<dyn ProfileHandler>) -> Self {
        self.profile_handler = Some(p);
        self
    }
    pub fn producer(mut self, p: Arc<dyn DataProducer>) -> Self {
        self.producer = Some(p);
        self
    }
    pub fn admitter(mut self, p: Arc<dyn Admitter>) -> Self {
        self.admitter = Some(p);
        self
    }
    pub fn pre_request(mut self, p: Arc<dyn PreRequest>) -> Self {
        self.pre_request = Some(p);
        self
    }
    pub fn response(mut self, p: Arc<dyn ResponseHook>) -> Self {
        self.response = Some(p);
        self
    }
    pub fn token_producer(mut self, p: Arc<dyn TokenProducer>) -> Self {
        self.token_producer = Some(p);
        self
    }
    pub fn decider(mut self, p: Arc<dyn Decider>) -> Self {
        self.decider = Some(p);
        self
    }
    pub fn endpoint_listener(mut self, p: Arc<dyn EndpointListener>) -> Self {
        self.endpoint_listener = Some(p);
        self
    }
    pub fn saturation_detector(mut self, p: Arc<dyn crate::scheduling::SaturationDetector>) -> Self {
        self.saturation_detector = Some(p);
        self
    }
    pub fn consumes(mut self, keys: &[DataKey]) -> Self {
        self.consumes.extend_from_slice(keys);
        self
    }
}
