//! The latency predictor of a lab run: the `predicted-latency-producer`'s training service, retrained at
//! virtual-time ticks, and what the run learns about it (warm-up, held-out and live error).
//!
//! Why the lab owns the service: in the server a thread retrains every `retrain_interval` of wall time,
//! which in a simulation that runs an hour of traffic in seconds would mean almost no retrains, and at
//! moments that depend on the machine. Here each run builds its own manual hub (llm-d's chart defaults,
//! `OnlineConfig::default()`: the first model once 100 samples exist, then a retrain every 10 s), takes the
//! service back after the config loaded, and retrains it on the simulation's own thread at every 10 s
//! of virtual time in which a request completed (the threaded worker also skips an interval without
//! samples). The trainer is seeded and its held-out split is a hash of the sample, so the same seed
//! gives the same models, the same routing and the same report.
//!
//! Warm-up is the virtual time of the first publication, when predictions replace the scorer's composite
//! fallback. Error is measured two ways: the held-out MAPE of the newest model (the trainer's own `Score`,
//! llm-d's figure), and the live error of what routing actually used: each chosen endpoint's prediction
//! against what the simulated engine then did (the same join epp exports as its prediction-error
//! histograms). With `streamingMode` off the TTFT model learns end-to-end latency, so its prediction is
//! compared with the request's E2E; with it on, TTFT with TTFT and TPOT with TPOT.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use epp::metrics::MetricsRegistry;
use epp::predictor::online::{HubMode, OnlineConfig, OnlinePredictor, Predictor, PredictorHub};
use epp::predictor::train::{Objective, Params};
use epp::scheduling::LatencyPrediction;

/// A fresh manual hub for one run: chart defaults but the objective, metrics in a registry nobody scrapes.
pub(crate) fn hub(objective: Objective) -> PredictorHub {
    let defaults = OnlineConfig::default();
    let config = OnlineConfig { params: Params { objective, ..defaults.params.clone() }, ..defaults };
    PredictorHub::new(config, MetricsRegistry::new("lab"), HubMode::Manual)
}

/// What a run reports about its predictor (`None` in the report when the config has no producer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictorReport {
    /// The producer's `streamingMode`: TTFT and TPOT models; off, one model of end-to-end latency.
    pub streaming: bool,
    /// Virtual seconds until the first model was published; `None` if none ever was.
    pub warmup_s: Option<f64>,
    /// Models published (retrains that produced a new generation).
    pub generations: u64,
    /// Decisions made without predictions (warm-up fallback) and with them.
    pub fallback_decisions: u64,
    pub predicted_decisions: u64,
    /// Held-out MAPE (a fraction) of the newest TTFT (E2E when not streaming) and TPOT models.
    pub ttft_heldout_mape: Option<f64>,
    pub tpot_heldout_mape: Option<f64>,
    /// Live MAPE of the chosen endpoints' predictions against the simulated outcome, over completed
    /// requests that were routed on a prediction.
    pub ttft_live_mape: Option<f64>,
    pub tpot_live_mape: Option<f64>,
}

/// A running mean of absolute percentage errors.
#[derive(Debug, Default, Clone, Copy)]
struct Ape {
    sum: f64,
    n: u64,
}

impl Ape {
    fn add(&mut self, predicted: f64, actual: f64) {
        if actual > 0.0 && predicted.is_finite() {
            self.sum += (predicted - actual).abs() / actual;
            self.n += 1;
        }
    }

