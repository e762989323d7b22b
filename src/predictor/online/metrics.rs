//! The predictor's own families (epp's; llm-d's training server exposes the same facts on its separate
//! `/metrics` as `ttft_coverage_percent`, `ttft_mae`, bucket counts…, llm-d/llm-d-latency-predictor:
//! training/training_server.py, so the names here are `epp_predictor_*`):
//!
//! - `epp_predictor_samples{model}`, `epp_predictor_buckets_filled{model}`, `epp_predictor_test_samples{model}`:
//!   the training window (samples, strata with at least one sample out of 400, held-out samples);
//! - `epp_predictor_samples_dropped_total`: completed requests not taken because the intake was full;
//! - `epp_predictor_model_generation`, `epp_predictor_last_retrain_timestamp_seconds`: what is published;
//! - `epp_predictor_training_duration_seconds{model}`: one model's retrain, on the background thread;
//! - `epp_predictor_test_mape{model}`, `epp_predictor_test_coverage{model}`: the latest model on the
//!   held-out split, as fractions (the mean model's measure and the quantile model's);
//! - `epp_predictor_retrain_errors_total{model}`, `epp_predictor_save_errors_total`.
//!
//! Labels are fixed (`ttft`, `tpot`), so no family here needs a series cap.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{Buckets, FloatGauge, HistogramFamily, MetricsRegistry};

use super::models::{Score, Target};

/// A retrain takes milliseconds on a few hundred rows and seconds on a full 200,000-row window.
const TRAINING_SECONDS: Buckets =
    Buckets(&[0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: &'static str,
}

fn label(target: Target) -> ModelLabel {
    ModelLabel { model: target.as_str() }
}

/// The predictor families.
#[derive(Debug)]
pub struct PredictorMetrics {
    samples: Family<ModelLabel, Gauge>,
    buckets_filled: Family<ModelLabel, Gauge>,
    test_samples: Family<ModelLabel, Gauge>,
    pub(super) dropped: Counter,
    generation: Gauge,
    last_retrain: FloatGauge,
    training_seconds: HistogramFamily<ModelLabel>,
    mape: Family<ModelLabel, FloatGauge>,
    coverage: Family<ModelLabel, FloatGauge>,
    retrain_errors: Family<ModelLabel, Counter>,
    save_errors: Counter,
}

impl PredictorMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let m = PredictorMetrics {
            samples: Family::default(),
            buckets_filled: Family::default(),
            test_samples: Family::default(),
            dropped: Counter::default(),
            generation: Gauge::default(),
            last_retrain: FloatGauge::default(),
            training_seconds: TRAINING_SECONDS.family(),
            mape: Family::default(),
            coverage: Family::default(),
            retrain_errors: Family::default(),
            save_errors: Counter::default(),
        };
        registry.register(
            "epp_predictor_samples",
            "Training samples in the predictor's window",
            m.samples.clone(),
        );
        registry.register(
            "epp_predictor_buckets_filled",
            "Strata (queue x KV x prefix, 400 in all) holding at least one training sample",
            m.buckets_filled.clone(),
        );
        registry.register(
            "epp_predictor_test_samples",
            "Held-out samples the models are scored on",
            m.test_samples.clone(),
        );
        registry.register(
            "epp_predictor_samples_dropped",
            "Completed requests not taken for training because the predictor's intake was full",
            m.dropped.clone(),
        );
        registry.register(
            "epp_predictor_model_generation",
            "Generation of the published models (0: none yet)",
            m.generation.clone(),
        );
        registry.register(
            "epp_predictor_last_retrain_timestamp_seconds",
            "Unix time of the last publication of retrained models",
            m.last_retrain.clone(),
        );
        registry.register(
            "epp_predictor_training_duration_seconds",
            "Time to retrain one model on the background thread",
            m.training_seconds.clone(),
        );
        registry.register(
            "epp_predictor_test_mape",
            "Mean absolute percentage error of the latest model on the held-out samples, as a fraction",
            m.mape.clone(),
        );
        registry.register(
            "epp_predictor_test_coverage",
            "Fraction of held-out samples at or below the latest model's prediction (a quantile model's \
                 target is its alpha)",
            m.coverage.clone(),
        );
        registry.register(
            "epp_predictor_retrain_errors",
            "Retrains that failed, keeping the previous model",
            m.retrain_errors.clone(),
        );
        registry.register(
            "epp_predictor_save_errors",
            "Failed writes of the model files",
            m.save_errors.clone(),
        );
        Arc::new(m)
    }

    pub(super) fn set_window(&self, target: Target, samples: usize, buckets_filled: usize, test: usize) {
        let l = label(target);
        self.samples.get_or_create(&l).set(samples as i64);
        self.buckets_filled.get_or_create(&l).set(buckets_filled as i64);
        self.test_samples.get_or_create(&l).set(test as i64);
    }

    pub(super) fn trained(&self, target: Target, took: Duration, score: Option<Score>) {
        let l = label(target);
        self.training_seconds.get_or_create(&l).observe(took.as_secs_f64());
        if let Some(score) = score {
            self.mape.get_or_create(&l).set(score.mape);
            self.coverage.get_or_create(&l).set(score.coverage);
        }
    }

    pub(super) fn retrain_failed(&self, target: Target) {
        self.retrain_errors.get_or_create(&label(target)).inc();
    }

    /// A generation was published; `retrained` when it came from a retrain (not a file).
    pub(super) fn published(&self, generation: u64, retrained: bool) {
        self.generation.set(i64::try_from(generation).unwrap_or(i64::MAX));
        if retrained {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            self.last_retrain.set(now.as_secs_f64());
        }
    }

    pub(super) fn save_failed(&self) {
        self.save_errors.inc();
    }
}
