//! `predicted-latency-producer` (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/
//! predictedlatency): predicts every candidate's TTFT and TPOT for the request with the in-process
//! predictor, writes them with their headroom against the request's SLO into `attrs.latency`, and feeds
//! what happened back to the predictor as training rows.
//!
//! Where llm-d sends one HTTP bulk call per request to a Python prediction sidecar (behind a 1 ms
//! coalescer), this walks the current model generation in process: one batch per target over the
//! candidates' feature rows, in reused buffers. The features are captured once per request (the same
//! capture trains the model if the request goes there, as llm-d does) and include the endpoint's
//! accelerator class, so a pool that mixes L4s and H100s gets a prediction per class.
//!
//! Until a model exists (warm-up) no prediction is written and the consumers fall back: the scorer to its
//! composite score, the tier filter and the admitter to keeping everything (llm-d §4.5). The lifecycle
//! half (the per-endpoint running TPOT objectives, the training rows, the metrics) is in [`tracking`] and
//! [`feedback`].

mod distinct;
mod feedback;
mod params;
mod stream_clock;
mod tracking;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use crate::datastore::{Endpoint, PodRole, ROLE_LABEL};
use crate::predictor::features::{accelerator_code, Observation, PodType, TPOT_COLUMNS, TTFT_COLUMNS};
use crate::predictor::online::{Intake, Predictor};
use crate::scheduling::{
    BuiltPlugin, Candidate, DataKey, DataProducer, FactoryContext, LatencyKind, LatencyMetrics,
    LatencyPrediction, PluginError, SchedulingRequest,
};

pub use params::ProducerSettings;
use tracking::{PhaseLoad, Tracker};

pub(crate) const TYPE_NAME: &str = "predicted-latency-producer";

