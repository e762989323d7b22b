//! Per-endpoint capacities for heterogeneous pools: labels, `endpointCapacities`, and their precedence.

use std::collections::BTreeMap;

use super::*;

fn labelled(n: u8, labels: &[(&str, &str)]) -> Arc<Endpoint> {
    let labels: BTreeMap<String, String> =
        labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let addr = format!("10.0.1.{n}:8000").parse().unwrap();
    Arc::new(Endpoint::new(format!("gpu-{n}"), addr).with_labels(labels))
}

#[test]
fn labels_override_the_default_capacity() {
    let d = requests_mode(100, 0.0);
    let l4 = labelled(1, &[("epp.io/max-concurrency", "10"), ("epp.io/max-token-concurrency", "50000")]);
    let h100 = labelled(2, &[]);
    assert_eq!(d.capacity(&l4), Capacity { requests: 10, tokens: 50_000 });
    assert_eq!(d.capacity(&h100), Capacity { requests: 100, tokens: 1_000_000 });
    let c = candidates_of(&[l4.clone(), h100.clone()]);
    for _ in 0..10 {
        dispatch_to(&d, &l4, 1);
    }
    for _ in 0..45 {
        dispatch_to(&d, &h100, 1);
    }
    // The L4 is full at 10 and filtered; the H100 has room. Saturation weighs by capacity: 55 / 110.
    assert_eq!(run_filter(&d, &c), vec![1]);
    assert_eq!(d.saturation(&c, Instant::now()), 0.5);
    assert_eq!(d.capacity(&l4), Capacity { requests: 10, tokens: 50_000 }, "cached the same");
}

#[test]
fn invalid_labels_fall_back_to_the_default() {
    let d = requests_mode(100, 0.0);
    for value in ["ten", "0", "-4", "", "1.5"] {
        let ep = labelled(1, &[("epp.io/max-concurrency", value)]);
        assert_eq!(d.capacity(&ep).requests, 100, "{value:?}");
        dispatch_to(&d, &ep, 1); // resolved (and logged) on first dispatch, still the default
        assert_eq!(d.capacity(&ep).requests, 100, "{value:?}");
    }
    let spaced = labelled(2, &[("epp.io/max-concurrency", " 12 ")]);
    assert_eq!(d.capacity(&spaced).requests, 12);
}

#[test]
fn custom_and_disabled_labels() {
    let d = detector(ConcurrencyConfig {
        capacity_label: "gpu/slots".into(),
        token_capacity_label: String::new(),
        ..Default::default()
    });
    let ep = labelled(1, &[("gpu/slots", "7"), ("epp.io/max-concurrency", "3"), ("", "5")]);
    assert_eq!(d.capacity(&ep), Capacity { requests: 7, tokens: 1_000_000 });
}

#[test]
fn endpoint_capacities_win_over_labels_per_limit() {
    let c = config_of(json!({
        "endpointCapacities": [{"address": "10.0.1.1:8000", "maxConcurrency": 4}],
    }))
    .unwrap();
    let d = detector(c);
    let listed = labelled(1, &[("epp.io/max-concurrency", "10"), ("epp.io/max-token-concurrency", "900")]);
    let other = labelled(2, &[("epp.io/max-concurrency", "10")]);
    // The entry sets requests only; tokens still come from the label.
    assert_eq!(d.capacity(&listed), Capacity { requests: 4, tokens: 900 });
    assert_eq!(d.capacity(&other), Capacity { requests: 10, tokens: 1_000_000 });
    let cands = candidates_of(&[listed.clone(), other]);
    for _ in 0..4 {
        dispatch_to(&d, &listed, 1);
    }
    assert_eq!(run_filter(&d, &cands), vec![1]);
    assert!((d.saturation(&cands, Instant::now()) - 4.0 / 14.0).abs() < 1e-12);
}
