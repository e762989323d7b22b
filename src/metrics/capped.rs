//! The per-family series cap: [`CappedFamily`], which every family with request-derived labels records
//! through.
//!
//! Why: [`BoundedLabels`](super::BoundedLabels) caps each request-derived label at 1,000 values, but a
//! family's series are label *combinations*: 100 body models × 100 `x-gateway-model-name-rewrite` values
//! made 10,000 series in every per-request family: a 288 MB `/metrics` page (497 MB with responses
//! recorded too); 3,000 unique model names made 56 MB. Families never forget a label set, so the page
//! only grows.
//!
//! How: a family holds at most `--max-series-per-family` series, counted as Prometheus counts them (a
//! histogram label set is one series per bucket plus `_sum` and `_count`; see [`SeriesCost`]). Once it
//! is full, a new label set is recorded in the family's overflow series instead: the same label set with
//! its request-derived values (model names, fairness id) replaced by [`OVERFLOW_SERIES_LABEL`], keeping
//! the labels with a fixed vocabulary (pool, priority from the configured objectives, error code,
//! status, endpoint). Each such recording counts in `epp_metrics_dropped_label_sets_total{family}`.
//! Label sets whose request-derived values are all configured model names (or empty) are exempt, so a
//! flood of unknown names cannot push a configured model into the overflow (as with the per-label cap).
//!
//! Cost: recording into a label set that already has its series (the common case) is exactly the plain
//! `Family` lookup: one read lock and a hash probe, no allocation. Only a new label set takes the
//! family's slot lock.
//!
//! Invariant: `counted` is the number of the family's series that are neither overflow nor exempt;
//! every insertion happens under the slot lock after re-checking, and [`CappedFamily::remove`] (pruners,
//! when an endpoint leaves) frees the slot of a counted series. In a family whose series are never
//! removed a label set's fate is fixed when it is first seen, so paired increments and decrements
//! (running requests, queue gauges) always land in the same series.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::buckets::Buckets;
use super::labels::{
    FlowErrorLabels, FlowLabels, FlowStreamingLabels, GieAttemptLabels, LabelValue, LlmdAttemptLabels,
    ModelErrorLabels, ModelLabels, ModelNameLabels, ModelPriorityLabels,
};

/// What the request-derived values of a family's overflow series read.
pub const OVERFLOW_SERIES_LABEL: &str = "__overflow__";

/// The default of `--max-series-per-family`: a counter or gauge family keeps 1,000 label sets (as many as
/// the per-label cap admits model names), a 35-bucket histogram family 26, and the 100 × 100 page stays
/// under 3 MB.
pub const DEFAULT_MAX_SERIES_PER_FAMILY: NonZeroUsize = match NonZeroUsize::new(1000) {
    Some(n) => n,
    None => unreachable!(),
};

/// A label set with request-derived values, which a [`CappedFamily`] can fold into its overflow series.
pub trait RequestDerived: Clone + Hash + Eq {
    /// The values a client chooses (model names, fairness id).
    fn request_values(&self) -> impl Iterator<Item = &LabelValue>;
    /// This label set with every request-derived value replaced by `marker`, the rest kept.
    fn overflow(&self, marker: &LabelValue) -> Self;
}

/// How many exposition series one label set of a family costs.
pub trait SeriesCost {
    fn series_per_label_set(&self) -> usize;
}

/// Counters and gauges (built by their `default`): one series.
impl<M, F: Fn() -> M> SeriesCost for F {
    fn series_per_label_set(&self) -> usize {
        1
    }
}

/// Histograms: a `_bucket` series per bucket and `+Inf`, then `_sum` and `_count`.
impl SeriesCost for Buckets {
    fn series_per_label_set(&self) -> usize {
        self.0.len() + 3
    }
}

/// A [`Family`] that holds at most a fixed number of label sets, and records the rest in its overflow
/// series. Clones share the family and its slots.
pub struct CappedFamily<L, M, C = fn() -> M> {
    family: Family<L, M, C>,
    slots: Arc<Mutex<Slots<L>>>,
    /// How many counted label sets fit.
    capacity: usize,
    marker: LabelValue,
    /// This family's series of `epp_metrics_dropped_label_sets_total`.
    dropped: Counter,
    /// Model names that never count (the configured ones).
    exempt: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

/// A [`CappedFamily`] of histograms over one bucket layout.
pub type CappedHistograms<L> = CappedFamily<L, prometheus_client::metrics::histogram::Histogram, Buckets>;

#[derive(Debug)]
struct Slots<L> {
    counted: usize,
    /// Series that exist but do not count: overflow series and exempt label sets.
    uncounted: HashSet<L>,
}

impl<L: std::fmt::Debug, M: std::fmt::Debug, C> std::fmt::Debug for CappedFamily<L, M, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CappedFamily")
            .field("family", &self.family)
            .field("capacity", &self.capacity)
            .field("dropped", &self.dropped.get())
            .finish_non_exhaustive()
    }
}

impl<L: Clone, M, C: Clone> Clone for CappedFamily<L, M, C> {
    fn clone(&self) -> Self {
        Self {
            family: self.family.clone(),
            slots: self.slots.clone(),
            capacity: self.capacity,
            marker: self.marker.clone(),
            dropped: self.dropped.clone(),
            exempt: self.exempt.clone(),
        }
    }
}