thread_local! {
    /// Feature rows and predictions of one request, reused: no allocation per candidate.
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

#[derive(Default)]
struct Buffers {
    rows: Vec<f32>,
    ttft: Vec<f32>,
    tpot: Vec<f32>,
    /// The candidates' tokens in flight, copied out under the tracker's lock.
    phases: Vec<PhaseLoad>,
    /// The request's predicted TTFT on each candidate were it idle (`predictDecodeStall`).
    idle_ttft: Vec<f32>,
    /// The idle rows repeat across candidates: predicted once per distinct row.
    idle_rows: distinct::DistinctRows,
}

/// The producer: predictions in `prepare`, the request's lifecycle in the hooks.
pub struct PredictedLatencyProducer {
    name: String,
    settings: ProducerSettings,
    predictor: Predictor,
    intake: Intake,
    metrics: Arc<LatencyMetrics>,
    tracker: Tracker,
}

impl std::fmt::Debug for PredictedLatencyProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredictedLatencyProducer")
            .field("name", &self.name)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PredictedLatencyProducer {
    pub fn new(
        name: &str,
        settings: ProducerSettings,
        (predictor, intake): (Predictor, Intake),
        metrics: Arc<LatencyMetrics>,
    ) -> Self {
        let tracker = Tracker::new(settings.context_ttl);
        Self { name: name.to_string(), settings, predictor, intake, metrics, tracker }
    }

    /// The predictor's inputs for `candidate` (llm-d's `buildPredictionRequest`, plus the accelerator
    /// class).
    fn observe(&self, req: &SchedulingRequest<'_>, candidate: &Candidate, phases: PhaseLoad) -> Observation {
        let metrics = &candidate.telemetry;
        let (ms_since_last_token, last_step_ms) = self.tracker.clocks.read(&candidate.endpoint, req.now);
        let inflight = candidate.attrs.inflight;
        Observation {
            kv_cache_percentage: metrics.kv_cache_usage as f32,
            input_tokens: u32::try_from(req.input_tokens).unwrap_or(u32::MAX),
            waiting: u32::try_from(metrics.waiting_queue_size).unwrap_or(u32::MAX),
            // epp's own count of what it dispatched there; vLLM's running count before epp sent anything.
            running: u32::try_from(if inflight.requests > 0 {
                inflight.requests.unsigned_abs()
            } else {
                metrics.running_requests
            })
            .unwrap_or(u32::MAX),
            prefix_cache_score: candidate.attrs.prefix_ratio() as f32,
            prefill_tokens_in_flight: phases.prefill_tokens,
            decode_tokens_in_flight: phases.decode_tokens,
            encoder_matched_size: 0,
            encoder_input_size: 0,
            tokens_generated: 1,
            pod_type: self.pod_type(&candidate.endpoint),
            accelerator_class: accelerator_code(self.settings.accelerator(&candidate.endpoint)),
            ms_since_last_token,
            last_step_ms,
        }
    }

    /// The pod's stage, from `endpointRoleLabel` or, by default, llm-d's role label: a pod that only
    /// prefills or only decodes is that type; interleaved and unlabelled pods do both.
    fn pod_type(&self, endpoint: &Endpoint) -> PodType {
        let label = self.settings.endpoint_role_label.as_deref().unwrap_or(ROLE_LABEL);
        match endpoint.labels.get(label).and_then(|v| PodRole::parse(v)) {
            Some(r) if r.prefill && !r.decode => PodType::Prefill,
            Some(r) if r.decode && !r.prefill => PodType::Decode,
            _ => PodType::Both,
        }
    }

    /// Whether TPOT is predicted and enforced on `endpoint` (streaming mode, and not a prefill endpoint).
    fn enforces_tpot(&self, observation: &Observation) -> bool {
        self.settings.streaming && observation.pod_type != PodType::Prefill
    }

    fn predict(&self, req: &SchedulingRequest<'_>, candidates: &mut [Candidate]) {
        let Some(models) = self.predictor.snapshot() else { return };
        // A probe's prediction is not one epp made for a request: not timed into the metrics.
        let labels = (!req.dry_run)
            .then(|| self.metrics.labels_for(&self.name, TYPE_NAME, feedback::request_labels(req)));
        let record = |kind, started: Instant| {
            if let Some(labels) = &labels {
                self.metrics.prediction_duration(labels, kind, started.elapsed().as_secs_f64());
            }
        };
        let n = candidates.len();
        BUFFERS.with(|buffers| {
            let mut guard = buffers.borrow_mut();
            let Buffers { rows, ttft, tpot, idle_ttft, phases, idle_rows } = &mut *guard;
            idle_ttft.clear();
            ttft_rows(candidates, rows, |observation| observation);
            ttft.clear();
            ttft.resize(n, 0.0);
            let started = Instant::now();
            models.ttft.predict_batch(rows, ttft);
            record(LatencyKind::Ttft, started);

            tpot.clear();
            tpot.resize(n, 0.0);
            let tpot_model = models.tpot.as_ref().filter(|_| self.settings.streaming);
            if let Some(model) = tpot_model {
                rows.clear();
                rows.resize(n * TPOT_COLUMNS.len(), 0.0);
                for (chunk, c) in rows.chunks_exact_mut(TPOT_COLUMNS.len()).zip(candidates.iter()) {
                    let observation = c.attrs.observation.unwrap_or_default();
                    if let Ok(row) = <&mut [f32; TPOT_COLUMNS.len()]>::try_from(chunk) {
                        observation.tpot_row(row);
                    }
                }
                let started = Instant::now();
                model.predict_batch(rows, tpot);
                record(LatencyKind::Tpot, started);
            }
            // With nothing decoding on any candidate every stall is 0: no batch to predict.
            if self.settings.predict_decode_stall && phases.iter().any(|p| p.decode_requests > 0) {
                // The request's TTFT were each candidate idle: the same prompt, prefix match and accelerator
                // class with every load feature zeroed. That is its prefill's own compute time, which is what
                // its chunks add to the steps of the requests decoding there.
                ttft_rows(candidates, rows, |observation| Observation {
                    kv_cache_percentage: 0.0,
                    waiting: 0,
                    running: 0,
                    prefill_tokens_in_flight: 0,
                    decode_tokens_in_flight: 0,
                    ms_since_last_token: stream_clock::IDLE_SINCE_MS,
                    last_step_ms: 0.0,
                    ..observation
                });
                idle_ttft.resize(n, 0.0);
                idle_rows.predict(&models.ttft, rows, TTFT_COLUMNS.len(), idle_ttft);
            }
            let running_tpot = self.settings.streaming.then(|| self.tracker.running());
            for (i, c) in candidates.iter_mut().enumerate() {
                let observation = c.attrs.observation.unwrap_or_default();
                let pod_min = running_tpot.as_ref().and_then(|running| running.min(&c.endpoint));
                let mut prediction = self.headroom(
                    req,
                    &observation,
                    f64::from(ttft[i]),
                    tpot_model.map(|_| f64::from(tpot[i])),
                    pod_min,
                    c.attrs.inflight.requests,
                    models.generation,
                );
                if let (Some(&idle), Some(phase)) = (idle_ttft.get(i), phases.get(i)) {
                    prediction.decode_stall_ms = f64::from(idle).max(0.0) * phase.decode_requests as f64;
                }
                c.attrs.latency = Some(prediction);
            }
        });
    }

    /// llm-d's `validatePrediction` (§4.3): headroom against the objectives, the TPOT one buffered and
    /// lowered to the tightest TPOT objective already running on the endpoint.
    #[allow(clippy::too_many_arguments)]
    fn headroom(
        &self,
        req: &SchedulingRequest<'_>,
        observation: &Observation,
        ttft_ms: f64,
        tpot_ms: Option<f64>,
        pod_min_tpot_slo: Option<f64>,
        dispatched_requests: i64,
        generation: u64,
    ) -> LatencyPrediction {
        let ttft_slo = req.slo.ttft_ms;
        let mut prediction = LatencyPrediction {
            ttft_ms,
            tpot_ms: tpot_ms.unwrap_or(0.0),
            ttft_valid: ttft_ms < ttft_slo,
            ttft_headroom_ms: ttft_slo - ttft_ms,
            tpot_valid: true,
            tpot_headroom_ms: 0.0,
            dispatched_requests,
            generation,
            decode_stall_ms: 0.0,
        };
        // No TPOT model yet (streaming, but too few streamed samples): TPOT is not enforced, as with
        // streaming off.
        if let (true, Some(tpot_ms)) = (self.enforces_tpot(observation), tpot_ms) {
            let factor = self.settings.slo_buffer_factor;
            let mut buffered = req.slo.tpot_ms * factor;
            if let Some(min) = pod_min_tpot_slo {
                buffered = buffered.min(min * factor);
            }
            prediction.tpot_headroom_ms = buffered - tpot_ms;
            prediction.tpot_valid = tpot_ms < buffered;
        }
        prediction
    }
}

/// Writes the candidates' TTFT rows into `rows`, each from its captured features as `adjust` leaves them.
fn ttft_rows(candidates: &[Candidate], rows: &mut Vec<f32>, adjust: impl Fn(Observation) -> Observation) {
    rows.clear();
    rows.resize(candidates.len() * TTFT_COLUMNS.len(), 0.0);
    for (chunk, c) in rows.chunks_exact_mut(TTFT_COLUMNS.len()).zip(candidates) {
        if let Ok(row) = <&mut [f32; TTFT_COLUMNS.len()]>::try_from(chunk) {
            adjust(c.attrs.observation.unwrap_or_default()).ttft_row(row);
        }
    }
}

impl DataProducer for PredictedLatencyProducer {
    fn produces(&self) -> &'static [DataKey] {
        &[DataKey::LatencyPrediction]
    }

    fn consumes(&self) -> &'static [DataKey] {
        &[DataKey::PrefixCacheMatch, DataKey::InFlightLoad]
    }

    fn prepare(&self, req: &SchedulingRequest<'_>, candidates: &mut [Candidate]) {
        BUFFERS.with(|buffers| {
            let phases = &mut buffers.borrow_mut().phases;
            phases.clear();
            // Copied out, so the lock that every dispatch, first chunk and completion takes is held for a
            // lookup per candidate, not for the feature capture.
            {
                let running = self.tracker.running();
                phases.extend(candidates.iter().map(|c| running.phase_load(&c.endpoint)));
            }
            for (c, &phase) in candidates.iter_mut().zip(phases.iter()) {
                c.attrs.latency = None;
                c.attrs.observation = Some(self.observe(req, c, phase));
            }
        });
        if self.settings.predict_in_produce && !candidates.is_empty() {
            self.predict(req, candidates);
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let settings = ProducerSettings::parse(name, TYPE_NAME, params)?;
    let handles = ctx
        .predictor
        .attach(settings.streaming)
        .map_err(|message| PluginError::new(name, TYPE_NAME, message))?;
    let producer =
        Arc::new(PredictedLatencyProducer::new(name, settings, handles, ctx.metrics.latency.clone()));
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .producer(producer.clone())
        .pre_request(producer.clone())
        .response(producer.clone())
        .endpoint_listener(producer))
}

#[cfg(test)]
mod tests;
