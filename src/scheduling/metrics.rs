//! The scheduler's families: end-to-end scheduling duration, scheduling attempts (by outcome, target model
//! and picked endpoint) and per-plugin durations, under the GIE names (`inference_extension_scheduler_*`,
//! `inference_extension_plugin_duration_seconds`) and the llm-d names (`llm_d_epp_scheduler_*`,
//! `llm_d_epp_plugin_duration_seconds`).
//!
//! Attempt series carry the endpoint, so they go through the per-endpoint series index and are removed
//! when the endpoint leaves the pool (freeing their slots). Their target model can come from a client's
//! rewrite header, so the attempt families are capped; an endpoint's overflow series (target
//! `__overflow__`) is removed with its other series. A decision finds its attempt counters on the tracked
//! endpoint by the raw target model after the first (kept only for the label set's own series).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::datastore::Endpoint;
use crate::metrics::{
    alpha, CappedFamily, EndpointSeries, GieAttemptLabels, HistogramFamily, KeptHandles, LlmdAttemptLabels,
    MetricsRegistry, PluginLabels, SharedLabels, TrackedEndpoint, OVERFLOW_LABEL, SCHEDULER,
};

/// The note kind under which an endpoint remembers the target models of its attempt series.
const TARGET: &str = "scheduler-target";

const PLUGIN_HELP: &str =
    "Plugin processing latency distribution in seconds for each extension point, plugin type and plugin name";

/// The scheduler's families.
#[derive(Debug, Clone)]
pub struct SchedulerMetrics {
    labels: Arc<SharedLabels>,
    endpoints: Arc<EndpointSeries>,
    /// Registered under the GIE and the llm-d name: the two are the same observations with the same
    /// labels, so one histogram serves both (one observation instead of two on every request).
    e2e: Histogram,
    gie_attempts: CappedFamily<GieAttemptLabels, Counter>,
    llmd_attempts: CappedFamily<LlmdAttemptLabels, Counter>,
    /// Both names' plugin durations: one family, as with `e2e`.
    plugin: HistogramFamily<PluginLabels>,
    kept_plugins: Arc<KeptHandles<KeptPlugin>>,
}

/// How many (extension point, plugin) pairs keep their histograms: far more than any configuration has.
const MAX_KEPT_PLUGINS: usize = 4096;

/// Each timed plugin's duration histogram, found once. A request times every plugin of its profile
/// and each response hook, and finding a histogram through its family cost an interning lookup and two
/// SipHash probes per call (BENCHMARKS §11, "The transport criterion").
#[derive(Debug)]
struct KeptPlugin {
    extension_point: &'static str,
    plugin_type: &'static str,
    name: Box<str>,
    histogram: Histogram,
}

impl KeptPlugin {
    fn is(&self, extension_point: &str, plugin_type: &str, name: &str) -> bool {
        self.extension_point == extension_point && self.plugin_type == plugin_type && &*self.name == name
    }
}

fn attempt_labels(tracked: &TrackedEndpoint, target: &crate::metrics::LabelValue) -> GieAttemptLabels {
    GieAttemptLabels {
        status: "success",
        target_model_name: target.clone(),
        pod_name: tracked.name.clone(),
        namespace: tracked.namespace.clone(),
        port: Some(tracked.port),
    }
}

