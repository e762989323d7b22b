//! The four KEDA signals of deploy/keda/, evaluated by a real Prometheus scraping epp (and the model
//! servers) every second, during and after a held load: the queries are read from the shipped
//! ScaledObjects and PrometheusRule, placeholders filled, so what is tested is what is deployed.
//!
//! Prometheus adds the target labels `namespace` and `service` at scrape time, as Kubernetes discovery
//! would, so the label matchers of the guide's queries select epp's series here exactly as in a cluster.

use std::path::Path;

use serde_yaml_ng::Value as Yaml;

use crate::*;
use epp_testkit::held_backend::HeldBackends;
use epp_testkit::prometheus::{prometheus_or_skip, Prometheus, ScrapeTarget};
use epp_testkit::*;

const NAMESPACE: &str = "epp-e2e";
const EPP_SERVICE: &str = "epp-e2e-epp";
/// V_P of the token-backlog signal, as calibrated upstream for Qwen3-32B on H100 TP=2.
const PREFILL_TOKENS_PER_SECOND: &str = "15928";
const CAPACITY: i64 = 4;
const SENT: usize = 10;

/// The placeholders of deploy/keda/, filled for this test.
fn keda_vars(prometheus_port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("NAMESPACE", NAMESPACE.to_string()),
        ("EPP_SERVICE", EPP_SERVICE.to_string()),
        ("MODEL", MODEL.to_string()),
        ("INFERENCE_POOL", POOL.to_string()),
        ("TARGET_DEPLOYMENT", "held-backends".to_string()),
        ("PROMETHEUS_URL", format!("http://127.0.0.1:{prometheus_port}")),
        ("PREFILL_TOKENS_PER_SECOND", PREFILL_TOKENS_PER_SECOND.to_string()),
    ]
}

/// A deploy/keda/ manifest with its placeholders filled, parsed.
fn manifest(path: &str, prometheus_port: u16) -> Yaml {
    let path = manifest_dir().join("deploy/keda").join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let rendered = render_template(&text, &keda_vars(prometheus_port))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&rendered).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every trigger of a ScaledObject: (name, query).
fn triggers(scaled_object: &Yaml) -> Vec<(String, String)> {
    assert_eq!(scaled_object["kind"].as_str(), Some("ScaledObject"));
    let list = scaled_object["spec"]["triggers"].as_sequence().expect("spec.triggers");
    list.iter()
        .map(|t| {
            let name = t["name"].as_str().expect("trigger name").to_string();
            let query = t["metadata"]["query"].as_str().expect("trigger query").trim().to_string();
            (name, query)
        })
        .collect()
}

/// The query of trigger `name` in ScaledObject `path`.
fn trigger(path: &str, name: &str, prometheus_port: u16) -> String {
    let all = triggers(&manifest(path, prometheus_port));
    all.into_iter().find(|(n, _)| n == name).map_or_else(|| panic!("{path}: no {name}"), |(_, q)| q)
}

/// The PrometheusRule's groups as a Prometheus rule file, evaluated every second instead of every 15s.
fn rule_file(prometheus_rule: &Yaml) -> String {
    assert_eq!(prometheus_rule["kind"].as_str(), Some("PrometheusRule"));
    let mut groups = prometheus_rule["spec"]["groups"].clone();
    for group in groups.as_sequence_mut().expect("spec.groups") {
        group["interval"] = Yaml::from("1s");
    }
    let mut file = serde_yaml_ng::Mapping::new();
    file.insert(Yaml::from("groups"), groups);
    serde_yaml_ng::to_string(&file).expect("serialize rules")
}

/// The queries the test asserts on, from the shipped manifests.
struct Signals {
    queue: String,
    running: String,
    saturation: String,
    prefill_backlog: String,
    decode_kv: String,
    latency: String,
}

