//! The route probe (`POST /debug/route` on the metrics port, off unless `--enable-route-probe`): where
//! would this request go, and why — without sending it anywhere.
//!
//! Users and operators ask "why did my request land there?"; Dynamo's EPP answers with a routing probe. This
//! one runs the ext_proc path's own steps over the live snapshot — [`Director::prepare`] (so a bad body or
//! SLO header gets the same 400), the candidates (subset hint, endpoint health), legacy shedding, the data
//! producers, every admitter, and the scheduling profiles traced step by step — and stops before anything
//! lasting: no flow-control enqueue, no pre-request hooks (in-flight counters, prefix index, the latency
//! producer's records), no request, scheduler or prediction metrics (the scheduling request is marked
//! `dry_run`). It is not a copy of the decision: it is [`super::decide::decide_traced`] with an explaining
//! trace, over candidates chosen by the director's own pool, subset and health rule, so its pick equals
//! `decide`'s for the same snapshot and random state; it seeds its generator from `seed` (reported, so a
//! decision can be replayed).

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::decide::{decide_traced, DecisionTrace};
use super::probe_view::{
    AdmitterVerdict, CandidateView, PickView, ProfileExplain, ProfileView, RefusalView, RouteExplanation,
    SloView,
};
use super::{Decision, Director, DirectorMetrics, IncomingRequest, Refusal};
use crate::datastore::{Endpoint, SubsetHint};
use crate::error::RequestError;
use crate::metrics::MetricsRegistry;
use crate::otel::Tracing;
use crate::request::Headers;
use crate::scheduling::profile::ProfileTrace;
use crate::scheduling::types::ScoredCandidate;
use crate::scheduling::{
    Candidate, NoopObserver, Pipeline, PluginId, SaturationDetector, SchedulingError, SchedulingRequest,
    SchedulingResult, WeightedScorer,
};
use crate::wire::SUBSET_KEY;

/// A request to explain, as the HTTP front end hands it over.
#[derive(Debug, Clone, Default)]
pub struct ProbeRequest {
    /// The inference path the request would be sent to (e.g. `/v1/chat/completions`).
    pub path: String,
    /// The request's headers (lower-case names), as the client would send them through the gateway.
    pub headers: Headers,
    pub body: Vec<u8>,
    /// Seeds the cycle's random numbers; drawn at random when absent (and reported either way).
    pub seed: Option<u64>,
}

/// What scheduling made of a request, step by step (the pure part of the probe, over given candidates).
#[derive(Debug)]
pub struct Explained {
    pub shed: bool,
    pub admitters: Vec<AdmitterVerdict>,
    pub profiles: Vec<ProfileView>,
    /// The primary profile of the scheduling cycle, when it produced a result (refused or not).
    pub primary_profile: Option<String>,
    /// `decide`'s own outcome: the decision (never booked: no pre-request hooks ran) or its refusal.
    pub outcome: Result<Decision, Refusal>,
}

impl Explained {
    /// The endpoint `decide` would pick (`None` when it would refuse).
    pub fn pick(&self) -> Option<&Arc<Endpoint>> {
        self.outcome.as_ref().ok().map(Decision::primary)
    }
}

/// The probe's trace of [`decide_traced`]: every verdict, every profile step.
#[derive(Default)]
struct Explaining {
    shed: bool,
    admitters: Vec<AdmitterVerdict>,
    profiles: ProfileExplain,
    primary_profile: Option<String>,
}

impl ProfileTrace for Explaining {
    fn started(&mut self, name: &str, candidates: &[Candidate]) {
        self.profiles.started(name, candidates);
    }
    fn filtered(&mut self, filter: &PluginId, kept: &[usize]) {
        self.profiles.filtered(filter, kept);
    }
    fn scored(&mut self, scorer: &WeightedScorer, kept: &[usize], raw: &[f64]) {
        self.profiles.scored(scorer, kept, raw);
    }
    fn picked(&mut self, picker: &PluginId, scored: &[ScoredCandidate], picked: &[usize]) {
        self.profiles.picked(picker, scored, picked);
    }
}

impl DecisionTrace for Explaining {
    fn explaining(&self) -> bool {
        true
    }
    fn shed(&mut self, shed: bool) {
        self.shed = shed;
    }
    fn admitter(&mut self, plugin: &PluginId, verdict: &Result<(), String>) {
        let reason = verdict.as_ref().err().cloned();
        self.admitters.push(AdmitterVerdict {
            plugin: plugin.name.clone(),
            admitted: reason.is_none(),
            reason,
        });
    }
    fn scheduled(&mut self, result: &Result<SchedulingResult, SchedulingError>) {
        self.primary_profile = result.as_ref().ok().map(|r| r.primary_profile.clone());
    }
}

/// [`decide_traced`] with an explaining trace: `decide`'s own steps, without the lasting one (the
/// pre-request hooks), going on past a refusal so the profiles show what scheduling would have made of
/// the request (`rng` is then drawn from as `decide` would not, which cannot change a pick that is not
/// made).
pub fn explain(
    pipeline: &Pipeline,
    shedding: Option<&dyn SaturationDetector>,
    req: &SchedulingRequest<'_>,
    candidates: &mut [Candidate],
    rng: &mut SmallRng,
) -> Explained {
    let mut trace = Explaining::default();
    let outcome =
        decide_traced(pipeline, shedding, req, candidates, rng, &NoopObserver, &mut |_| {}, &mut trace);
    Explained {
        shed: trace.shed,
        admitters: trace.admitters,
        profiles: trace.profiles.profiles,
        primary_profile: trace.primary_profile,
        outcome,
    }
}

