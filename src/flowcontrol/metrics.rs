//! The flow-control families: queue depth and bytes (the KEDA scale-from-zero signal), pool saturation
//! (the gating signal), outcomes, queue and enqueue durations, dispatch-cycle durations and stale
//! endpoints, under both the GIE names (`inference_extension_flow_control_*`) and the llm-d names
//! (`llm_d_epp_flow_control_*`).
//!
//! A queued request's label values are interned once at enqueue ([`FlowQueueLabels`]) and reused for the
//! increment and the matching decrement, so the gauges return exactly to their previous values whichever
//! way the request leaves the queue (a label value can never fold into `other` between the two). The
//! families labelled with model names and fairness ids are capped (`metrics::CappedFamily`); they never
//! remove series, so a label set that went to the overflow series at enqueue goes there at dequeue too.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::{
    alpha, request_derived, Buckets, CappedFamily, CappedHistograms, FloatGauge, LabelValue, MetricsRegistry,
    RequestLabels, SharedLabels, SCHEDULER,
};
use crate::scheduling::StageSaturation;

/// Queue-duration buckets, 100µs … 60s (GIE `flow_control_request_queue_duration_seconds`).
const QUEUE_DURATION: Buckets = Buckets(&[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
]);

/// `{fairness_id, priority, inference_pool, model_name, target_model_name}`: queue size and bytes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    fairness_id: LabelValue,
    priority: i32,
    inference_pool: LabelValue,
    model_name: LabelValue,
    target_model_name: LabelValue,
}

/// [`QueueLabels`] plus `outcome`: the queue-duration histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueDurationLabels {
    fairness_id: LabelValue,
    priority: i32,
    outcome: &'static str,
    inference_pool: LabelValue,
    model_name: LabelValue,
    target_model_name: LabelValue,
}

/// `{fairness_id, priority, outcome}`: the enqueue-duration histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EnqueueLabels {
    fairness_id: LabelValue,
    priority: i32,
    outcome: &'static str,
}

request_derived! {
    QueueLabels { fairness_id, model_name, target_model_name },
    QueueDurationLabels { fairness_id, model_name, target_model_name },
    EnqueueLabels { fairness_id },
}

/// `{outcome, priority, inference_pool}`: `llm_d_epp_flow_control_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
    priority: i32,
    inference_pool: LabelValue,
}

/// `{inference_pool, stage}`: llm-d pool saturation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    inference_pool: LabelValue,
    stage: &'static str,
}

/// `{inference_pool}`: GIE pool saturation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InferencePoolLabels {
    inference_pool: LabelValue,
}

/// `{detector}`: stale endpoints.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DetectorLabels {
    detector: LabelValue,
}

/// The label values of one request in the flow-control layer, interned once at enqueue.
#[derive(Clone, Debug)]
pub struct FlowQueueLabels(QueueLabels);

impl FlowQueueLabels {
    fn with_outcome(&self, outcome: &'static str) -> QueueDurationLabels {
        let l = &self.0;
        QueueDurationLabels {
            fairness_id: l.fairness_id.clone(),
            priority: l.priority,
            outcome,
            inference_pool: l.inference_pool.clone(),
            model_name: l.model_name.clone(),
            target_model_name: l.target_model_name.clone(),
        }
    }
}

/// The flow controller's families.
#[derive(Debug)]
pub struct FlowControlMetrics {
    labels: Arc<SharedLabels>,
    gie_queue_size: CappedFamily<QueueLabels, Gauge>,
    gie_queue_bytes: CappedFamily<QueueLabels, Gauge>,
    gie_pool_saturation: Family<InferencePoolLabels, FloatGauge>,
    gie_queue_duration: CappedHistograms<QueueDurationLabels>,
    gie_enqueue_duration: CappedHistograms<EnqueueLabels>,
    gie_dispatch_cycle: Histogram,
    llmd_queue_size: CappedFamily<QueueLabels, Gauge>,
    llmd_queue_bytes: CappedFamily<QueueLabels, Gauge>,
    llmd_pool_saturation: Family<StageLabels, FloatGauge>,
    llmd_queue_duration: CappedHistograms<QueueDurationLabels>,
    llmd_enqueue_duration: CappedHistograms<EnqueueLabels>,
    llmd_dispatch_cycle: Histogram,
    llmd_requests: Family<OutcomeLabels, Counter>,
    llmd_stale_endpoints: Family<DetectorLabels, Gauge>,
}

