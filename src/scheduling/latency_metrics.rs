//! The predicted-latency families (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/
//! dataproducer/predictedlatency/metrics.go), under llm-d's names and GIE's deprecated
//! `inference_objective_request_*` duplicates, plus what llm-d does not export: the chosen endpoint's
//! prediction joined with what happened (llm-d-router #2380 asks for this feedback loop).
//!
//! - `llm_d_epp_request_predicted_{ttft,tpot}_seconds`: the prediction for the endpoint the request went to;
//! - `llm_d_epp_request_{ttft,tpot}_prediction_duration_seconds`: one request's batch prediction (every
//!   candidate);
//! - `llm_d_epp_request_slo_violation_total{type}`: requests whose observed TTFT or TPOT missed their
//!   objective;
//! - `llm_d_epp_request_streaming_tpot_seconds`: the observed average TPOT of streamed responses;
//! - `epp_request_prediction_error_ratio{model, accelerator}`: |predicted − observed| / observed of the
//!   chosen endpoint, per model (`ttft`, `tpot`) and accelerator class: live MAPE.
//!
//! Label values the client chooses (model names) go through the shared bounded interners and capped
//! families, as every request-derived family does.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;

use crate::metrics::{
    alpha, request_derived, Buckets, CappedFamily, HistogramFamily, LabelValue, MetricsRegistry,
    RequestLabels, SharedLabels,
};

/// llm-d's TTFT buckets (5 ms … 3,600 s).
const TTFT_SECONDS: Buckets = crate::metrics::GENERAL_LATENCY;
/// llm-d's TPOT buckets (0.5 ms … 360 s).
const TPOT_SECONDS: Buckets = Buckets(&[
    0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.0125, 0.015, 0.02,
    0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0, 2.5, 10.0, 60.0, 360.0,
]);
/// llm-d's prediction-duration buckets, 0.1 ms … 5 s.
const PREDICTION_SECONDS: Buckets =
    Buckets(&[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]);
/// Absolute percentage error as a fraction: 1% … 500%.
const ERROR_RATIO: Buckets = Buckets(&[0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0]);

/// `{plugin_name, plugin_type, model_name, target_model_name}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PredictionLabels {
    pub plugin_name: LabelValue,
    pub plugin_type: &'static str,
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
}

/// [`PredictionLabels`] plus `type` (`ttft` / `tpot`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ViolationLabels {
    pub plugin_name: LabelValue,
    pub plugin_type: &'static str,
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
    pub r#type: &'static str,
}

/// `{model, accelerator}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    pub model: &'static str,
    pub accelerator: LabelValue,
}

request_derived! {
    PredictionLabels { model_name, target_model_name },
    ViolationLabels { model_name, target_model_name },
}

/// Which latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyKind {
    Ttft,
    Tpot,
}

impl LatencyKind {
    fn as_str(self) -> &'static str {
        match self {
            LatencyKind::Ttft => "ttft",
            LatencyKind::Tpot => "tpot",
        }
    }
}

/// One family under its llm-d name and its GIE duplicate.
#[derive(Debug, Clone)]
struct Pair<L, M, C> {
    llmd: CappedFamily<L, M, C>,
    gie: CappedFamily<L, M, C>,
}

type HistogramPair = Pair<PredictionLabels, prometheus_client::metrics::histogram::Histogram, Buckets>;

/// The predicted-latency families.
#[derive(Debug)]
pub struct LatencyMetrics {
    labels: Arc<SharedLabels>,
    predicted_ttft: HistogramPair,
    predicted_tpot: HistogramPair,
    ttft_duration: HistogramPair,
    tpot_duration: HistogramPair,
    actual_tpot: HistogramPair,
    violations: Pair<ViolationLabels, Counter, fn() -> Counter>,
    errors: HistogramFamily<ErrorLabels>,
}

fn pair<L: crate::metrics::RequestDerived + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static>(
    r: &MetricsRegistry,
    stem: &str,
    help: &str,
    buckets: Buckets,
) -> Pair<L, prometheus_client::metrics::histogram::Histogram, Buckets> {
    Pair {
        llmd: r.register_capped(&format!("llm_d_epp_request_{stem}"), alpha(help), buckets),
        gie: r.register_capped(&format!("inference_objective_request_{stem}"), alpha(help), buckets),
    }
}

