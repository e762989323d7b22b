//! The producer's request-lifecycle half: at dispatch it records the chosen endpoint's prediction and
//! registers the request's TPOT objective there; on the response it times the first chunk (sending a
//! streamed 2xx answer's TTFT training row then) and counts chunks; at the end it turns what happened into
//! the rest of the predictor's training row (llm-d §4.4) and into the live metrics — the observed
//! latency, SLO violations, and the prediction's error against it.
//!
//! Training follows llm-d's timing: the clock starts at dispatch (llm-d: PreRequest). With streaming mode
//! on, a streamed request's TTFT is its first response chunk and its TPOT is `(e2e − ttft) / (tokens − 1)`,
//! with `tokens` the `usage.completion_tokens` the server reported (exact) or else the chunks counted (as
//! llm-d always does); a request that did not ask for a stream trains nothing (its first chunk is its
//! whole response). With streaming mode off, the TTFT model learns end-to-end latency. Only responses
//! that finished with a 2xx status train or count: an error's latency says nothing about the endpoint's
//! speed.

use std::sync::Arc;
use std::time::Instant;

use crate::datastore::Endpoint;
use crate::metrics::RequestLabels;
use crate::predictor::online::Completion as TrainingRow;
use crate::scheduling::{
    Completion, CompletionKind, DispatchInfo, EndpointListener, LatencyKind, PreRequest, ResponseHook,
    SchedulingRequest, SchedulingResult,
};

use super::tracking::{PhaseLoad, Record};
use super::{PredictedLatencyProducer, TYPE_NAME};

/// The metric labels of a request as the scheduling cycle sees it.
pub(super) fn request_labels<'a>(req: &SchedulingRequest<'a>) -> RequestLabels<'a> {
    RequestLabels {
        model_name: req.parsed.map_or("", |p| p.model.as_str()),
        target_model_name: req.target_model,
        priority: req.priority,
        fairness_id: req.fairness_id,
    }
}

