//! The shared side of epp's Prometheus metrics: the registry every component registers its own families
//! in, the label vocabulary (interned, escaped, bounded values and the label sets), the bucket layouts,
//! and the per-endpoint series index that removes an endpoint's series when it leaves the pool.
//!
//! Each component owns its families, linkerd2-proxy style: it registers them in the [`MetricsRegistry`]
//! handed to its constructor and keeps the handles it records with — `director::RequestMetrics`,
//! `scheduling::SchedulerMetrics`, the plugins' `PrefixIndexerMetrics` and `InflightMetrics`,
//! `flowcontrol::FlowControlMetrics`, `extproc::OverheadMetrics`, `telemetry::PoolMetrics`. Nothing hands a
//! plugin more than the handle it records with.
//!
//! Names are the GIE ones (`inference_objective_*`, `inference_pool_*`, `inference_extension_*`) and their
//! llm-d-router equivalents (`llm_d_epp_*`), so existing dashboards and the llm-d KEDA guides work
//! unchanged; every recording writes both. The exposition is OpenMetrics text (prometheus-client): serve
//! it with [`CONTENT_TYPE`] so Prometheus parses counter families as such.
//!
//! Differences from the Go EPP, on purpose:
//! - the Go `32778` bucket (a typo) in the response-size and token histograms is `32768`;
//! - `inference_objective_request_ttft_seconds` is recorded for every request (Go: only with the
//!   predicted-latency plugin);
//! - `pod_name` in `inference_extension_scheduler_attempts_total` is the endpoint name (`<pod>-rank-<i>`),
//!   the same value as llm-d's `endpoint_name`;
//! - `llm_d_epp_inflight_*` carry `fairness_id=""` and `priority=""`: epp aggregates per endpoint;
//! - when an endpoint leaves the pool, all of its series go, scheduler-attempt counters included (Go keeps
//!   those counters forever; with pod churn that is unbounded growth, and `rate()` copes with a series
//!   ending);
//! - request-derived label values are escaped (prometheus-client writes them verbatim);
//! - every family with request-derived labels holds at most `--max-series-per-family` series, the rest
//!   going to its overflow series and counted in `epp_metrics_dropped_label_sets_total{family}` (see
//!   [`CappedFamily`]); that counter is epp's own, hence the `epp_` prefix rather than an upstream one.

mod buckets;
mod capped;
mod endpoints;
mod kept;
mod labels;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::{Metric, Registry};

pub use buckets::*;
pub(crate) use capped::request_derived;
pub use capped::{
    CappedFamily, CappedHistograms, RequestDerived, SeriesCost, DEFAULT_MAX_SERIES_PER_FAMILY,
    OVERFLOW_SERIES_LABEL,
};
pub use endpoints::{EndpointSeries, PoolSummary, Pruner, Stats, TrackedEndpoint};
pub use kept::KeptHandles;
pub use labels::*;

/// The `Content-Type` of [`MetricsRegistry::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How many distinct model names (model and target together) and fairness ids may mint series before
/// further ones are reported as [`OVERFLOW_LABEL`] (the Go EPP's cap).
pub const MAX_MODEL_LABEL_VALUES: usize = 1000;
pub const MAX_FAIRNESS_LABEL_VALUES: usize = 1000;
/// Cap on config-derived label values (plugin, producer and rewrite names); a backstop only.
const MAX_CONFIG_LABEL_VALUES: usize = 10_000;

/// The `commit` label of the info metrics, stamped by `build.rs`.
pub const BUILD_COMMIT: &str = env!("EPP_GIT_COMMIT");
/// The `build_ref` label of the info metrics.
pub const BUILD_REF: &str = env!("CARGO_PKG_VERSION");

/// Help text with the `[ALPHA] ` stability prefix Go's `HelpMsgWithStability` adds. prometheus-client
/// appends `_total` to counter names and a `.` to help texts, so names omit `_total` and help texts the
/// final full stop.
pub fn alpha(text: &str) -> String {
    format!("[ALPHA] {text}")
}

/// Labels that identify a request's model, objective and flow in the per-request families.
#[derive(Debug, Clone, Copy)]
pub struct RequestLabels<'a> {
    pub model_name: &'a str,
    pub target_model_name: &'a str,
    pub priority: i32,
    pub fairness_id: &'a str,
}

/// The label values every component shares: the pool, and the bounded interners for request-derived
/// (model names, fairness ids) and config-derived (plugin, producer, rewrite names) values. Shared so a
/// model name admitted by one family is admitted by all, and the caps bound the whole exposition.
#[derive(Debug)]
pub struct SharedLabels {
    pub pool: LabelValue,
    pub models: BoundedLabels,
    pub fairness_ids: BoundedLabels,
    pub config_names: BoundedLabels,
}

impl SharedLabels {
    fn new(pool_name: &str) -> Self {
        Self {
            pool: LabelValue::new(pool_name),
            models: BoundedLabels::new(MAX_MODEL_LABEL_VALUES),
            fairness_ids: BoundedLabels::new(MAX_FAIRNESS_LABEL_VALUES),
            config_names: BoundedLabels::new(MAX_CONFIG_LABEL_VALUES),
        }
    }

