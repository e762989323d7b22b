//! The flow-control families' names, label sets and exact gauge restoration.

use super::*;

/// The sorted label names of the first sample of `name` (without `le`).
fn label_names(text: &str, name: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|line| line.starts_with(&format!("{name}{{")))
        .unwrap_or_else(|| panic!("no sample of {name} in\n{text}"));
    let inner = &line[name.len() + 1..line.rfind('}').unwrap()];
    let mut names: Vec<String> =
        inner.split("\",").map(|pair| pair.split('=').next().unwrap().to_string()).collect();
    names.retain(|n| n != "le");
    names.sort();
    names
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

const LABELS: RequestLabels<'static> =
    RequestLabels { model_name: "m", target_model_name: "t", priority: -2, fairness_id: "tenant" };

#[test]
fn names_and_label_sets_match_the_reference() {
    let registry = MetricsRegistry::new("pool");
    let m = FlowControlMetrics::register(&registry);
    let l = m.flow_queue_labels(LABELS);
    m.flow_queue_add(&l, 10);
    m.flow_outcome(&l, "Dispatched", Duration::from_millis(3));
    m.flow_enqueue_duration(&l, "NotYetFinalized", Duration::from_micros(3));
    m.set_flow_pool_saturation(&crate::scheduling::StageSaturation {
        prefill: None,
        decode: 0.5,
        effective: 0.5,
    });
    m.set_flow_stale_endpoints("utilization-detector", 2);
    m.observe_flow_dispatch_cycle(Duration::from_micros(20));
    let text = registry.encode();
    let queue = ["fairness_id", "inference_pool", "model_name", "priority", "target_model_name"];
    let with_outcome =
        ["fairness_id", "inference_pool", "model_name", "outcome", "priority", "target_model_name"];
    for prefix in ["llm_d_epp", "inference_extension"] {
        assert_eq!(label_names(&text, &format!("{prefix}_flow_control_queue_size")), queue);
        assert_eq!(label_names(&text, &format!("{prefix}_flow_control_queue_bytes")), queue);
        assert_eq!(
            label_names(&text, &format!("{prefix}_flow_control_request_queue_duration_seconds_bucket")),
            with_outcome
        );
        assert_eq!(
            label_names(&text, &format!("{prefix}_flow_control_request_enqueue_duration_seconds_bucket")),
            ["fairness_id", "outcome", "priority"]
        );
        let cycles = format!("{prefix}_flow_control_dispatch_cycle_duration_seconds_count ");
        assert_eq!(value(&text, &cycles), Some(1.0));
    }
    assert_eq!(label_names(&text, "llm_d_epp_flow_control_pool_saturation"), ["inference_pool", "stage"]);
    assert_eq!(label_names(&text, "inference_extension_flow_control_pool_saturation"), ["inference_pool"]);
    assert_eq!(label_names(&text, "llm_d_epp_flow_control_stale_endpoints"), ["detector"]);
    assert_eq!(
        label_names(&text, "llm_d_epp_flow_control_requests_total"),
        ["inference_pool", "outcome", "priority"]
    );
    let effective = r#"llm_d_epp_flow_control_pool_saturation{inference_pool="pool",stage="effective"}"#;
    assert_eq!(value(&text, effective), Some(0.5));
    assert!(text.contains("# TYPE llm_d_epp_flow_control_requests counter"));
    assert!(text.contains(r#"le="60.0""#), "queue-duration buckets end at 60s");
}

#[test]
fn removal_returns_the_gauges_exactly() {
    let registry = MetricsRegistry::new("pool");
    let m = FlowControlMetrics::register(&registry);
    let l = m.flow_queue_labels(LABELS);
    m.flow_queue_add(&l, 1234);
    m.flow_queue_add(&l, 66);
    m.flow_queue_remove(&l, 1234);
    let text = registry.encode();
    let bytes = r#"llm_d_epp_flow_control_queue_bytes{fairness_id="tenant",priority="-2",inference_pool="pool",model_name="m",target_model_name="t"}"#;
    assert_eq!(value(&text, bytes), Some(66.0));
    m.flow_queue_remove(&l, 66);
    let text = registry.encode();
    assert_eq!(value(&text, bytes), Some(0.0));
    let size = bytes.replace("queue_bytes", "queue_size").replace("llm_d_epp", "inference_extension");
    assert_eq!(value(&text, &size), Some(0.0));
}
