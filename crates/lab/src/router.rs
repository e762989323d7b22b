//! What decides where each lab request goes: epp's real scheduling pipeline built from an
//! EndpointPickerConfig, or one of the two blind baselines (uniform random, round-robin) that stand for
//! "no gateway" (a Kubernetes Service).
//!
//! Why the baselines live here rather than as plugins: round-robin needs state across requests that no
//! scheduling plugin keeps, and a baseline should not pay for (or be helped by) producers it ignores.
//! The pipeline path estimates tokens, builds candidates from the endpoints' last-scraped telemetry and
//! calls the server's own decision step, `epp::director::decide` (producers → admitters → profiles →
//! pre-request), then later the response hooks and `on_complete`, all at virtual time. A config with a
//! `predicted-latency-producer` gets its own predictor, retrained at virtual-time ticks ([`Training`]).

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use epp::config::{self, LoadedConfig};
use epp::datastore::{Datastore, Endpoint};
use epp::director::decide;
use epp::kvcache::{KvEventPool, KvPools, PeerLink};
use epp::predictor::online::PredictorHub;
use epp::predictor::train::Objective;
use epp::request::{Headers, ParsedRequest, TokenEstimator};
use epp::scheduling::{
    Candidate, Completion, CompletionKind, DispatchInfo, FactoryContext, NoopObserver, Pipeline,
    PluginMetrics, Registry, SchedulingRequest, Usage,
};

use super::flow_gate::Admission;
use super::training::{self, Actual, PredictorReport, Training};

/// A routing configuration to compare.
#[derive(Debug, Clone, PartialEq)]
pub enum RouterSpec {
    /// Every request to a uniformly random replica.
    Random,
    /// Replicas in turn.
    RoundRobin,
    /// epp's default EndpointPickerConfig (the GIE default profile).
    Default,
    /// An EndpointPickerConfig, as YAML text.
    Config { yaml: String },
    /// The clairvoyant reference ([`super::oracle`]): each request where its own exact outcome is best.
    Oracle,
}

/// A named routing configuration: one column of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterChoice {
    pub name: String,
    pub spec: RouterSpec,
    /// Every request carries the workload's SLO as its objectives (the `x-llm-d-slo-*-ms` headers), as
    /// if `send_slo_headers` were on for this column alone; the requests are otherwise the same.
    pub slo_headers: bool,
    /// What the column's predictor estimates (epp's `--latency-objective-type`; the mean by default).
    pub latency_objective: Objective,
    /// Write the run's per-request samples ([`super::samples`]) into this folder as `<name>.csv`.
    pub samples: Option<std::path::PathBuf>,
    /// Active epp replicas sharing the traffic (a pipeline's column; baselines are one router).
    pub epp_replicas: usize,
}

impl RouterChoice {
    /// A column without SLO headers (unless the workload sends them).
    pub fn new(name: impl Into<String>, spec: RouterSpec) -> Self {
        Self {
            name: name.into(),
            spec,
            slo_headers: false,
            latency_objective: Objective::SquaredError,
            samples: None,
            epp_replicas: 1,
        }
    }

    /// The same column with the workload's SLO sent as headers.
    pub fn with_slo_headers(self) -> Self {
        Self { slo_headers: true, ..self }
    }

    /// The same column with its predictor trained for `objective`.
    pub fn with_latency_objective(self, objective: Objective) -> Self {
        Self { latency_objective: objective, ..self }
    }

    /// A built-in baseline by name: `random`, `round-robin`, `default` or `oracle`.
    pub fn baseline(name: &str) -> Option<Self> {
        let spec = match name.trim() {
            "random" => RouterSpec::Random,
            "round-robin" | "roundrobin" | "rr" => RouterSpec::RoundRobin,
            "default" => RouterSpec::Default,
            "oracle" => RouterSpec::Oracle,
            _ => return None,
        };
        Some(Self::new(name.trim(), spec))
    }