impl LatencyMetrics {
    pub(crate) fn register(r: &MetricsRegistry) -> Arc<Self> {
        let m = LatencyMetrics {
            labels: r.labels().clone(),
            predicted_ttft: pair(
                r,
                "predicted_ttft_seconds",
                "Predicted time to first token of the endpoint each request was sent to, in seconds",
                TTFT_SECONDS,
            ),
            predicted_tpot: pair(
                r,
                "predicted_tpot_seconds",
                "Predicted time per output token of the endpoint each request was sent to, in seconds",
                TPOT_SECONDS,
            ),
            ttft_duration: pair(
                r,
                "ttft_prediction_duration_seconds",
                "Time to predict TTFT for every candidate endpoint of a request, in seconds",
                PREDICTION_SECONDS,
            ),
            tpot_duration: pair(
                r,
                "tpot_prediction_duration_seconds",
                "Time to predict TPOT for every candidate endpoint of a request, in seconds",
                PREDICTION_SECONDS,
            ),
            actual_tpot: pair(
                r,
                "streaming_tpot_seconds",
                "Observed average time per output token of streamed responses, in seconds",
                TPOT_SECONDS,
            ),
            violations: Pair {
                llmd: r.register_capped(
                    "llm_d_epp_request_slo_violation",
                    alpha("Requests whose observed TTFT or TPOT missed the request's objective"),
                    Counter::default as fn() -> Counter,
                ),
                gie: r.register_capped(
                    "inference_objective_request_slo_violation",
                    alpha("Requests whose observed TTFT or TPOT missed the request's objective"),
                    Counter::default as fn() -> Counter,
                ),
            },
            errors: ERROR_RATIO.family(),
        };
        r.register(
            "epp_request_prediction_error_ratio",
            "Absolute percentage error (as a fraction) of the chosen endpoint's predicted latency against \
             the observed one, per model and accelerator class",
            m.errors.clone(),
        );
        Arc::new(m)
    }

    /// Handles registered nowhere (tests, the lab).
    pub fn detached() -> Arc<Self> {
        Self::register(&MetricsRegistry::new("detached"))
    }

    /// The label set of one request for the plugin `plugin_name`.
    pub fn labels_for(
        &self,
        plugin_name: &str,
        plugin_type: &'static str,
        l: RequestLabels<'_>,
    ) -> PredictionLabels {
        let model = self.labels.model_labels(&l);
        PredictionLabels {
            plugin_name: self.labels.config_names.get(plugin_name),
            plugin_type,
            model_name: model.model_name,
            target_model_name: model.target_model_name,
        }
    }

    /// The chosen endpoint's predicted latency, in milliseconds.
    pub fn predicted(&self, labels: &PredictionLabels, kind: LatencyKind, ms: f64) {
        let p = match kind {
            LatencyKind::Ttft => &self.predicted_ttft,
            LatencyKind::Tpot => &self.predicted_tpot,
        };
        observe(p, labels, ms / 1000.0);
    }

    /// How long one request's batch prediction took.
    pub fn prediction_duration(&self, labels: &PredictionLabels, kind: LatencyKind, seconds: f64) {
        let p = match kind {
            LatencyKind::Ttft => &self.ttft_duration,
            LatencyKind::Tpot => &self.tpot_duration,
        };
        observe(p, labels, seconds);
    }

    /// The observed average TPOT of a streamed response, in milliseconds.
    pub fn observed_tpot(&self, labels: &PredictionLabels, ms: f64) {
        observe(&self.actual_tpot, labels, ms / 1000.0);
    }

    /// The observed latency missed the objective.
    pub fn violation(&self, labels: &PredictionLabels, kind: LatencyKind) {
        let v = ViolationLabels {
            plugin_name: labels.plugin_name.clone(),
            plugin_type: labels.plugin_type,
            model_name: labels.model_name.clone(),
            target_model_name: labels.target_model_name.clone(),
            r#type: kind.as_str(),
        };
        self.violations.llmd.get_or_create(&v).inc();
        self.violations.gie.get_or_create(&v).inc();
    }

    /// The chosen endpoint's prediction against the observed value (both in ms; skipped when nothing was
    /// observed).
    pub fn prediction_error(
        &self,
        kind: LatencyKind,
        accelerator: &str,
        predicted_ms: f64,
        observed_ms: f64,
    ) {
        if observed_ms.is_nan() || observed_ms <= 0.0 || !predicted_ms.is_finite() {
            return;
        }
        let labels =
            ErrorLabels { model: kind.as_str(), accelerator: self.labels.config_names.get(accelerator) };
        self.errors.get_or_create(&labels).observe((predicted_ms - observed_ms).abs() / observed_ms);
    }
}

fn observe(p: &HistogramPair, labels: &PredictionLabels, value: f64) {
    p.llmd.get_or_create(labels).observe(value);
    p.gie.get_or_create(labels).observe(value);
}