impl<L: RequestDerived, M, C: MetricConstructor<M> + SeriesCost + Clone> CappedFamily<L, M, C> {
    /// A family of at most `max_series` series (at least one label set) built by `constructor`, counting
    /// its overflow recordings in `dropped`; label sets of `exempt` model names do not count.
    pub fn new(
        constructor: C,
        max_series: usize,
        dropped: Counter,
        exempt: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    ) -> Self {
        Self {
            capacity: (max_series / constructor.series_per_label_set().max(1)).max(1),
            family: Family::new_with_constructor(constructor),
            slots: Arc::new(Mutex::new(Slots { counted: 0, uncounted: HashSet::new() })),
            marker: LabelValue::new(OVERFLOW_SERIES_LABEL),
            dropped,
            exempt,
        }
    }

    /// The series of `labels`, or the overflow series when `labels` is new and the family is full.
    pub fn get_or_create(&self, labels: &L) -> impl Deref<Target = M> + '_ {
        if let Some(metric) = self.family.get(labels) {
            return metric;
        }
        // A new label set: inserted while the slot lock `_slots` is held, so the count stays exact.
        let (_slots, target) = self.admit(labels);
        self.family.get_or_create(&target)
    }

    /// A handle on the series of `labels` (clones share it, as every prometheus-client metric's do), and
    /// whether that is the label set's own series; `false` when it went to the overflow series, which a
    /// caller must not keep: each recording there counts in `epp_metrics_dropped_label_sets_total`.
    pub fn resolve(&self, labels: &L) -> (M, bool)
    where
        M: Clone,
    {
        if let Some(metric) = self.family.get(labels) {
            return ((*metric).clone(), true);
        }
        let (_slots, target) = self.admit(labels);
        let own = matches!(target, Cow::Borrowed(_));
        let metric = (*self.family.get_or_create(&target)).clone();
        (metric, own)
    }

    /// Decides where a label set without a series goes (itself, or the overflow series) and accounts for
    /// it; the caller inserts it before releasing the returned lock.
    #[cold]
    #[inline(never)]
    fn admit<'a>(&self, labels: &'a L) -> (MutexGuard<'_, Slots<L>>, Cow<'a, L>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have created it, or taken the last slot, since the lookup.
        if self.family.get(labels).is_some() {
            return (slots, Cow::Borrowed(labels));
        }
        if self.is_exempt(labels) {
            slots.uncounted.insert(labels.clone());
            return (slots, Cow::Borrowed(labels));
        }
        if slots.counted < self.capacity {
            slots.counted += 1;
            return (slots, Cow::Borrowed(labels));
        }
        self.dropped.inc();
        let overflow = labels.overflow(&self.marker);
        if self.family.get(&overflow).is_none() {
            slots.uncounted.insert(overflow.clone());
        }
        (slots, Cow::Owned(overflow))
    }

    /// Whether every request-derived value of `labels` is empty or a configured name.
    fn is_exempt(&self, labels: &L) -> bool {
        labels.request_values().all(|v| v.as_str().is_empty() || (self.exempt)(v.as_str()))
    }

    /// Removes the series of `labels`, freeing its slot. Returns whether there was one.
    pub fn remove(&self, labels: &L) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let removed = self.family.remove(labels);
        if removed && !slots.uncounted.remove(labels) {
            slots.counted = slots.counted.saturating_sub(1);
        }
        removed
    }

    /// The family itself, to register for encoding (recording goes through the wrapper).
    pub fn family(&self) -> &Family<L, M, C> {
        &self.family
    }

    /// How many label sets count against the cap, and how many may.
    pub fn occupancy(&self) -> (usize, usize) {
        (self.slots.lock().unwrap_or_else(PoisonError::into_inner).counted, self.capacity)
    }

    /// What the request-derived values of the overflow series read.
    pub fn marker(&self) -> &LabelValue {
        &self.marker
    }
}

// The label sets of the capped families: which values are request-derived, and their overflow.

/// Implements [`RequestDerived`] for label-set structs, naming their request-derived fields.
macro_rules! request_derived {
    ($($ty:ident { $($field:ident),+ }),+ $(,)?) => {$(
        impl $crate::metrics::RequestDerived for $ty {
            fn request_values(&self) -> impl Iterator<Item = &$crate::metrics::LabelValue> {
                [$(&self.$field),+].into_iter()
            }
            #[allow(clippy::needless_update)]
            fn overflow(&self, marker: &$crate::metrics::LabelValue) -> Self {
                Self { $($field: marker.clone(),)+ ..self.clone() }
            }
        }
    )+};
}
pub(crate) use request_derived;

request_derived! {
    ModelLabels { model_name, target_model_name },
    ModelPriorityLabels { model_name, target_model_name },
    ModelErrorLabels { model_name, target_model_name },
    ModelNameLabels { model_name },
    FlowLabels { model_name, target_model_name, fairness_id },
    FlowErrorLabels { model_name, target_model_name, fairness_id },
    FlowStreamingLabels { model_name, target_model_name, fairness_id },
    GieAttemptLabels { target_model_name },
    LlmdAttemptLabels { target_model_name },
}

#[cfg(test)]
#[path = "capped_tests.rs"]
mod tests;
