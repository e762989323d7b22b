//! One flow's series in the per-request families, found once and kept.
//!
//! Why: a request records into about twenty series (sizes, duration, tokens, TTFT, running) under both
//! naming schemes. Finding each through its family cost the label interning (a read lock and a SipHash
//! probe per label value) and a SipHash probe of the family per recording: about a fifth of what epp's
//! request path costs beyond the ext_proc transport itself (BENCHMARKS §11, "The transport criterion").
//! Every request of one flow (model, target model, fairness id, priority) records into the same series, so
//! a flow's handles are kept in a [`RequestSeries`]: a request finds its flow once, and each recording is
//! then the metric's own update.
//!
//! What stays as it was:
//! - a series appears when it is first recorded, not when its flow is first seen (each handle is resolved
//!   on first use);
//! - a label set that a full family folds into its overflow series is never kept, so each such recording
//!   still counts in `epp_metrics_dropped_label_sets_total`; nor is a flow whose label values the per-label
//!   cap folded into `other` (a configured name pinned later maps to itself from then on);
//! - at most [`MAX_KEPT_FLOWS`] flows are kept; requests of further flows resolve their series each time,
//!   as every request did before.
//!
//! Kept handles stay valid: these families never remove a series (only the per-endpoint families do).

use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::MetricConstructor;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{
    CappedFamily, CappedHistograms, FlowLabels, KeptHandles, ModelLabels, ModelNameLabels, RequestDerived,
    RequestLabels, SeriesCost, SharedLabels, OVERFLOW_LABEL,
};

/// How many flows keep their handles. Beyond it (a client inventing fairness ids, say) requests still
/// record, only without the shortcut.
pub const MAX_KEPT_FLOWS: usize = 4096;

/// A series handle, resolved on first use and kept when it is the label set's own series.
pub(super) struct Kept<M>(OnceLock<M>);

impl<M> Default for Kept<M> {
    fn default() -> Self {
        Self(OnceLock::new())
    }
}

impl<M: Clone> Kept<M> {
    /// Runs `record` on the series of `labels()` in `family`.
    pub(super) fn with<L, C>(
        &self,
        family: &CappedFamily<L, M, C>,
        labels: impl FnOnce() -> L,
        record: impl FnOnce(&M),
    ) where
        L: RequestDerived,
        C: MetricConstructor<M> + SeriesCost + Clone,
    {
        if let Some(metric) = self.0.get() {
            return record(metric);
        }
        let (metric, own) = family.resolve(&labels());
        if own {
            // Another thread may have kept the same handle first: both are the same series.
            let _ = self.0.set(metric.clone());
        }
        record(&metric);
    }
}

/// The GIE series (`inference_objective_*`, by model) and the llm-d one (`llm_d_epp_request_*`, by flow)
/// that one recording writes.
pub(super) struct Both<M> {
    pub gie: Kept<M>,
    pub llmd: Kept<M>,
}

impl<M> Default for Both<M> {
    fn default() -> Self {
        Self { gie: Kept::default(), llmd: Kept::default() }
    }
}

/// The handles of one flow.
pub struct RequestSeries {
    /// The raw values this flow was found by.
    raw: OwnedLabels,
    pub(super) model: ModelLabels,
    pub(super) flow: FlowLabels,
    pub(super) requests: Both<Counter>,
    pub(super) request_sizes: Both<Histogram>,
    pub(super) duration: Both<Histogram>,
    pub(super) response_sizes: Both<Histogram>,
    pub(super) input_tokens: Both<Histogram>,
    pub(super) output_tokens: Both<Histogram>,
    pub(super) cached_tokens: Both<Histogram>,
    pub(super) ntpot: Both<Histogram>,
    pub(super) running: (Kept<Gauge>, Kept<Gauge>),
    pub(super) gie_ttft: Kept<Histogram>,
    /// `llm_d_epp_request_ttft_seconds`, by `streaming` (false, true).
    pub(super) llmd_ttft: [Kept<Histogram>; 2],
}