    /// Names accepted by [`RouterChoice::baseline`].
    pub const BASELINES: &'static [&'static str] = &["random", "round-robin", "default", "oracle"];
}

/// Why the pipeline refused a request: the status the server would answer (429 for load: shed, no
/// endpoint, an admitter's load denial such as `latency-slo-admitter`'s; 500 otherwise) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub status: u16,
    pub reason: String,
}

/// Where a routed request went, and the dispatch record its response hooks need (pipeline only).
pub(crate) struct Routed {
    pub replica: usize,
    pub dispatch: Option<DispatchInfo>,
}

/// What the pipeline needs to know of one arriving request.
pub(crate) struct Arriving<'a> {
    pub request_id: &'a str,
    pub body: &'a [u8],
    pub parsed: &'a ParsedRequest,
    pub priority: i32,
    /// The workload's objectives, sent as SLO headers when the workload opts in (zero otherwise).
    pub slo: epp::request::Slo,
    pub now: Instant,
    /// The prompt's token ids as the engines tokenise it (what a `token-producer` would fetch).
    pub token_ids: &'a [u32],
}

pub(crate) enum Router {
    Random(SmallRng),
    RoundRobin(usize),
    Pipeline(Box<PipelineRouter>),
    /// Routes in the simulation, which holds the engines it looks ahead on ([`super::oracle`]).
    Oracle,
}

pub(crate) struct PipelineRouter {
    pipeline: Pipeline,
    estimator: TokenEstimator,
    rng: SmallRng,
    /// Reused every request so a cycle allocates no candidate list.
    candidates: Vec<Candidate>,
    headers: Headers,
    response_headers: Vec<(String, String)>,
    /// The run's predictor, when the config has a `predicted-latency-producer`.
    training: Option<Training>,
    /// The KV-event pools of the config's `precise-prefix-cache-producer`s, fed the engines' events.
    kv_pools: Vec<Arc<KvEventPool>>,
    /// The producers' `speculativePeers` links, whose messages [`crate::replicas`] carries to the other
    /// replicas.
    peer_links: Vec<Arc<PeerLink>>,
    /// Legacy shedding, or flow control (`featureGates: [flowControl]`), as the server would run it.
    admission: Admission,
}

/// Loads an EndpointPickerConfig against the run's own datastore and predictor hub, so plugin state
/// (prefix index, in-flight counters, the predictor's samples) starts empty for every run.
pub(crate) fn load_config(
    spec: &RouterSpec,
    datastore: Arc<Datastore>,
    hub: PredictorHub,
    kv_pools: &KvPools,
) -> Result<LoadedConfig, String> {
    // Plugin metrics nobody scrapes: the lab reads its numbers from the simulation.
    let mut ctx = FactoryContext::new(datastore, PluginMetrics::detached()).with_predictor(hub);
    ctx.kv_pools = kv_pools.clone();
    let registry = Registry::with_builtins();
    let loaded = match spec {
        RouterSpec::Config { yaml } => config::load(yaml, &registry, &ctx),
        _ => config::load_default(&registry, &ctx),
    };
    loaded.map_err(|e| e.to_string())
}

impl Router {
    /// Builds the router for one run; `seed` drives its random choices.
    pub(crate) fn new(choice: &RouterChoice, datastore: Arc<Datastore>, seed: u64) -> Result<Self, String> {
        let spec = &choice.spec;
        let rng = SmallRng::seed_from_u64(seed ^ 0x726f_7574_6572);
        Ok(match spec {
            RouterSpec::Random => Router::Random(rng),
            RouterSpec::RoundRobin => Router::RoundRobin(0),
            RouterSpec::Oracle => Router::Oracle,
            RouterSpec::Default | RouterSpec::Config { .. } => {
                let hub = training::hub(choice.latency_objective);
                let kv_pools = KvPools::default();
                let loaded = load_config(spec, datastore, hub.clone(), &kv_pools)?;
                let te = loaded.token_estimator;
                let estimator = TokenEstimator::new(te.characters_per_token, te.output_ratio)
                    .map_err(|e| e.to_string())?;
                let admission = Admission::of(&loaded)?;
                Router::Pipeline(Box::new(PipelineRouter {
                    pipeline: loaded.pipeline,
                    estimator,
                    rng,
                    candidates: Vec::new(),
                    headers: Headers::new(),
                    response_headers: Vec::new(),
                    training: Training::take(&hub),
                    kv_pools: kv_pools.all(),
                    peer_links: kv_pools.peer_links(),
                    admission,
                }))
            }
        })
    }