const QUEUE_DURATION_HELP: &str =
    "Distribution of total time requests spend in the Flow Control layer (from enqueue to final outcome)";
const DISPATCH_CYCLE_HELP: &str =
    "Distribution of time taken for each internal dispatch cycle in the Flow Control layer";
const ENQUEUE_HELP: &str = "Distribution of time taken to enqueue requests into the Flow Control layer";
const QUEUE_SIZE_HELP: &str = "Current number of requests actively held in the Flow Control queue";
const QUEUE_BYTES_HELP: &str =
    "Current total size in bytes of requests actively held in the Flow Control queue";

impl FlowControlMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let r = registry;
        let (gie, llmd) = ("inference_extension_flow_control", "llm_d_epp_flow_control");
        let queue_size = |prefix: &str| -> CappedFamily<QueueLabels, Gauge> {
            r.register_capped(&format!("{prefix}_queue_size"), alpha(QUEUE_SIZE_HELP), Gauge::default)
        };
        let queue_bytes = |prefix: &str| -> CappedFamily<QueueLabels, Gauge> {
            r.register_capped(&format!("{prefix}_queue_bytes"), alpha(QUEUE_BYTES_HELP), Gauge::default)
        };
        let queue_duration = |prefix: &str| {
            let name = format!("{prefix}_request_queue_duration_seconds");
            r.register_capped(&name, alpha(QUEUE_DURATION_HELP), QUEUE_DURATION)
        };
        let enqueue_duration = |prefix: &str| {
            let name = format!("{prefix}_request_enqueue_duration_seconds");
            r.register_capped(&name, alpha(ENQUEUE_HELP), SCHEDULER)
        };
        let m = Self {
            labels: r.labels().clone(),
            gie_queue_duration: queue_duration(gie),
            gie_enqueue_duration: enqueue_duration(gie),
            gie_queue_size: queue_size(gie),
            gie_queue_bytes: queue_bytes(gie),
            gie_pool_saturation: Family::default(),
            gie_dispatch_cycle: SCHEDULER.histogram(),
            llmd_queue_duration: queue_duration(llmd),
            llmd_enqueue_duration: enqueue_duration(llmd),
            llmd_queue_size: queue_size(llmd),
            llmd_queue_bytes: queue_bytes(llmd),
            llmd_pool_saturation: Family::default(),
            llmd_dispatch_cycle: SCHEDULER.histogram(),
            llmd_requests: Family::default(),
            llmd_stale_endpoints: Family::default(),
        };
        m.register_gie(registry);
        m.register_llmd(registry);
        Arc::new(m)
    }

    fn register_gie(&self, r: &MetricsRegistry) {
        r.register(
            "inference_extension_flow_control_dispatch_cycle_duration_seconds",
            alpha(DISPATCH_CYCLE_HELP),
            self.gie_dispatch_cycle.clone(),
        );
        r.register(
            "inference_extension_flow_control_pool_saturation",
            alpha("Current saturation level of the inference pool (0.0 = empty, 1.0 = fully saturated)"),
            self.gie_pool_saturation.clone(),
        );
    }

    fn register_llmd(&self, r: &MetricsRegistry) {
        r.register(
            "llm_d_epp_flow_control_dispatch_cycle_duration_seconds",
            alpha(DISPATCH_CYCLE_HELP),
            self.llmd_dispatch_cycle.clone(),
        );
        r.register(
            "llm_d_epp_flow_control_pool_saturation",
            alpha(
                "Pool saturation signal gating Flow Control dispatch. The stage label partitions by pipeline \
                 role: 'prefill' and 'decode' are per-stage signals, 'effective' is max(prefill, decode) and \
                 is the value used for gating. 1.0 is the gating set point; values above 1.0 indicate the \
                 magnitude of oversubscription past it. An empty pool reads as 1.0",
            ),
            self.llmd_pool_saturation.clone(),
        );
        r.register(
            "llm_d_epp_flow_control_stale_endpoints",
            alpha(
                "Number of candidate endpoints whose metrics are missing or older than the staleness \
                 threshold, as of the most recent saturation evaluation",
            ),
            self.llmd_stale_endpoints.clone(),
        );
        r.register(
            "llm_d_epp_flow_control_requests",
            alpha("Total number of requests processed by the Flow Control layer"),
            self.llmd_requests.clone(),
        );
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl FlowControlMetrics {
    /// Interns the label values of a request entering the flow-control layer.
    pub fn flow_queue_labels(&self, l: RequestLabels<'_>) -> FlowQueueLabels {
        let model = self.labels.model_labels(&l);
        FlowQueueLabels(QueueLabels {
            fairness_id: self.labels.fairness_ids.get(l.fairness_id),
            priority: l.priority,
            inference_pool: self.labels.pool.clone(),
            model_name: model.model_name,
            target_model_name: model.target_model_name,
        })
    }

    /// A request entered the queue (`*_flow_control_queue_size` and `_queue_bytes` go up).
    pub fn flow_queue_add(&self, l: &FlowQueueLabels, bytes: u64) {
        let f = self;
        let bytes = clamp_i64(bytes);
        f.gie_queue_size.get_or_create(&l.0).inc();
        f.llmd_queue_size.get_or_create(&l.0).inc();
        f.gie_queue_bytes.get_or_create(&l.0).inc_by(bytes);
        f.llmd_queue_bytes.get_or_create(&l.0).inc_by(bytes);
    }

    /// A request left the queue, by any path: exactly undoes [`flow_queue_add`](Self::flow_queue_add).
    pub fn flow_queue_remove(&self, l: &FlowQueueLabels, bytes: u64) {
        let f = self;
        let bytes = clamp_i64(bytes);
        f.gie_queue_size.get_or_create(&l.0).dec();
        f.llmd_queue_size.get_or_create(&l.0).dec();
        f.gie_queue_bytes.get_or_create(&l.0).dec_by(bytes);
        f.llmd_queue_bytes.get_or_create(&l.0).dec_by(bytes);
    }

    /// A request's final flow-control outcome (`Dispatched`, `RejectedCapacity`, `EvictedTTL`, …) and how
    /// long it was in the layer.
    pub fn flow_outcome(&self, l: &FlowQueueLabels, outcome: &'static str, in_layer: Duration) {
        let f = self;
        let secs = in_layer.as_secs_f64();
        let labels = l.with_outcome(outcome);
        f.gie_queue_duration.get_or_create(&labels).observe(secs);
        f.llmd_queue_duration.get_or_create(&labels).observe(secs);
        let counter =
            OutcomeLabels { outcome, priority: l.0.priority, inference_pool: l.0.inference_pool.clone() };
        f.llmd_requests.get_or_create(&counter).inc();
    }

    /// Time spent enqueueing (capacity check and insertion). `outcome` is `NotYetFinalized` for a request
    /// that was queued, else its rejection.
    pub fn flow_enqueue_duration(&self, l: &FlowQueueLabels, outcome: &'static str, took: Duration) {
        let f = self;
        let labels = EnqueueLabels { fairness_id: l.0.fairness_id.clone(), priority: l.0.priority, outcome };
        let secs = took.as_secs_f64();
        f.gie_enqueue_duration.get_or_create(&labels).observe(secs);
        f.llmd_enqueue_duration.get_or_create(&labels).observe(secs);
    }

    /// The pool saturation the dispatcher last computed.
    pub fn set_flow_pool_saturation(&self, s: &StageSaturation) {
        let f = self;
        let pool = InferencePoolLabels { inference_pool: self.labels.pool.clone() };
        f.gie_pool_saturation.get_or_create(&pool).set(s.effective);
        let stages = [("effective", Some(s.effective)), ("decode", Some(s.decode)), ("prefill", s.prefill)];
        for (stage, value) in stages {
            let labels = StageLabels { inference_pool: self.labels.pool.clone(), stage };
            match value {
                Some(v) => {
                    f.llmd_pool_saturation.get_or_create(&labels).set(v);
                }
                // No prefill stage (any more): no series, rather than a stale one.
                None => {
                    f.llmd_pool_saturation.remove(&labels);
                }
            }
        }
    }

    /// How many of the pool's endpoints the detector named `detector` treats as stale.
    pub fn set_flow_stale_endpoints(&self, detector: &str, stale: usize) {
        let labels = DetectorLabels { detector: self.labels.config_names.get(detector) };
        self.llmd_stale_endpoints.get_or_create(&labels).set(clamp_i64(stale as u64));
    }

    /// One dispatch cycle's duration.
    pub fn observe_flow_dispatch_cycle(&self, took: Duration) {
        let secs = took.as_secs_f64();
        self.gie_dispatch_cycle.observe(secs);
        self.llmd_dispatch_cycle.observe(secs);
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