impl std::fmt::Debug for RequestSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSeries").field("flow", &self.flow).finish_non_exhaustive()
    }
}

impl RequestSeries {
    fn new(raw: OwnedLabels, labels: &SharedLabels) -> Self {
        let (model, flow) = labels.flow_labels(&raw.as_labels());
        Self {
            raw,
            model,
            flow,
            requests: Both::default(),
            request_sizes: Both::default(),
            duration: Both::default(),
            response_sizes: Both::default(),
            input_tokens: Both::default(),
            output_tokens: Both::default(),
            cached_tokens: Both::default(),
            ntpot: Both::default(),
            running: (Kept::default(), Kept::default()),
            gie_ttft: Kept::default(),
            llmd_ttft: [Kept::default(), Kept::default()],
        }
    }

    /// The flow's label values as the request carried them.
    pub fn labels(&self) -> RequestLabels<'_> {
        self.raw.as_labels()
    }

    /// Whether a value was folded into `other` by the per-label cap: such a flow is not kept.
    fn folded(&self) -> bool {
        [&self.flow.model_name, &self.flow.target_model_name, &self.flow.fairness_id]
            .iter()
            .any(|v| v.as_str() == OVERFLOW_LABEL)
    }

    /// Observes `value` in the GIE and llm-d series of `both`.
    pub(super) fn observe(
        &self,
        both: &Both<Histogram>,
        families: (&CappedHistograms<ModelLabels>, &CappedHistograms<FlowLabels>),
        value: f64,
    ) {
        both.gie.with(families.0, || self.model.clone(), |h| h.observe(value));
        both.llmd.with(families.1, || self.flow.clone(), |h| h.observe(value));
    }

    /// The GIE running gauge's labels (`{model_name}` only).
    pub(super) fn model_name_labels(&self) -> ModelNameLabels {
        ModelNameLabels { model_name: self.model.model_name.clone() }
    }
}

/// The kept flows, looked up by their raw label values without building a key.
#[derive(Debug)]
pub(super) struct SeriesCache(KeptHandles<Arc<RequestSeries>>);

impl Default for SeriesCache {
    fn default() -> Self {
        Self(KeptHandles::new(MAX_KEPT_FLOWS))
    }
}

impl SeriesCache {
    /// The series of `l`'s flow: the kept one, or a new one (kept when there is room and no value was
    /// folded into `other`).
    pub(super) fn get(&self, l: RequestLabels<'_>, labels: &SharedLabels) -> Arc<RequestSeries> {
        self.0.with(
            (l.model_name, l.target_model_name, l.fairness_id, l.priority),
            |s| same(s.labels(), l),
            || {
                let series = Arc::new(RequestSeries::new(owned(l), labels));
                let keep = !series.folded();
                (series, keep)
            },
            Arc::clone,
        )
    }

    /// How many flows are kept.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

fn same(a: RequestLabels<'_>, b: RequestLabels<'_>) -> bool {
    a.model_name == b.model_name
        && a.target_model_name == b.target_model_name
        && a.fairness_id == b.fairness_id
        && a.priority == b.priority
}

/// Owned copies of the labels a request's metrics carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedLabels {
    pub model_name: String,
    pub target_model_name: String,
    pub priority: i32,
    pub fairness_id: String,
}

impl OwnedLabels {
    pub fn as_labels(&self) -> RequestLabels<'_> {
        RequestLabels {
            model_name: &self.model_name,
            target_model_name: &self.target_model_name,
            priority: self.priority,
            fairness_id: &self.fairness_id,
        }
    }
}

fn owned(l: RequestLabels<'_>) -> OwnedLabels {
    OwnedLabels {
        model_name: l.model_name.to_string(),
        target_model_name: l.target_model_name.to_string(),
        priority: l.priority,
        fairness_id: l.fairness_id.to_string(),
    }
}
