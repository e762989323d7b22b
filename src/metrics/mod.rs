//! epp's own Prometheus registry: the GIE names (`inference_objective_*`, `inference_pool_*`,
//! `inference_extension_*`) and their llm-d-router equivalents (`llm_d_epp_*`), so existing dashboards
//! and the llm-d KEDA guides work unchanged when the Go EPP image is swapped for epp.
//!
//! Every recording method writes both names. The exposition is OpenMetrics text (prometheus-client):
//! serve it with [`CONTENT_TYPE`] so Prometheus parses counter families as such.
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
//! - request-derived label values are escaped (prometheus-client writes them verbatim).

mod buckets;
mod endpoints;
mod families;
mod flow_control;
mod labels;
mod registration;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use crate::datastore::Endpoint;
use crate::error::ErrorCode;
use crate::request::Usage;

use endpoints::EndpointSeries;
pub use endpoints::{PoolSummary, Stats};
use families::Families;
pub use flow_control::FlowQueueLabels;
pub use labels::OVERFLOW_LABEL;
use labels::*;

/// The `Content-Type` of [`EppMetrics::encode`]'s output.
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

/// Labels that identify a request's model, objective and flow in the per-request families.
#[derive(Debug, Clone, Copy)]
pub struct RequestLabels<'a> {
    pub model_name: &'a str,
    pub target_model_name: &'a str,
    pub priority: i32,
    pub fairness_id: &'a str,
}

/// All metric families epp exports, registered in one registry.
#[derive(Debug)]
pub struct EppMetrics {
    pool_name: String,
    pool_label: LabelValue,
    registry: Registry,
    families: Families,
    models: BoundedLabels,
    fairness_ids: BoundedLabels,
    config_names: BoundedLabels,
    endpoints: EndpointSeries,
    /// The sum of `llm_d_epp_request_running` over all series, kept beside the families so it can be read.
    running_total: AtomicI64,
}

impl EppMetrics {
    pub fn new(pool_name: &str) -> Self {
        let mut registry = Registry::default();
        let families = Families::register(&mut registry);
        let info = InfoLabels { commit: BUILD_COMMIT, build_ref: BUILD_REF };
        families.epp.gie_info.get_or_create(&info).set(1);
        families.epp.llmd_info.get_or_create(&info).set(1);
        Self {
            pool_name: pool_name.to_string(),
            pool_label: LabelValue::new(pool_name),
            registry,
            families,
            models: BoundedLabels::new(MAX_MODEL_LABEL_VALUES),
            fairness_ids: BoundedLabels::new(MAX_FAIRNESS_LABEL_VALUES),
            config_names: BoundedLabels::new(MAX_CONFIG_LABEL_VALUES),
            endpoints: EndpointSeries::default(),
            running_total: AtomicI64::new(0),
        }
    }

    pub fn pool_name(&self) -> &str {
        &self.pool_name
    }

