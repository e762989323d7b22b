//! The route probe (`POST /debug/route` on the metrics port, off unless `--enable-route-probe`): where
//! would this request go, and why — without sending it anywhere.
//!
//! Users and operators ask "why did my request land there?"; Dynamo's EPP answers with a routing probe. This
//! one runs the ext_proc path's own steps over the live snapshot — [`Director::prepare`] (so a bad body or
//! SLO header gets the same 400), the candidates (subset hint, endpoint health), legacy shedding, the data
//! producers, every admitter, and the scheduling profiles traced step by step — and stops before anything
//! lasting: no flow-control enqueue, no pre-request hooks (in-flight counters, prefix index, the latency
//! producer's records), no request, scheduler or prediction metrics (the scheduling request is marked
//! `dry_run`). Its pick equals `decide`'s for the same snapshot and
//! random state: both run [`crate::scheduling::Pipeline::schedule_traced`]'s one implementation, and the
//! probe seeds its generator from `seed` (reported, so a decision can be replayed).

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::probe_view::{
    AdmitterVerdict, CandidateView, PickView, ProfileExplain, ProfileView, RefusalView, RouteExplanation,
    SloView,
};
use super::{Director, DirectorMetrics, IncomingRequest, Refusal};
use crate::datastore::{locate, Endpoint, SubsetHint};
use crate::error::RequestError;
use crate::metrics::MetricsRegistry;
use crate::request::Headers;
use crate::scheduling::{
    Candidate, NoopObserver, Pipeline, SaturationDetector, SchedulingError, SchedulingRequest,
    SchedulingResult,
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
    pub result: Result<SchedulingResult, SchedulingError>,
    /// Why `decide` would refuse the request, in `decide`'s order of checks.
    pub refusal: Option<Refusal>,
}

impl Explained {
    /// The endpoint `decide` would pick (`None` when it would refuse).
    pub fn pick(&self) -> Option<&Arc<Endpoint>> {
        if self.refusal.is_some() {
            return None;
        }
        self.result.as_ref().ok()?.targets().first()
    }
}

/// [`super::decide`] without its lasting step (the pre-request hooks), explaining each stage. Unlike
/// `decide` it goes on past a refusal, so the profiles show what scheduling would have made of the
/// request; `rng` is then drawn from as `decide` would not, which cannot change a pick that is not made.
pub fn explain(
    pipeline: &Pipeline,
    shedding: Option<&dyn SaturationDetector>,
    req: &SchedulingRequest<'_>,
    candidates: &mut [Candidate],
    rng: &mut SmallRng,
) -> Explained {
    let shed = shedding.is_some_and(|d| req.priority < 0 && d.saturation(candidates, req.now) >= 1.0);
    pipeline.prepare(req, candidates, &NoopObserver);
    let mut denial = None;
    let admitters = pipeline
        .admitters
        .iter()
        .map(|(id, a)| {
            let verdict = a.admit(req, candidates);
            if let (Err(reason), None) = (&verdict, &denial) {
                denial = Some(Refusal::NotAdmitted {
                    plugin: id.name.clone(),
                    reason: reason.clone(),
                    load: a.denial_is_load(),
                });
            }
            AdmitterVerdict { plugin: id.name.clone(), admitted: verdict.is_ok(), reason: verdict.err() }
        })
        .collect();
    let mut trace = ProfileExplain::default();
    let result = pipeline.schedule_traced(req, candidates, rng, &NoopObserver, &mut trace);
    let scheduling = match &result {
        Err(e) => Some(Refusal::NoEndpoint(e.to_string())),
        Ok(r) if r.targets().is_empty() => Some(Refusal::NoTarget),
        Ok(_) => None,
    };
    let refusal = shed.then_some(Refusal::Shed).or(denial).or(scheduling);
    Explained { shed, admitters, profiles: trace.profiles, result, refusal }
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
        };
        Self { shadow }
    }

    /// Explains where `probe` would be routed now, or the error the ext_proc path would answer before
    /// scheduling (400 for a bad body or header, 503 for no candidates).
    pub fn explain(&self, probe: ProbeRequest) -> Result<RouteExplanation, RequestError> {
        let d = &self.shadow;
        let seed = probe.seed.unwrap_or_else(rand::random);
        let mut rng = SmallRng::seed_from_u64(seed);
        let req = incoming(probe);
        let prepared = d.prepare(&req, &mut rng).map_err(|(e, _)| e)?;
        let (mut candidates, excluded_by_health) = self.candidates(&req)?;
        let sreq = SchedulingRequest { dry_run: true, ..prepared.scheduling_request(&req, Instant::now()) };
        let explained =
            explain(&d.pipeline, d.admission.shedding_detector(), &sreq, &mut candidates, &mut rng);
        let pick = explained.pick().map(|primary| PickView {
            endpoint: primary.name.clone(),
            address: primary.host_port.clone(),
            fallbacks: explained
                .result
                .as_ref()
                .map(|r| r.targets().iter().skip(1).map(|e| e.host_port.clone()).collect())
                .unwrap_or_default(),
        });
        let refusal = explained.refusal.clone().map(|r| {
            let e = r.into_request_error();
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
            primary_profile: explained.result.as_ref().ok().map(|r| r.primary_profile.clone()),
            profiles: explained.profiles,
            pick,
            refusal,
        })
    }

    /// [`Director::candidates`] without its side effect (health's fail-open counter), also naming the
    /// endpoints health excluded.
    fn candidates(&self, req: &IncomingRequest) -> Result<(Vec<Candidate>, Vec<String>), RequestError> {
        let d = &self.shadow;
        let pool = d.datastore.endpoints();
        if pool.is_empty() {
            return Err(RequestError::unavailable("no endpoints available in the pool"));
        }
        let mut located = locate(&pool, &req.subset, d.options.subset_match);
        if located.is_empty() {
            return Err(RequestError::unavailable(super::NO_CANDIDATES));
        }
        let mut excluded = Vec::new();
        if let Some(health) = &d.health {
            let now = Instant::now();
            // Health fails open: when it would exclude every endpoint, none is excluded.
            if located.iter().any(|e| health.admits(e, now)) {
                located.retain(|e| {
                    let admitted = health.admits(e, now);
                    if !admitted {
                        excluded.push(e.host_port.clone());
                    }
                    admitted
                });
            }
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
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