    /// Whether the config indexes the engines' KV events (a `precise-prefix-cache-producer`).
    pub(crate) fn wants_kv_events(&self) -> bool {
        matches!(self, Router::Pipeline(p) if !p.kv_pools.is_empty())
    }

    /// One engine step's KV events from `endpoint` (a vLLM `KVEventBatch` payload), as its publisher
    /// would send them; events naming no model are `model`'s.
    pub(crate) fn kv_events(&self, endpoint: &Endpoint, model: &str, payload: &[u8]) {
        if let Router::Pipeline(p) = self {
            for pool in &p.kv_pools {
                pool.apply_in_process(endpoint, model, payload);
            }
        }
    }

    /// The producers' peer links (empty without `speculativePeers`).
    pub(crate) fn peer_links(&self) -> &[Arc<PeerLink>] {
        match self {
            Router::Pipeline(p) => &p.peer_links,
            _ => &[],
        }
    }

    /// Whether the config holds requests in flow control.
    pub(crate) fn flow_controls(&self) -> bool {
        matches!(self, Router::Pipeline(p) if p.admission.flow_gate().is_some())
    }

    /// Whether flow control would release a request now ([`FlowGate::admits`]); always true without it.
    pub(crate) fn admits(&mut self, endpoints: &[Arc<Endpoint>], now: Instant) -> bool {
        let Router::Pipeline(p) = self else { return true };
        let Some(gate) = p.admission.flow_gate() else { return true };
        fill_candidates(&mut p.candidates, endpoints);
        gate.admits(&p.candidates, now)
    }

    /// Whether decisions read endpoint telemetry (the blind baselines do not, so scrapes can be skipped).
    pub(crate) fn reads_telemetry(&self) -> bool {
        matches!(self, Router::Pipeline(_))
    }

    /// The virtual time of the predictor's next retrain tick (`None` without a predictor).
    pub(crate) fn next_retrain(&self) -> Option<f64> {
        match self {
            Router::Pipeline(p) => p.training.as_ref().map(Training::next_tick),
            _ => None,
        }
    }

    /// Runs the predictor's retrain tick that is due.
    pub(crate) fn retrain(&mut self) {
        if let Router::Pipeline(p) = self {
            if let Some(t) = &mut p.training {
                t.tick();
            }
        }
    }

    /// The predictor's account of the run (`None` without a predictor).
    pub(crate) fn predictor_report(&self) -> Option<PredictorReport> {
        match self {
            Router::Pipeline(p) => p.training.as_ref().map(Training::report),
            _ => None,
        }
    }

    /// Chooses the replica for a request; `Err` carries why the pipeline refused it.
    pub(crate) fn route(
        &mut self,
        req: &Arriving<'_>,
        endpoints: &[Arc<Endpoint>],
    ) -> Result<Routed, Refused> {
        match self {
            Router::Random(rng) => {
                Ok(Routed { replica: rng.random_range(0..endpoints.len()), dispatch: None })
            }
            Router::RoundRobin(next) => {
                let replica = *next % endpoints.len();
                *next = replica + 1;
                Ok(Routed { replica, dispatch: None })
            }
            Router::Pipeline(p) => p.route(req, endpoints),
            Router::Oracle => {
                Err(Refused { status: 500, reason: "the oracle routes in the simulation".into() })
            }
        }
    }