fn millis(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

impl PreRequest for PredictedLatencyProducer {
    fn pre_request(&self, req: &SchedulingRequest<'_>, _: &SchedulingResult, info: &DispatchInfo) {
        // The producer did not run for this request (it cannot happen in a configured pipeline, whose
        // producers run before every cycle): nothing was captured to learn from.
        let Some(observation) = info.attrs.observation else { return };
        let labels = self.metrics.labels_for(&self.name, TYPE_NAME, request_labels(req));
        let prediction = info.attrs.latency;
        if let Some(p) = &prediction {
            self.metrics.predicted(&labels, LatencyKind::Ttft, p.ttft_ms);
            if self.enforces_tpot(&observation) && p.tpot_ms > 0.0 {
                self.metrics.predicted(&labels, LatencyKind::Tpot, p.tpot_ms);
            }
        }
        let running_tpot_slo_ms =
            (self.enforces_tpot(&observation) && req.slo.tpot_ms > 0.0).then_some(req.slo.tpot_ms);
        let record = Record {
            endpoint: info.endpoint.clone(),
            observation,
            prediction,
            ttft_slo_ms: req.slo.ttft_ms,
            running_tpot_slo_ms,
            stream: req.parsed.is_some_and(|p| p.stream),
            dispatched_at: info.dispatched_at,
            first_chunk_at: None,
            chunks: 0,
            status_2xx: None,
            ttft_trained: false,
            labels,
            phase: PhaseLoad::prefilling(&observation),
        };
        self.tracker.insert(info.dispatch_id, record, req.now);
    }
}

impl ResponseHook for PredictedLatencyProducer {
    fn on_response_headers(
        &self,
        info: &DispatchInfo,
        status: Option<u16>,
        _served: Option<&str>,
        _set_headers: &mut Vec<(String, String)>,
    ) {
        if self.settings.streaming {
            self.tracker.status(info.dispatch_id, status);
        }
    }

    fn on_response_chunk(&self, info: &DispatchInfo, _chunk: &[u8], first: bool, now: Instant) {
        let Some((observation, ttft)) = self.tracker.chunk(info.dispatch_id, first, now) else { return };
        if self.settings.streaming {
            // The TTFT row goes now, not when the answer ends: a long answer's TTFT would otherwise reach
            // the trainer tens of seconds late, and a slow endpoint's least, so the first models would
            // know a slow class only from its shortest answers (`docs/predicted-latency.md`).
            let ttft_ms = Some(ttft.as_secs_f64() as f32 * 1000.0);
            self.intake.record(TrainingRow { observation, ttft_ms, tpot_ms: None });
        }
    }

    fn handles_response_chunks(&self) -> bool {
        true
    }

    /// In streaming mode TTFT is the first chunk and TPOT the chunks after it; without streaming mode the
    /// end of the request is the label, which epp sees without the body.
    fn reads_answer_chunks(&self) -> bool {
        self.settings.streaming
    }

    fn on_complete(&self, info: &DispatchInfo, completion: &Completion) {
        let Some(record) = self.tracker.remove(info.dispatch_id) else { return };
        let succeeded = completion.kind == CompletionKind::Finished
            && completion.status.is_some_and(|s| (200..300).contains(&s));
        if !succeeded {
            return;
        }
        let Some((ttft_ms, mut row)) = self.training_row(&record, completion) else { return };
        self.observe_outcome(&record, ttft_ms, row.tpot_ms);
        if record.ttft_trained {
            row.ttft_ms = None;
        }
        // A full intake drops the row and counts it (the predictor's own metric): never blocks.
        if row.ttft_ms.is_some() || row.tpot_ms.is_some() {
            self.intake.record(row);
        }
    }
}

impl PredictedLatencyProducer {
    /// The TTFT (with streaming mode off, the end-to-end latency) and training row of a finished request,
    /// `None` when it teaches nothing (llm-d §4.4).
    fn training_row(&self, record: &Record, completion: &Completion) -> Option<(f32, TrainingRow)> {
        let e2e_ms = millis(record.dispatched_at, completion.now);
        if !self.settings.streaming {
            let ttft_ms = e2e_ms as f32;
            return Some((
                ttft_ms,
                TrainingRow { observation: record.observation, ttft_ms: Some(ttft_ms), tpot_ms: None },
            ));
        }
        if !record.stream {
            return None;
        }
        let first = record.first_chunk_at?;
        let ttft_ms = millis(record.dispatched_at, first);
        let tokens =
            completion.usage.map(|u| u.completion_tokens).filter(|&t| t > 0).unwrap_or(record.chunks);
        let tpot_ms = (tokens >= 2 && self.enforces_tpot(&record.observation))
            .then(|| ((e2e_ms - ttft_ms).max(0.0) / (tokens - 1) as f64) as f32);
        let ttft_ms = ttft_ms as f32;
        Some((ttft_ms, TrainingRow { observation: record.observation, ttft_ms: Some(ttft_ms), tpot_ms }))
    }

    /// The live metrics of what happened: observed TPOT, SLO violations, and the prediction's error.
    fn observe_outcome(&self, record: &Record, ttft_ms: f32, tpot_ms: Option<f32>) {
        let ttft_ms = f64::from(ttft_ms);
        let tpot_ms = tpot_ms.map(f64::from);
        if let Some(tpot) = tpot_ms {
            self.metrics.observed_tpot(&record.labels, tpot);
        }
        if record.ttft_slo_ms > 0.0 && ttft_ms > record.ttft_slo_ms {
            self.metrics.violation(&record.labels, LatencyKind::Ttft);
        }
        if let (Some(slo), Some(tpot)) = (record.running_tpot_slo_ms, tpot_ms) {
            if tpot > slo {
                self.metrics.violation(&record.labels, LatencyKind::Tpot);
            }
        }
        if let Some(p) = &record.prediction {
            let accelerator = self.settings.accelerator(&record.endpoint);
            self.metrics.prediction_error(LatencyKind::Ttft, accelerator, p.ttft_ms, ttft_ms);
            if let Some(tpot) = tpot_ms.filter(|_| p.tpot_ms > 0.0) {
                self.metrics.prediction_error(LatencyKind::Tpot, accelerator, p.tpot_ms, tpot);
            }
        }
    }

    /// Requests dispatched and not yet ended (or expired).
    pub fn tracked_requests(&self) -> usize {
        self.tracker.len()
    }

    /// TPOT objectives registered on endpoints.
    pub fn running_objectives(&self) -> usize {
        self.tracker.running().len()
    }

    /// Endpoints this producer counts tokens in flight on (0 once every request has ended).
    pub fn endpoints_with_tokens_in_flight(&self) -> usize {
        self.tracker.running().loaded_endpoints()
    }
}

impl EndpointListener for PredictedLatencyProducer {
    fn on_endpoints_removed(&self, removed: &[Arc<Endpoint>]) {
        self.tracker.forget_endpoints(removed);
    }
}