    fn mean(self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

/// What happened to one completed request, in ms, for the live error.
pub(crate) struct Actual {
    pub ttft_ms: f64,
    pub e2e_ms: f64,
    pub output_tokens: u64,
}

/// The run's predictor service and its accounts.
pub(crate) struct Training {
    service: OnlinePredictor,
    predictor: Predictor,
    streaming: bool,
    interval: f64,
    /// The next retrain tick, in virtual seconds.
    next_tick: f64,
    /// A request completed since the last retrain.
    fresh: bool,
    warmup_s: Option<f64>,
    fallback: u64,
    predicted: u64,
    ttft: Ape,
    tpot: Ape,
}

impl Training {
    /// Takes the service a loaded config's producer attached to `hub`; `None` when no producer did.
    pub(crate) fn take(hub: &PredictorHub) -> Option<Self> {
        let streaming = hub.streaming()?;
        let service = hub.take()?;
        let predictor = service.predictor();
        let interval = OnlineConfig::default().retrain_interval.as_secs_f64();
        Some(Training {
            service,
            predictor,
            streaming,
            interval,
            next_tick: interval,
            fresh: false,
            warmup_s: None,
            fallback: 0,
            predicted: 0,
            ttft: Ape::default(),
            tpot: Ape::default(),
        })
    }

    /// The virtual time of the next retrain tick.
    pub(crate) fn next_tick(&self) -> f64 {
        self.next_tick
    }

    /// Runs the tick due at `next_tick`: retrains when a request completed since the last one.
    pub(crate) fn tick(&mut self) {
        let t = self.next_tick;
        self.next_tick += self.interval;
        if !std::mem::take(&mut self.fresh) {
            return;
        }
        if self.service.retrain_now() && self.warmup_s.is_none() {
            self.warmup_s = Some(t);
        }
    }

    /// A decision was made, on the chosen endpoint's prediction or without one.
    pub(crate) fn decided(&mut self, prediction: Option<&LatencyPrediction>) {
        match prediction {
            Some(_) => self.predicted += 1,
            None => self.fallback += 1,
        }
    }

    /// A routed request's first token came: its TTFT is training data for the next tick.
    pub(crate) fn first_token(&mut self) {
        self.fresh = true;
    }

    /// A routed request completed: it is training data for the next tick, and its prediction (if it
    /// had one) is scored against what happened.
    pub(crate) fn completed(&mut self, prediction: Option<&LatencyPrediction>, actual: &Actual) {
        self.fresh = true;
        let Some(p) = prediction else { return };
        if !self.streaming {
            self.ttft.add(p.ttft_ms, actual.e2e_ms);
            return;
        }
        self.ttft.add(p.ttft_ms, actual.ttft_ms);
        if p.tpot_ms > 0.0 && actual.output_tokens >= 2 {
            let tpot = (actual.e2e_ms - actual.ttft_ms) / (actual.output_tokens - 1) as f64;
            self.tpot.add(p.tpot_ms, tpot);
        }
    }

    pub(crate) fn report(&self) -> PredictorReport {
        let models = self.predictor.snapshot();
        let heldout = |m: Option<&Arc<epp::predictor::online::Models>>, tpot: bool| {
            let m = m?;
            let model = if tpot { m.tpot.as_ref()? } else { &m.ttft };
            model.score.map(|s| s.mape)
        };
        PredictorReport {
            streaming: self.streaming,
            warmup_s: self.warmup_s,
            generations: self.predictor.generation(),
            fallback_decisions: self.fallback,
            predicted_decisions: self.predicted,
            ttft_heldout_mape: heldout(models.as_ref(), false),
            tpot_heldout_mape: heldout(models.as_ref(), true),
            ttft_live_mape: self.ttft.mean(),
            tpot_live_mape: self.tpot.mean(),
        }
    }
}

/// Milliseconds from `from` to `to`.
pub(crate) fn millis(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ape_skips_zero_actuals_and_averages() {
        let mut ape = Ape::default();
        assert_eq!(ape.mean(), None);
        ape.add(110.0, 100.0);
        ape.add(5.0, 0.0);
        ape.add(30.0, 20.0);
        assert!((ape.mean().unwrap() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn no_producer_no_training() {
        assert!(Training::take(&hub(Objective::SquaredError)).is_none());
    }

    #[test]
    fn reads_back_the_producers_streaming_mode() {
        for streaming in [false, true] {
            let hub = hub(Objective::SquaredError);
            hub.attach(streaming).unwrap();
            let training = Training::take(&hub).unwrap();
            assert_eq!(training.streaming, streaming);
            let report = training.report();
            assert_eq!((report.warmup_s, report.generations), (None, 0));
        }
    }
}