/// The probe: a shadow of the server's director whose request metrics are never exported, so what
/// `prepare` counts (model rewrites) does not count as traffic.
pub struct RouteProbe {
    shadow: Director,
}

impl std::fmt::Debug for RouteProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteProbe").finish_non_exhaustive()
    }
}

impl RouteProbe {
    /// A probe over `director`'s pool, pipeline, admission mode, options and endpoint health.
    pub fn new(director: &Director) -> Self {
        // A registry nobody serves: the probe's own, discarded counts.
        let metrics = DirectorMetrics::register(&MetricsRegistry::new("route-probe"));
        let shadow = Director {
            datastore: director.datastore.clone(),
            pipeline: director.pipeline.clone(),
            admission: director.admission.clone(),
            metrics: metrics.requests,
            scheduler_metrics: metrics.scheduler,
            observer: Arc::new(NoopObserver),
            options: director.options.clone(),
            health: director.health.clone(),
            // A probe is not a request: it starts no trace.
            tracing: Tracing::disabled(),
            answers_kept_out_warning: std::sync::Once::new(),
        };
        Self { shadow }
    }

    /// Explains where `probe` would be routed now, or the error the ext_proc path would answer before
    /// scheduling (400 for a bad body or header, 503 for no candidates).
    pub async fn explain(&self, probe: ProbeRequest) -> Result<RouteExplanation, RequestError> {
        let d = &self.shadow;
        let seed = probe.seed.unwrap_or_else(rand::random);
        let mut rng = SmallRng::seed_from_u64(seed);
        let req = incoming(probe);
        let prepared = d.prepare(&req, &mut rng).map_err(|(e, _)| e)?;
        let (mut candidates, excluded_by_health) = self.candidates(&req)?;
        let mut sreq =
            SchedulingRequest { dry_run: true, ..prepared.scheduling_request(&req, Instant::now()) };
        // As the ext_proc path does: precise prefix matching needs the request's token ids.
        let token_ids = d.token_ids(&sreq).await;
        sreq.token_ids = token_ids.as_deref();
        let explained =
            explain(&d.pipeline, d.admission.shedding_detector(), &sreq, &mut candidates, &mut rng);
        let pick = explained.outcome.as_ref().ok().map(|decision| PickView {
            endpoint: decision.primary().name.clone(),
            address: decision.primary().host_port.clone(),
            fallbacks: decision.result.targets().iter().skip(1).map(|e| e.host_port.clone()).collect(),
        });
        let refusal = explained.outcome.as_ref().err().map(|r| {
            let e = r.clone().into_request_error();
            RefusalView { status: e.code.http_status(), reason: e.message }
        });
        Ok(RouteExplanation {
            request_id: req.request_id.clone(),
            model: prepared.incoming_model().to_string(),
            target_model: prepared.target_model().to_string(),
            priority: prepared.labels.priority,
            fairness_id: prepared.labels.fairness_id.clone(),
            input_tokens: prepared.input_tokens,
            estimated_tokens: prepared.estimated_tokens,
            slo: SloView { ttft_ms: prepared.slo.ttft_ms, tpot_ms: prepared.slo.tpot_ms },
            seed,
            admission: if d.admission.flow_controller().is_some() { "flow-control" } else { "legacy" },
            shed: explained.shed,
            admitters: explained.admitters,
            excluded_by_health,
            candidates: candidates.iter().map(CandidateView::from).collect(),
            primary_profile: explained.primary_profile,
            profiles: explained.profiles,
            pick,
            refusal,
        })
    }

    /// [`Director::candidates`] without its side effect (health's fail-open counter), also naming the
    /// endpoints health excluded: the same pool, subset and health rule.
    fn candidates(&self, req: &IncomingRequest) -> Result<(Vec<Candidate>, Vec<String>), RequestError> {
        let d = &self.shadow;
        let mut located = d.located(req)?;
        let mut excluded = Vec::new();
        if let Some(health) = &d.health {
            health.exclude(&mut located, Instant::now(), &mut |e| excluded.push(e.host_port.clone()));
        }
        Ok((located.into_iter().map(Candidate::new).collect(), excluded))
    }
}

/// The request as the ext_proc stream would hand it over: pseudo-headers added, the id from
/// `x-request-id` (filters draw their exploration from it, so passing one replays that too), the
/// subset hint from `x-gateway-destination-endpoint-subset` (comma-separated; in ext_proc it is metadata).
fn incoming(probe: ProbeRequest) -> IncomingRequest {
    let ProbeRequest { path, headers: probe_headers, body, .. } = probe;
    let path = if path.is_empty() { "/v1/completions".to_string() } else { path };
    let mut headers = Headers::new();
    headers.push(":method", "POST");
    headers.push(":path", path.clone());
    for (name, value) in probe_headers.iter() {
        if !name.starts_with(':') {
            headers.push(name, value);
        }
    }
    let request_id = headers
        .get("x-request-id")
        .filter(|id| !id.is_empty())
        .map_or_else(|| format!("probe-{}", uuid::Uuid::new_v4()), str::to_string);
    let (subset, invalid_subset) = match headers.get(SUBSET_KEY).map(|raw| SubsetHint::parse(raw.split(',')))
    {
        None => (SubsetHint::Absent, None),
        Some(Ok(hint)) => (hint, None),
        Some(Err(invalid)) => (SubsetHint::Absent, Some(invalid)),
    };
    IncomingRequest {
        request_id,
        generated_id: false,
        no_body: body.is_empty(),
        headers,
        path,
        body,
        header_only: false,
        subset,
        invalid_subset,
        received_at: Some(Instant::now()),
        trace: None,
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