impl SchedulerMetrics {
    /// Creates the families, registers them in `registry`, and prunes an endpoint's attempt series when
    /// it leaves.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let r = registry;
        let attempts = || alpha("Total number of scheduling attempts");
        let e2e = || alpha("End-to-end scheduling latency distribution in seconds");
        let m = Self {
            labels: r.labels().clone(),
            endpoints: r.endpoints().clone(),
            e2e: SCHEDULER.histogram(),
            gie_attempts: r.register_capped(
                "inference_extension_scheduler_attempts",
                attempts(),
                Counter::default,
            ),
            llmd_attempts: r.register_capped("llm_d_epp_scheduler_attempts", attempts(), Counter::default),
            plugin: SCHEDULER.family(),
            kept_plugins: Arc::new(KeptHandles::new(MAX_KEPT_PLUGINS)),
        };
        r.register("inference_extension_scheduler_e2e_duration_seconds", e2e(), m.e2e.clone());
        r.register("inference_extension_plugin_duration_seconds", alpha(PLUGIN_HELP), m.plugin.clone());
        r.register("llm_d_epp_scheduler_e2e_duration_seconds", e2e(), m.e2e.clone());
        r.register("llm_d_epp_plugin_duration_seconds", alpha(PLUGIN_HELP), m.plugin.clone());
        let (gie, llmd) = (m.gie_attempts.clone(), m.llmd_attempts.clone());
        m.endpoints.add_pruner(Box::new(move |tracked| {
            let overflow = gie.marker().clone();
            for target in tracked.noted(TARGET).into_iter().chain([overflow]) {
                let labels = attempt_labels(tracked, &target);
                llmd.remove(&LlmdAttemptLabels::from(&labels));
                gie.remove(&labels);
            }
        }));
        Arc::new(m)
    }

    /// One scheduling cycle's duration and outcome; `endpoint` is the picked endpoint, `None` on failure.
    pub fn record_scheduling(&self, duration: Duration, target_model: &str, endpoint: Option<&Endpoint>) {
        let secs = duration.as_secs_f64();
        self.e2e.observe(secs);
        match endpoint {
            Some(endpoint) => self.endpoints.with(endpoint, |tracked| {
                // Kept by the raw model name: no interning and no family lookups on the common path.
                tracked.with_kept_counters(
                    TARGET,
                    target_model,
                    || self.attempt_counters(tracked, target_model),
                    |[llmd, gie]| {
                        llmd.inc();
                        gie.inc();
                    },
                );
            }),
            None => {
                let target = self.labels.models.get(target_model);
                let empty = self.labels.models.get("");
                let labels = GieAttemptLabels {
                    status: "failure",
                    target_model_name: target,
                    pod_name: empty.clone(),
                    namespace: empty,
                    port: None,
                };
                self.llmd_attempts.get_or_create(&LlmdAttemptLabels::from(&labels)).inc();
                self.gie_attempts.get_or_create(&labels).inc();
            }
        }
    }

    /// A successful attempt's counters (llm-d's, GIE's) found through the families, and whether the endpoint
    /// may keep them: only when both are the label set's own series and the model is not folded into
    /// `other` (an overflow series is resolved anew each time, so each such recording still counts as
    /// dropped).
    #[cold]
    fn attempt_counters(&self, tracked: &TrackedEndpoint, target_model: &str) -> ([Counter; 2], bool) {
        let target = self.labels.models.get(target_model);
        tracked.note(TARGET, &target);
        let labels = attempt_labels(tracked, &target);
        let (llmd, llmd_own) = self.llmd_attempts.resolve(&LlmdAttemptLabels::from(&labels));
        let (gie, gie_own) = self.gie_attempts.resolve(&labels);
        ([llmd, gie], llmd_own && gie_own && target.as_str() != OVERFLOW_LABEL)
    }

    /// One plugin call's duration, by extension point (`Scorer`, `Filter`, ...), plugin type and name.
    pub fn observe_plugin(
        &self,
        extension_point: &'static str,
        plugin_type: &'static str,
        name: &str,
        secs: f64,
    ) {
        self.kept_plugins.with(
            (extension_point, plugin_type, name),
            |p| p.is(extension_point, plugin_type, name),
            || {
                let plugin_name = self.labels.config_names.get(name);
                // A name folded into `other` is not kept (it would stay folded if the cap later admitted it).
                let keep = plugin_name.as_str() != OVERFLOW_LABEL;
                let labels = PluginLabels { extension_point, plugin_type, plugin_name };
                let histogram = self.plugin.get_or_create(&labels).clone();
                (KeptPlugin { extension_point, plugin_type, name: name.into(), histogram }, keep)
            },
            |p| p.histogram.observe(secs),
        );
    }
}