    /// The registry, for encoding it with other registries or in another format.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition text served at `/metrics` (OpenMetrics, ending in `# EOF`; see [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        // Writing into a String cannot fail; an error here would come from a label encoder.
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics exposition failed");
        }
        out
    }

    /// Admits configured model names (objectives, rewrite sources and targets) so they never fold into
    /// [`OVERFLOW_LABEL`] however many unknown names clients send.
    pub fn pin_model_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.models.pin(name);
        }
    }

    fn model_labels(&self, l: &RequestLabels<'_>) -> ModelLabels {
        ModelLabels {
            model_name: self.models.get(l.model_name),
            target_model_name: self.models.get(l.target_model_name),
        }
    }

    fn flow_labels(&self, l: &RequestLabels<'_>) -> (ModelLabels, FlowLabels) {
        let model = self.model_labels(l);
        let flow = FlowLabels {
            model_name: model.model_name.clone(),
            target_model_name: model.target_model_name.clone(),
            fairness_id: self.fairness_ids.get(l.fairness_id),
            priority: l.priority,
        };
        (model, flow)
    }

    /// A request was scheduled and forwarded (`inference_objective_request_total`, `llm_d_epp_request_total`).
    pub fn record_request(&self, l: RequestLabels<'_>, request_bytes: usize) {
        let (model, flow) = self.flow_labels(&l);
        let (g, d) = (&self.families.gie, &self.families.llmd);
        let bytes = request_bytes as f64;
        g.request_sizes.get_or_create(&model).observe(bytes);
        d.request_sizes.get_or_create(&flow).observe(bytes);
        d.requests.get_or_create(&flow).inc();
        g.requests.get_or_create(&model.with_priority(l.priority)).inc();
    }

    /// A request ended with an error (`*_request_error_total{error_code}`).
    pub fn record_error(&self, l: RequestLabels<'_>, code: ErrorCode) {
        let (model, flow) = self.flow_labels(&l);
        let error_code = code.as_str();
        self.families.llmd.errors.get_or_create(&flow.with_error(error_code)).inc();
        self.families.gie.errors.get_or_create(&model.with_error(error_code)).inc();
    }

    /// A request finished: total duration, response bytes, token usage.
    pub fn record_response(
        &self,
        l: RequestLabels<'_>,
        duration: Duration,
        response_bytes: usize,
        usage: Option<Usage>,
    ) {
        let (model, flow) = self.flow_labels(&l);
        let (g, d) = (&self.families.gie, &self.families.llmd);
        let secs = duration.as_secs_f64();
        g.duration.get_or_create(&model).observe(secs);
        d.duration.get_or_create(&flow).observe(secs);
        let bytes = response_bytes as f64;
        g.response_sizes.get_or_create(&model).observe(bytes);
        d.response_sizes.get_or_create(&flow).observe(bytes);
        let Some(usage) = usage else { return };
        // As in Go: token histograms skip zero counts, except cached tokens (zero hits are informative).
        if usage.prompt_tokens > 0 {
            let v = usage.prompt_tokens as f64;
            g.input_tokens.get_or_create(&model).observe(v);
            d.input_tokens.get_or_create(&flow).observe(v);
        }
        if usage.completion_tokens > 0 {
            let v = usage.completion_tokens as f64;
            g.output_tokens.get_or_create(&model).observe(v);
            d.output_tokens.get_or_create(&flow).observe(v);
            if secs > 0.0 {
                let ntpot = secs / v;
                g.ntpot.get_or_create(&model).observe(ntpot);
                d.ntpot.get_or_create(&flow).observe(ntpot);
            }
        }
        let cached = usage.cached_tokens as f64;
        g.cached_tokens.get_or_create(&model).observe(cached);
        d.cached_tokens.get_or_create(&flow).observe(cached);
    }

    /// Time to first response byte, as seen by epp.
    pub fn record_ttft(&self, l: RequestLabels<'_>, ttft: Duration, streaming: bool) {
        let (model, flow) = self.flow_labels(&l);
        let secs = ttft.as_secs_f64();
        self.families.gie.ttft.get_or_create(&model).observe(secs);
        self.families.llmd.ttft.get_or_create(&flow.with_streaming(streaming)).observe(secs);
    }

    /// A request started running on a model server. Requests without a model name are not counted
    /// (as in Go).
    pub fn running_inc(&self, l: RequestLabels<'_>) {
        if l.model_name.is_empty() {
            return;
        }
        let (model, flow) = self.flow_labels(&l);
        self.families.gie.running.get_or_create(&ModelNameLabels { model_name: model.model_name }).inc();
        self.families.llmd.running.get_or_create(&flow).inc();
        self.running_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests currently running on model servers as this EPP counts them (the sum of
    /// `llm_d_epp_request_running`; requests without a model name are not counted).
    pub fn running_requests(&self) -> i64 {
        self.running_total.load(Ordering::Relaxed)
    }

    /// A running request ended. Never takes a gauge below zero: an unmatched decrement is a caller bug,
    /// logged, and must not publish a negative count.
    pub fn running_dec(&self, l: RequestLabels<'_>) {
        if l.model_name.is_empty() {
            return;
        }
        let (model, flow) = self.flow_labels(&l);
        let gie = self.families.gie.running.get_or_create(&ModelNameLabels { model_name: model.model_name });
        let llmd = self.families.llmd.running.get_or_create(&flow);
        let decremented = [&*gie, &*llmd].map(|gauge| {
            gauge
                .inner()
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| (v > 0).then(|| v - 1))
                .is_ok()
        });
        if decremented[1] {
            self.running_total.fetch_sub(1, Ordering::Relaxed);
        }
        if decremented.contains(&false) {
            tracing::warn!(
                model = l.model_name,
                target = l.target_model_name,
                "running_dec without a matching running_inc; gauge kept at zero"
            );
        }
    }

    /// One scheduling cycle's duration and outcome; `endpoint` is the picked endpoint, `None` on failure.
    pub fn record_scheduling(&self, duration: Duration, target_model: &str, endpoint: Option<&Endpoint>) {
        let e = &self.families.epp;
        let secs = duration.as_secs_f64();
        e.gie_scheduler_e2e.observe(secs);
        e.llmd_scheduler_e2e.observe(secs);
        let target = self.models.get(target_model);
        match endpoint {
            Some(endpoint) => self.endpoints.with(endpoint, &self.families, &self.pool_label, |tracked| {
                tracked.note_target(&target);
                let labels = tracked.attempt_labels(&target);
                e.llmd_attempts.get_or_create(&LlmdAttemptLabels::from(&labels)).inc();
                e.gie_attempts.get_or_create(&labels).inc();
            }),
            None => {
                let empty = self.models.get("");
                let labels = GieAttemptLabels {
                    status: "failure",
                    target_model_name: target,
                    pod_name: empty.clone(),
                    namespace: empty,
                    port: None,
                };
                e.llmd_attempts.get_or_create(&LlmdAttemptLabels::from(&labels)).inc();
                e.gie_attempts.get_or_create(&labels).inc();
            }
        }
    }

    /// One plugin call's duration, by extension point (`Scorer`, `Filter`, ...), plugin type and name.
    pub fn observe_plugin(
        &self,
        extension_point: &'static str,
        plugin_type: &'static str,
        name: &str,
        secs: f64,
    ) {
        let labels = PluginLabels { extension_point, plugin_type, plugin_name: self.config_names.get(name) };
        self.families.epp.llmd_plugin.get_or_create(&labels).observe(secs);
        self.families.epp.gie_plugin.get_or_create(&labels).observe(secs);
    }

    /// Time epp spent on the request path (headers received → routing answer sent), excluding flow-control queueing.
    pub fn observe_request_processing(&self, duration: Duration) {
        self.families.epp.request_processing.observe(duration.as_secs_f64());
    }

    /// Time epp spent handling one response message.
    pub fn observe_response_processing(&self, duration: Duration) {
        self.families.epp.response_processing.observe(duration.as_secs_f64());
    }

    /// A model rewrite rule `rewrite_name` rewrote `model` to `target`.
    pub fn record_model_rewrite(&self, rewrite_name: &str, model: &str, target: &str) {
        let labels = RewriteLabels {
            model_rewrite_name: self.config_names.get(rewrite_name),
            model_name: self.models.get(model),
            target_model: self.models.get(target),
        };
        self.families.epp.llmd_rewrites.get_or_create(&labels).inc();
        self.families.epp.gie_rewrites.get_or_create(&labels).inc();
    }

    /// Entries in the prefix-cache indexer.
    pub fn set_prefix_indexer_size(&self, entries: i64) {
        self.families.epp.prefix_size.set(entries);
    }

    /// One prefix-cache lookup: the matched fraction of the prompt and the matched length in bytes.
    pub fn observe_prefix_hit(&self, ratio: f64, hit_bytes: usize) {
        self.families.epp.prefix_hit_ratio.observe(ratio);
        self.families.epp.prefix_hit_bytes.observe(hit_bytes as f64);
    }

    /// The in-flight load `producer_name` tracks for `endpoint` (`llm_d_epp_inflight_{requests,tokens}`).
    pub fn set_inflight(&self, endpoint: &Endpoint, producer_name: &str, requests: i64, tokens: i64) {
        let producer = self.config_names.get(producer_name);
        let e = &self.families.epp;
        self.endpoints.with(endpoint, &self.families, &self.pool_label, |tracked| {
            tracked.note_producer(&producer);
            let labels = tracked.inflight_labels(&producer);
            e.inflight_requests.get_or_create(&labels).set(requests);
            e.inflight_tokens.get_or_create(&labels).set(tokens);
        });
    }

    /// Drops every per-endpoint series (queue size, in-flight load, scheduler attempts) of an endpoint
    /// that left the pool.
    pub fn remove_endpoint(&self, endpoint: &Endpoint) {
        self.endpoints.remove(endpoint, &self.families, &self.pool_label);
    }

    /// Recomputes the pool gauges from the current endpoints: averages and standard deviations over the
    /// endpoints whose telemetry is at most `staleness` old at `now`, `ready` = how many those are, a
    /// queue-size series per current endpoint; series of endpoints no longer listed are removed.
    pub fn update_pool(&self, endpoints: &[Arc<Endpoint>], now: Instant, staleness: Duration) {
        self.endpoints.update_pool(endpoints, &self.families, &self.pool_label, now, staleness);
    }
}