    /// The first token reached the client.
    pub(crate) fn on_first_token(&mut self, dispatch: Option<&DispatchInfo>, now: Instant) {
        if let (Router::Pipeline(p), Some(info)) = (self, dispatch) {
            p.response_headers.clear();
            let served = Some(info.endpoint.host_port.as_str());
            p.pipeline.on_response_headers(info, Some(200), served, &mut p.response_headers, &NoopObserver);
            p.pipeline.on_response_chunk(info, b"data: {}\n\n", true, now, &NoopObserver);
            if let Some(t) = &mut p.training {
                t.first_token();
            }
        }
    }

    /// A later token reached the client (one response chunk each, as vLLM streams them).
    pub(crate) fn on_token(&mut self, dispatch: Option<&DispatchInfo>, now: Instant) {
        if let (Router::Pipeline(p), Some(info)) = (self, dispatch) {
            p.pipeline.on_response_chunk(info, b"data: {}\n\n", false, now, &NoopObserver);
        }
    }

    /// The response ended (`usage` is `None` when the server refused the request); its first token came
    /// at `first_token`.
    pub(crate) fn on_complete(
        &mut self,
        dispatch: Option<DispatchInfo>,
        usage: Option<Usage>,
        first_token: Instant,
        now: Instant,
    ) {
        if let (Router::Pipeline(p), Some(info)) = (self, dispatch) {
            let status = if usage.is_some() { 200 } else { 400 };
            let completion = Completion { kind: CompletionKind::Finished, status: Some(status), usage, now };
            p.pipeline.on_complete(&info, &completion);
            if let (Some(t), Some(usage)) = (&mut p.training, usage) {
                let actual = Actual {
                    ttft_ms: training::millis(info.dispatched_at, first_token),
                    e2e_ms: training::millis(info.dispatched_at, now),
                    output_tokens: usage.completion_tokens,
                };
                t.completed(info.attrs.latency.as_ref(), &actual);
            }
        }
    }
}

/// Every endpoint as a candidate, in the list reused across decisions.
fn fill_candidates(candidates: &mut Vec<Candidate>, endpoints: &[Arc<Endpoint>]) {
    candidates.clear();
    candidates.extend(endpoints.iter().cloned().map(Candidate::new));
}

impl PipelineRouter {
    fn route(&mut self, req: &Arriving<'_>, endpoints: &[Arc<Endpoint>]) -> Result<Routed, Refused> {
        let (input_tokens, estimated_tokens) = self.estimator.estimate(req.body.len(), Some(req.parsed));
        let sreq = SchedulingRequest {
            request_id: req.request_id,
            target_model: &req.parsed.model,
            headers: &self.headers,
            body: req.body,
            parsed: Some(req.parsed),
            priority: req.priority,
            fairness_id: epp::wire::DEFAULT_FAIRNESS_ID,
            token_ids: Some(req.token_ids),
            input_tokens,
            estimated_tokens,
            slo: req.slo,
            now: req.now,
            dry_run: false,
        };
        fill_candidates(&mut self.candidates, endpoints);
        // The server's own decision step, legacy shedding included (flow control, where the config turns
        // it on, held the request before this instead).
        let decision = decide(
            &self.pipeline,
            self.admission.shedding(),
            &sreq,
            &mut self.candidates,
            &mut self.rng,
            &NoopObserver,
            &mut |_| {},
        )
        .map_err(|refusal| {
            let error = refusal.into_request_error();
            Refused { status: error.code.http_status(), reason: error.message }
        })?;
        if let Some(t) = &mut self.training {
            t.decided(decision.dispatch.attrs.latency.as_ref());
        }
        let replica =
            endpoints.iter().position(|e| Arc::ptr_eq(e, decision.primary())).ok_or_else(|| Refused {
                status: 500,
                reason: format!("the scheduler picked an unknown endpoint {}", decision.primary().name),
            })?;
        Ok(Routed { replica, dispatch: Some(decision.dispatch) })
    }
}