    /// The model and target model of `l`, bounded.
    pub fn model_labels(&self, l: &RequestLabels<'_>) -> ModelLabels {
        ModelLabels {
            model_name: self.models.get(l.model_name),
            target_model_name: self.models.get(l.target_model_name),
        }
    }

    /// The model labels and the flow labels (model, target, fairness id, priority) of `l`, bounded.
    pub fn flow_labels(&self, l: &RequestLabels<'_>) -> (ModelLabels, FlowLabels) {
        let model = self.model_labels(l);
        let flow = FlowLabels {
            model_name: model.model_name.clone(),
            target_model_name: model.target_model_name.clone(),
            fairness_id: self.fairness_ids.get(l.fairness_id),
            priority: l.priority,
        };
        (model, flow)
    }
}

/// The registry the components register their families in, with the labels and the per-endpoint series
/// index they share. Registration happens at construction (config load, start-up), encoding at scrape
/// time, both under one short lock; recording never touches the registry.
#[derive(Debug)]
pub struct MetricsRegistry {
    registry: Mutex<Registry>,
    labels: Arc<SharedLabels>,
    endpoints: Arc<EndpointSeries>,
    /// The series cap of every [`CappedFamily`] registered here.
    max_series: NonZeroUsize,
    /// `epp_metrics_dropped_label_sets_total{family}`.
    dropped: Family<DroppedLabels, Counter>,
}

impl MetricsRegistry {
    /// A registry for the pool `pool_name` with the default series cap
    /// ([`DEFAULT_MAX_SERIES_PER_FAMILY`]).
    pub fn new(pool_name: &str) -> Arc<Self> {
        Self::with_max_series(pool_name, DEFAULT_MAX_SERIES_PER_FAMILY)
    }

    /// A registry for the pool `pool_name` whose capped families hold at most `max_series` series each,
    /// holding the info metrics (`inference_extension_info`, `llm_d_epp_info`, with the build's commit)
    /// and `epp_metrics_dropped_label_sets_total`.
    pub fn with_max_series(pool_name: &str, max_series: NonZeroUsize) -> Arc<Self> {
        let registry = Arc::new(Self {
            registry: Mutex::new(Registry::default()),
            labels: Arc::new(SharedLabels::new(pool_name)),
            endpoints: Arc::new(EndpointSeries::default()),
            max_series,
            dropped: Family::default(),
        });
        let info = InfoLabels { commit: BUILD_COMMIT, build_ref: BUILD_REF };
        for name in ["inference_extension_info", "llm_d_epp_info"] {
            let family = Family::<InfoLabels, Gauge>::default();
            family.get_or_create(&info).set(1);
            registry.register(name, alpha(INFO_HELP), family);
        }
        registry.register("epp_metrics_dropped_label_sets", DROPPED_HELP, registry.dropped.clone());
        registry
    }

    /// Registers one family (or metric) under `name`.
    pub fn register(&self, name: &str, help: impl Into<String>, metric: impl Metric) {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner).register(name, help.into(), metric);
    }

    /// Creates a family of series built by `constructor` (`Counter::default`, `Gauge::default`, a
    /// [`Buckets`] layout), capped at this registry's series cap, and registers it under `name`. Its
    /// `epp_metrics_dropped_label_sets_total{family=name}` series starts at 0.
    pub fn register_capped<L, M, C>(
        &self,
        name: &str,
        help: impl Into<String>,
        constructor: C,
    ) -> CappedFamily<L, M, C>
    where
        L: RequestDerived + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
        M: EncodeMetric + TypedMetric + std::fmt::Debug + Send + Sync + 'static,
        C: MetricConstructor<M> + SeriesCost + Clone + Send + Sync + 'static,
    {
        let dropped = self.dropped.get_or_create(&DroppedLabels { family: LabelValue::new(name) }).clone();
        let labels = self.labels.clone();
        let exempt = Arc::new(move |value: &str| labels.models.is_pinned(value));
        let family = CappedFamily::new(constructor, self.max_series.get(), dropped, exempt);
        self.register(name, help, family.family().clone());
        family
    }

    pub fn labels(&self) -> &Arc<SharedLabels> {
        &self.labels
    }

    /// The index of per-endpoint series, which components record through and add their pruners to.
    pub fn endpoints(&self) -> &Arc<EndpointSeries> {
        &self.endpoints
    }

    /// Admits configured model names (objectives, rewrite sources and targets) so they never fold into
    /// [`OVERFLOW_LABEL`] however many unknown names clients send.
    pub fn pin_model_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.labels.models.pin(name);
        }
    }

    /// The exposition text served at `/metrics` (OpenMetrics, ending in `# EOF`; see [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        // Writing into a String cannot fail; an error here would come from a label encoder.
        if let Err(e) = encode(&mut out, &self.registry.lock().unwrap_or_else(PoisonError::into_inner)) {
            tracing::error!(error = %e, "encoding the metrics exposition failed");
        }
        out
    }
}

const INFO_HELP: &str = "General information of the current build of Inference Extension";
const DROPPED_HELP: &str = "Recordings whose new label set found its family holding --max-series-per-family \
     series, recorded in the family's overflow series instead (request-derived labels read __overflow__)";
