use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::*;
use crate::metrics::{MetricsRegistry, SCHEDULER};

fn model(name: &str, target: &str) -> ModelLabels {
    ModelLabels { model_name: LabelValue::new(name), target_model_name: LabelValue::new(target) }
}

fn never_exempt() -> Arc<dyn Fn(&str) -> bool + Send + Sync> {
    Arc::new(|_| false)
}

fn counters(max_series: usize) -> (CappedFamily<ModelLabels, Counter>, Counter) {
    let dropped = Counter::default();
    (CappedFamily::new(Counter::default, max_series, dropped.clone(), never_exempt()), dropped)
}

fn value(family: &CappedFamily<ModelLabels, Counter>, labels: &ModelLabels) -> Option<u64> {
    family.family().get(labels).map(|c| c.get())
}

#[test]
fn a_full_family_records_new_label_sets_in_its_overflow_series() {
    let (family, dropped) = counters(2);
    family.get_or_create(&model("a", "a")).inc();
    family.get_or_create(&model("b", "x")).inc();
    family.get_or_create(&model("c", "y")).inc();
    family.get_or_create(&model("d", "z")).inc_by(2);
    let overflow = model(OVERFLOW_SERIES_LABEL, OVERFLOW_SERIES_LABEL);
    assert_eq!(value(&family, &overflow), Some(3), "both new label sets folded into one series");
    assert_eq!(value(&family, &model("c", "y")), None);
    assert_eq!(dropped.get(), 2, "each overflow recording counts");
    // Existing series keep updating, and count nothing.
    family.get_or_create(&model("a", "a")).inc();
    assert_eq!(value(&family, &model("a", "a")), Some(2));
    assert_eq!(dropped.get(), 2);
    assert_eq!(family.occupancy(), (2, 2), "the overflow series takes no slot");
}

#[test]
fn the_overflow_keeps_labels_with_a_fixed_vocabulary() {
    let labels = FlowErrorLabels {
        model_name: LabelValue::new("m"),
        target_model_name: LabelValue::new("t"),
        fairness_id: LabelValue::new("tenant"),
        priority: -1,
        error_code: "BadRequest",
    };
    let marker = LabelValue::new(OVERFLOW_SERIES_LABEL);
    let overflow = labels.overflow(&marker);
    assert_eq!((overflow.priority, overflow.error_code), (-1, "BadRequest"));
    assert!(overflow.request_values().all(|v| v == &marker));
    assert_eq!(labels.request_values().count(), 3);
}

#[test]
fn removing_a_series_frees_its_slot_once() {
    let (family, dropped) = counters(2);
    family.get_or_create(&model("a", "a")).inc();
    family.get_or_create(&model("b", "b")).inc();
    assert!(family.remove(&model("a", "a")));
    assert!(!family.remove(&model("a", "a")), "a second removal frees nothing");
    assert!(!family.remove(&model("never", "seen")));
    assert_eq!(family.occupancy(), (1, 2));
    family.get_or_create(&model("c", "c")).inc();
    assert_eq!(value(&family, &model("c", "c")), Some(1), "the freed slot is taken");
    family.get_or_create(&model("d", "d")).inc();
    assert_eq!(dropped.get(), 1, "then the family is full again");
    // Removing the overflow series frees no slot: it never took one.
    assert!(family.remove(&model(OVERFLOW_SERIES_LABEL, OVERFLOW_SERIES_LABEL)));
    assert_eq!(family.occupancy(), (2, 2));
}

#[test]
fn a_label_set_that_reads_like_the_overflow_counts_as_any_other() {
    // A client may send `__overflow__` as its model: admitted and counted like any name while there is
    // room, and later overflow recordings join it.
    let (family, dropped) = counters(1);
    let lookalike = model(OVERFLOW_SERIES_LABEL, OVERFLOW_SERIES_LABEL);
    family.get_or_create(&lookalike).inc();
    family.get_or_create(&model("a", "a")).inc();
    assert_eq!((value(&family, &lookalike), dropped.get()), (Some(2), 1));
    assert!(family.remove(&lookalike));
    assert_eq!(family.occupancy(), (0, 1), "its slot is freed");
}