impl Signals {
    fn load(port: u16) -> Self {
        Signals {
            queue: trigger("queue/scaledobject.yaml", "epp-queue-size", port),
            running: trigger("queue/scaledobject.yaml", "epp-running-requests", port),
            saturation: trigger("saturation/scaledobject.yaml", "pool-saturation", port),
            prefill_backlog: trigger("token-backlog/scaledobject.yaml", "prefill-backlog-seconds", port),
            decode_kv: trigger("token-backlog/scaledobject.yaml", "decode-kv-utilization", port),
            latency: trigger("latency/scaledobject.yaml", "saturation", port),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keda_signals_follow_a_held_load_in_prometheus() {
    let test_name = "the_keda_signals_follow_a_held_load_in_prometheus";
    let Some(prometheus_bin) = prometheus_or_skip(test_name) else { return };
    let backends = HeldBackends::start(2);
    let config = detector_config(Detector { max_concurrency: 2, in_profile: true }, true, "");
    let Some(front) = start_front(test_name, &backends, &config) else { return };
    let client = http_client();

    let label = |name: &str, value: &str| (name.to_string(), value.to_string());
    let mut targets = vec![ScrapeTarget {
        job: "epp".into(),
        port: front.epp.metrics_port,
        labels: vec![label("namespace", NAMESPACE), label("service", EPP_SERVICE)],
    }];
    targets.extend(backends.ports.iter().map(|&port| ScrapeTarget {
        job: "vllm".into(),
        port,
        labels: vec![label("namespace", NAMESPACE)],
    }));
    let rules = rule_file(&manifest("latency/prometheus-rule.yaml", 0));
    let prometheus = Prometheus::start(prometheus_bin, &targets, Some(&rules));
    let signals = Signals::load(prometheus.port);
    every_shipped_query_is_valid_promql(&prometheus).await;
    prometheus.wait_for("all targets up", "sum(up)", |up| up == 3.0).await;

    // A first request creates the TTFT histogram series, so the load below shows as an increase in rate().
    assert_eq!(send(&client, &front, None, false).await.status, 200);
    let ttft_count = format!("sum(llm_d_epp_request_ttft_seconds_count{{namespace=\"{NAMESPACE}\"}})");
    prometheus.wait_for("the first request scraped", &ttft_count, |n| n == 1.0).await;
    let idle_saturation = prometheus.wait_for("idle saturation", &signals.saturation, |s| s < 1.0).await;
    assert_eq!(prometheus.value(&signals.queue).await, Some(0.0));

    let sent = spawn_held(&client, &front, SENT);
    wait_held(&backends, CAPACITY).await;
    let excess = (SENT as i64 - CAPACITY) as f64;
    let p = &prometheus;
    let during = [
        ("queue", p.wait_for("queue while held", &signals.queue, |q| q == excess).await),
        ("running", p.wait_for("running while held", &signals.running, |r| r == CAPACITY as f64).await),
        ("saturation", p.wait_for("saturation while held", &signals.saturation, |s| s >= 1.0).await),
        ("prefill backlog s", p.wait_for("backlog while held", &signals.prefill_backlog, |b| b > 0.0).await),
        ("decode kv", p.wait_for("kv while held", &signals.decode_kv, |kv| kv > 0.0).await),
    ];
    let tokens = format!("sum(llm_d_epp_inflight_tokens{{namespace=\"{NAMESPACE}\"}})");
    let inflight_tokens = p.value(&tokens).await;

    backends.release_all();
    let replies = replies(sent).await;
    assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
    let after = [
        ("queue", p.wait_for("queue after", &signals.queue, |q| q == 0.0).await),
        ("running", p.wait_for("running after", &signals.running, |r| r == 0.0).await),
        ("saturation", p.wait_for("saturation after", &signals.saturation, |s| s < 1.0).await),
        ("prefill backlog s", p.wait_for("backlog after", &signals.prefill_backlog, |b| b == 0.0).await),
        ("decode kv", p.wait_for("kv after", &signals.decode_kv, |kv| kv == 0.0).await),
    ];

    // Signal 4 without a predicted-latency producer: the recording-rule chain falls back to the measured
    // TTFT, and to 0 for TPOT (nothing streamed, nothing predicted). With predictions it reads them:
    // `signal_4_reads_predicted_latency_in_prometheus` below.
    let ttft_p90 = p.wait_for("TTFT p90 rule", "epp:latency_ttft_p90:seconds", |t| t > 0.0).await;
    let latency = p.wait_for("smoothed latency saturation", &signals.latency, |s| s > 0.0).await;
    let tpot_p90 = p.value("epp:latency_tpot_p90:seconds").await;
    assert_eq!(tpot_p90, Some(0.0), "no TPOT input: the rule falls back to vector(0)");
    let predicted = p.value("count(llm_d_epp_request_predicted_ttft_seconds_bucket)").await;
    assert_eq!(predicted, None, "no predicted-latency producer configured, yet predictions were recorded");

    // An error, so the errors panel has a series; then every non-predictor panel must show data.
    let bad = post_raw(&client, &front.url("/v1/completions"), b"{not json".to_vec(), &[]).await;
    assert_eq!(bad.status().as_u16(), 400);
    p.wait_for("the error scraped", "sum(inference_objective_request_error_total)", |n| n >= 1.0).await;
    dashboard_panels_show_data(p, &front.epp.metrics_text(), |expr| !expr.contains("epp_predictor_")).await;

    eprintln!(
        "KEDA signals (Prometheus, {SENT} requests, capacity {CAPACITY}): idle saturation {idle_saturation}; \
         during {during:?} (inflight tokens {inflight_tokens:?}); after {after:?}; signal 4: TTFT p90 \
         {ttft_p90:.3}s, TPOT p90 {tpot_p90:?}, epp:saturation:smoothed {latency:.4}"
    );
}

/// Every trigger query of every shipped ScaledObject parses and evaluates (the kube-state-metrics ones to
/// nothing here), so a typo in deploy/keda/ fails the test rather than KEDA's silent fallback.
async fn every_shipped_query_is_valid_promql(prometheus: &Prometheus) {
    let dir = manifest_dir().join("deploy/keda");
    for signal in ["queue", "saturation", "token-backlog", "latency"] {
        let path = format!("{signal}/scaledobject.yaml");
        assert!(Path::new(&dir.join(&path)).is_file(), "{path}");
        for (name, query) in triggers(&manifest(&path, prometheus.port)) {
            if let Err(e) = prometheus.query(&query).await {
                panic!("{path} trigger {name}: {e}");
            }
        }
    }
}

/// One streamed completion through Envoy; returns its status.
async fn send_streamed(client: &reqwest::Client, stack: &Stack, n: usize) -> u16 {
    let body = json!({"model": MODEL, "prompt": format!("signal four {n} {}", rand::random::<u64>()),
        "max_tokens": 8, "stream": true, "stream_options": {"include_usage": true}});
    let response = post_json(client, &stack.url("/v1/completions"), &body).await;
    let status = response.status().as_u16();
    read_text(response).await;
    status
}

/// Signal 4 fed by epp's own predictions: epp with llm-d's SLO-aware pipeline (streaming, so both TTFT and
/// TPOT are predicted) trains on streamed requests, and the shipped recording rules then have predicted
/// TTFT and TPOT histograms to take their p90 from (the measured streaming TPOT exists too now).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_4_reads_predicted_latency_in_prometheus() {
    let test_name = "signal_4_reads_predicted_latency_in_prometheus";
    let Some(prometheus_bin) = prometheus_or_skip(test_name) else { return };
    let guide = std::fs::read_to_string(manifest_dir().join("config/predicted-latency-slo.yaml"))
        .expect("config/predicted-latency-slo.yaml");
    let config = format!("--config-text={guide}");
    let args = [
        config.as_str(),
        FAST_POOL_GAUGES,
        "--latency-min-samples-for-retrain=8",
        "--latency-retraining-interval=100ms",
    ];
    let Some(stack) = start_stack(test_name, FULL_DUPLEX, 2, &["--chunk-delay-ms=5"], &args) else { return };
    let client = http_client();
    let label = |name: &str, value: &str| (name.to_string(), value.to_string());
    let targets = [ScrapeTarget {
        job: "epp".into(),
        port: stack.epp.metrics_port,
        labels: vec![label("namespace", NAMESPACE), label("service", EPP_SERVICE)],
    }];
    let rules = rule_file(&manifest("latency/prometheus-rule.yaml", 0));
    let prometheus = Prometheus::start(prometheus_bin, &targets, Some(&rules));
    let p = &prometheus;
    p.wait_for("epp up", "sum(up)", |up| up == 1.0).await;

    // Train until a model is published, then make sure Prometheus has seen the predicted series exist,
    // so the traffic after it shows as a rate.
    let mut sent = 0;
    let generation = "max(epp_predictor_model_generation)";
    while p.value(generation).await.unwrap_or(0.0) < 1.0 {
        assert_eq!(send_streamed(&client, &stack, sent).await, 200);
        sent += 1;
        assert!(sent < 2_000, "no model after {sent} requests:\n{}", stack.epp.metrics_text());
    }
    assert_eq!(send_streamed(&client, &stack, sent).await, 200);
    let predicted_count =
        format!("sum(llm_d_epp_request_predicted_ttft_seconds_count{{namespace=\"{NAMESPACE}\"}})");
    p.wait_for("the first prediction scraped", &predicted_count, |n| n >= 1.0).await;
    for n in 0..30 {
        assert_eq!(send_streamed(&client, &stack, sent + 1 + n).await, 200);
    }

    let predicted_p90 = |family: &str| {
        format!("histogram_quantile(0.9, sum(rate({family}_bucket{{namespace=\"{NAMESPACE}\",service=\"{EPP_SERVICE}\"}}[1m])) by (le))")
    };
    let ttft = p.wait_for("TTFT p90 rule", "epp:latency_ttft_p90:seconds", |t| t > 0.0).await;
    let tpot = p.wait_for("TPOT p90 rule", "epp:latency_tpot_p90:seconds", |t| t > 0.0).await;
    let predicted_ttft = p.value(&predicted_p90("llm_d_epp_request_predicted_ttft_seconds")).await;
    let predicted_tpot = p.value(&predicted_p90("llm_d_epp_request_predicted_tpot_seconds")).await;
    assert!(predicted_ttft.is_some_and(|v| v > 0.0), "predicted TTFT p90 {predicted_ttft:?}");
    assert!(predicted_tpot.is_some_and(|v| v > 0.0), "predicted TPOT p90 {predicted_tpot:?}");
    let saturation = p.wait_for("signal 4", "epp:saturation:smoothed", |s| s > 0.0).await;
    dashboard_panels_show_data(p, &stack.epp.metrics_text(), |expr| expr.contains("epp_predictor_")).await;
    eprintln!(
        "signal 4 from predictions: rule TTFT p90 {ttft:.4}s (predicted {predicted_ttft:?}), rule TPOT p90 \
         {tpot:.5}s (predicted {predicted_tpot:?}), epp:saturation:smoothed {saturation:.4}"
    );
}

/// The shipped Grafana dashboard's queries, as (panel title, PromQL), with Grafana's `$__rate_interval`
/// as 1m.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = manifest_dir().join("deploy/helm/epp/dashboards/epp.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut out = Vec::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("?").to_string();
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr").replace("$__rate_interval", "1m");
            out.push((title.clone(), expr));
        }
    }
    assert!(out.len() >= 16, "the dashboard lost panels: {out:?}");
    out
}

/// The metric families a query names (epp's prefixes; recording rules, with colons, are not epp's).
fn metric_families(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| !t.contains(':'))
        .filter(|t| ["inference_", "llm_d_epp_", "epp_"].iter().any(|p| t.starts_with(p)))
        .map(|t| {
            ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|s| t.strip_suffix(s))
                .unwrap_or(t)
                .to_string()
        })
        .collect()
}

/// Every dashboard query `select` picks names only metrics epp exports (`epp_metrics`, its exposition)
/// and returns data in Prometheus.
async fn dashboard_panels_show_data(p: &Prometheus, epp_metrics: &str, select: impl Fn(&str) -> bool) {
    let mut checked = 0;
    for (title, expr) in dashboard_queries().into_iter().filter(|(_, e)| select(e)) {
        for family in metric_families(&expr) {
            assert!(
                epp_metrics.contains(&format!("# TYPE {family} ")),
                "panel {title:?}: {family} is not a metric epp exports ({expr})"
            );
        }
        let found = p.wait_for_data(&expr).await;
        assert!(found, "panel {title:?}: no data for {expr}");
        checked += 1;
    }
    assert!(checked > 0, "no dashboard query selected");
    eprintln!("dashboard: {checked} queries return data");
}