#[test]
fn configured_and_empty_names_are_exempt() {
    let exempt: Arc<dyn Fn(&str) -> bool + Send + Sync> = Arc::new(|v| v == "configured");
    let family: CappedFamily<ModelLabels, Counter> =
        CappedFamily::new(Counter::default, 1, Counter::default(), exempt);
    family.get_or_create(&model("flood", "flood")).inc();
    family.get_or_create(&model("configured", "configured")).inc();
    family.get_or_create(&model("", "")).inc();
    family.get_or_create(&model("configured", "other-target")).inc();
    assert_eq!(family.family().get(&model("configured", "configured")).map(|c| c.get()), Some(1));
    assert_eq!(family.family().get(&model("", "")).map(|c| c.get()), Some(1));
    let overflow = model(OVERFLOW_SERIES_LABEL, OVERFLOW_SERIES_LABEL);
    assert_eq!(
        family.family().get(&overflow).map(|c| c.get()),
        Some(1),
        "only all-configured sets are exempt"
    );
    assert_eq!(family.occupancy(), (1, 1));
}

#[test]
fn histogram_label_sets_cost_their_buckets() {
    // SCHEDULER has 10 buckets: 13 series per label set.
    assert_eq!(SCHEDULER.series_per_label_set(), 13);
    let histograms: CappedHistograms<ModelLabels> =
        CappedFamily::new(SCHEDULER, 26, Counter::default(), never_exempt());
    assert_eq!(histograms.occupancy(), (0, 2));
    let tiny: CappedHistograms<ModelLabels> =
        CappedFamily::new(SCHEDULER, 1, Counter::default(), never_exempt());
    assert_eq!(tiny.occupancy(), (0, 1), "at least one label set");
}

#[test]
fn paired_gauge_updates_stay_balanced_past_the_cap() {
    let family: CappedFamily<ModelLabels, Gauge> =
        CappedFamily::new(Gauge::default, 1, Counter::default(), never_exempt());
    let (kept, folded) = (model("a", "a"), model("b", "b"));
    for labels in [&kept, &folded, &folded] {
        family.get_or_create(labels).inc();
    }
    for labels in [&folded, &kept, &folded] {
        family.get_or_create(labels).dec();
    }
    let overflow = model(OVERFLOW_SERIES_LABEL, OVERFLOW_SERIES_LABEL);
    assert_eq!(family.family().get(&overflow).map(|g| g.get()), Some(0));
    assert_eq!(family.family().get(&kept).map(|g| g.get()), Some(0));
}

#[test]
fn the_registry_counts_drops_per_family_and_starts_them_at_zero() {
    let registry = MetricsRegistry::with_max_series("p", std::num::NonZeroUsize::MIN);
    registry.pin_model_names(["configured"]);
    let a: CappedFamily<ModelLabels, Counter> = registry.register_capped("family_a", "A", Counter::default);
    let _b: CappedFamily<ModelLabels, Counter> = registry.register_capped("family_b", "B", Counter::default);
    for name in ["x", "y", "z", "configured"] {
        a.get_or_create(&model(name, name)).inc();
    }
    let text = registry.encode();
    assert!(text.contains("epp_metrics_dropped_label_sets_total{family=\"family_a\"} 2\n"), "{text}");
    assert!(text.contains("epp_metrics_dropped_label_sets_total{family=\"family_b\"} 0\n"), "{text}");
    assert!(
        text.contains("family_a_total{model_name=\"__overflow__\",target_model_name=\"__overflow__\"} 2\n")
    );
    assert!(text.contains("family_a_total{model_name=\"configured\",target_model_name=\"configured\"} 1\n"));
}
