//! The whole exposition as Prometheus would scrape it, with every component's families registered in one
//! registry the way `app` wires them: names, label sets, accumulation, bounded and escaped labels, and
//! per-endpoint series pruned across components when an endpoint leaves.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use epp::datastore::{Endpoint, EndpointTelemetry};
use epp::director::{DirectorMetrics, RequestMetrics};
use epp::error::ErrorCode;
use epp::extproc::OverheadMetrics;
use epp::flowcontrol::FlowControlMetrics;
use epp::metrics::{
    MetricsRegistry, RequestLabels, BUILD_COMMIT, BUILD_REF, MAX_MODEL_LABEL_VALUES, OVERFLOW_LABEL,
};
use epp::request::Usage;
use epp::scheduling::{PluginMetrics, SchedulerMetrics};
use epp::telemetry::PoolMetrics;

/// Every component's handles over one registry, as `app` builds them.
struct M {
    registry: Arc<MetricsRegistry>,
    requests: Arc<RequestMetrics>,
    scheduler: Arc<SchedulerMetrics>,
    plugins: PluginMetrics,
    overhead: Arc<OverheadMetrics>,
    pool: Arc<PoolMetrics>,
    _flow: Arc<FlowControlMetrics>,
}

impl M {
    fn new(pool: &str) -> Self {
        Self::with_registry(MetricsRegistry::new(pool))
    }

    fn with_registry(registry: Arc<MetricsRegistry>) -> Self {
        let DirectorMetrics { requests, scheduler } = DirectorMetrics::register(&registry);
        Self {
            requests,
            scheduler,
            plugins: PluginMetrics::register(&registry),
            overhead: OverheadMetrics::register(&registry),
            pool: PoolMetrics::register(&registry),
            _flow: FlowControlMetrics::register(&registry),
            registry,
        }
    }

    fn encode(&self) -> String {
        self.registry.encode()
    }
}

const LABELS: RequestLabels<'static> = RequestLabels {
    model_name: "llama",
    target_model_name: "llama-lora",
    priority: 1,
    fairness_id: "tenant-a",
};

fn endpoint(name: &str, addr: &str) -> Endpoint {
    let mut ep = Endpoint::new(name, addr.parse().unwrap());
    ep.namespace = "ns".to_string();
    ep
}

/// The value of the one sample of `name` whose labels include all of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let matches: Vec<f64> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = series.split_once('{').unwrap_or((series, ""));
            (series_name == name && wanted.iter().all(|w| rest.contains(w.as_str())))
                .then(|| value.parse().ok())?
        })
        .collect();
    assert!(matches.len() <= 1, "{name} {labels:?} matches {} series in\n{text}", matches.len());
    matches.first().copied()
}

/// The label names of the first sample of `name`, sorted.
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

fn record_one_of_each(m: &M, ep: &Arc<Endpoint>) {
    m.requests.record_request(&m.requests.series(LABELS), 1000);
    m.requests.record_error(LABELS, ErrorCode::ResourceExhausted);
    let usage = Usage { prompt_tokens: 100, completion_tokens: 10, cached_tokens: 64 };
    m.requests.record_response(&m.requests.series(LABELS), Duration::from_secs(2), 5000, Some(usage));
    m.requests.record_ttft(&m.requests.series(LABELS), Duration::from_millis(300), true);
    m.requests.running_inc(&m.requests.series(LABELS));
    m.scheduler.record_scheduling(Duration::from_micros(300), "llama-lora", Some(ep));
    m.scheduler.record_scheduling(Duration::from_micros(300), "llama-lora", None);
    m.scheduler.observe_plugin("Scorer", "queue-scorer", "queue", 0.0002);
    m.overhead.observe_request_processing(Duration::from_micros(40));
    m.overhead.observe_response_processing(Duration::from_micros(15));
    m.requests.record_model_rewrite("canary", "llama", "llama-lora");
    m.plugins.prefix_indexer.set_size(42);
    m.plugins.prefix_indexer.observe_hit(0.5, 1024);
    m.plugins.inflight.set(ep, "inflight-load-producer", 3, 1200);
    ep.update_telemetry(EndpointTelemetry {
        waiting_queue_size: 2,
        running_requests: 4,
        kv_cache_usage: 0.5,
        update_time: Some(Instant::now()),
        ..Default::default()
    });
    m.pool.update_pool(std::slice::from_ref(ep), Instant::now(), Duration::from_secs(2));
}

#[test]
fn exposition_has_every_name_with_its_labels() {
    let m = M::new("vllm-pool");
    let ep = Arc::new(endpoint("pod-0-rank-0", "10.0.0.1:8000"));
    record_one_of_each(&m, &ep);
    let text = m.encode();

    let model = ["model_name", "target_model_name"];
    let flow = ["fairness_id", "model_name", "priority", "target_model_name"];
    let expected: &[(&str, &[&str])] = &[
        ("inference_objective_request_total", &["model_name", "priority", "target_model_name"]),
        ("inference_objective_request_error_total", &["error_code", "model_name", "target_model_name"]),
        ("inference_objective_request_duration_seconds_bucket", &model),
        ("inference_objective_request_sizes_bucket", &model),
        ("inference_objective_response_sizes_bucket", &model),
        ("inference_objective_input_tokens_bucket", &model),
        ("inference_objective_output_tokens_bucket", &model),
        ("inference_objective_prompt_cached_tokens_bucket", &model),
        ("inference_objective_running_requests", &["model_name"]),
        ("inference_objective_normalized_time_per_output_token_seconds_bucket", &model),
        ("inference_objective_request_ttft_seconds_bucket", &model),
        ("inference_pool_average_kv_cache_utilization", &["name"]),
        ("inference_pool_average_queue_size", &["name"]),
        ("inference_pool_average_running_requests", &["name"]),
        ("inference_pool_ready_pods", &["name"]),
        ("inference_pool_per_pod_queue_size", &["model_server_pod", "name"]),
        ("inference_extension_scheduler_e2e_duration_seconds_bucket", &[]),
        (
            "inference_extension_scheduler_attempts_total",
            &["namespace", "pod_name", "port", "status", "target_model_name"],
        ),
        (
            "inference_extension_plugin_duration_seconds_bucket",
            &["extension_point", "plugin_name", "plugin_type"],
        ),
        ("inference_extension_prefix_indexer_size", &[]),
        ("inference_extension_prefix_indexer_hit_ratio_bucket", &[]),
        ("inference_extension_prefix_indexer_hit_bytes_bucket", &[]),
        ("inference_extension_info", &["build_ref", "commit"]),
        (
            "inference_extension_model_rewrite_decisions_total",
            &["model_name", "model_rewrite_name", "target_model"],
        ),
        ("llm_d_epp_request_total", &flow),
        (
            "llm_d_epp_request_error_total",
            &["error_code", "fairness_id", "model_name", "priority", "target_model_name"],
        ),
        ("llm_d_epp_request_duration_seconds_bucket", &flow),
        ("llm_d_epp_request_size_bytes_bucket", &flow),
        ("llm_d_epp_response_size_bytes_bucket", &flow),
        ("llm_d_epp_request_input_tokens_bucket", &flow),
        ("llm_d_epp_request_output_tokens_bucket", &flow),
        ("llm_d_epp_request_cached_tokens_bucket", &flow),
        ("llm_d_epp_request_running", &flow),
        ("llm_d_epp_request_ntpot_seconds_bucket", &flow),
        (
            "llm_d_epp_request_ttft_seconds_bucket",
            &["fairness_id", "model_name", "priority", "streaming", "target_model_name"],
        ),
        ("llm_d_epp_average_kv_cache_utilization", &["name"]),
        ("llm_d_epp_average_queue_size", &["name"]),
        ("llm_d_epp_average_running_requests", &["name"]),
        ("llm_d_epp_std_dev_kv_cache_utilization", &["name"]),
        ("llm_d_epp_std_dev_queue_size", &["name"]),
        ("llm_d_epp_std_dev_running_requests", &["name"]),
        ("llm_d_epp_ready_endpoints", &["name"]),
        ("llm_d_epp_per_endpoint_queue_size", &["model_server_endpoint", "name"]),
        ("llm_d_epp_scheduler_e2e_duration_seconds_bucket", &[]),
        (
            "llm_d_epp_scheduler_attempts_total",
            &["endpoint_name", "namespace", "port", "status", "target_model_name"],
        ),
        ("llm_d_epp_plugin_duration_seconds_bucket", &["extension_point", "plugin_name", "plugin_type"]),
        ("llm_d_epp_request_processing_duration_seconds_bucket", &[]),
        ("llm_d_epp_response_processing_duration_seconds_bucket", &[]),
        ("llm_d_epp_info", &["build_ref", "commit"]),
        ("epp_metrics_dropped_label_sets_total", &["family"]),
        ("llm_d_epp_model_rewrite_decisions_total", &["model_name", "model_rewrite_name", "target_model"]),
        (
            "llm_d_epp_inflight_tokens",
            &["endpoint_name", "fairness_id", "namespace", "priority", "producer_name"],
        ),
        (
            "llm_d_epp_inflight_requests",
            &["endpoint_name", "fairness_id", "namespace", "priority", "producer_name"],
        ),
    ];
    for (name, labels) in expected {
        if labels.is_empty() {
            let (histogram, plain) = (format!("{name}{{le="), format!("{name} "));
            let found = text.lines().any(|l| l.starts_with(&histogram) || l.starts_with(&plain));
            assert!(found, "no unlabelled {name} in\n{text}");
        } else {
            assert_eq!(label_names(&text, name), *labels, "labels of {name}");
        }
    }
    // OpenMetrics names a counter family without `_total`; its samples carry the suffix.
    assert!(text.contains(
        "# HELP inference_objective_request [ALPHA] Counter of inference objective requests broken out \
         for each model and target model.\n"
    ));
    assert!(text.contains("# TYPE inference_objective_request counter\n"));
    assert!(text.ends_with("# EOF\n"));
    // The corrected bucket, not Go's 32778.
    assert!(text.contains("inference_objective_response_sizes_bucket{le=\"32768.0\""), "{text}");
    assert!(!text.contains("32778"));
}

#[test]
fn counters_and_histograms_accumulate() {
    let m = M::new("p");
    m.requests.record_request(&m.requests.series(LABELS), 100);
    m.requests.record_request(&m.requests.series(LABELS), 100);
    m.requests.record_error(LABELS, ErrorCode::BadRequest);
    let usage = Usage { prompt_tokens: 0, completion_tokens: 4, cached_tokens: 0 };
    m.requests.record_response(&m.requests.series(LABELS), Duration::from_secs(2), 10, Some(usage));
    let text = m.encode();
    let model = [("model_name", "llama"), ("target_model_name", "llama-lora")];
    let with_priority = [model[0], model[1], ("priority", "1")];
    assert_eq!(sample(&text, "inference_objective_request_total", &with_priority), Some(2.0));
    assert_eq!(sample(&text, "llm_d_epp_request_total", &[model[0], ("fairness_id", "tenant-a")]), Some(2.0));
    let error = [model[0], ("error_code", "BadRequest")];
    assert_eq!(sample(&text, "inference_objective_request_error_total", &error), Some(1.0));
    assert_eq!(sample(&text, "llm_d_epp_request_error_total", &error), Some(1.0));
    assert_eq!(sample(&text, "inference_objective_request_sizes_count", &model), Some(2.0));
    // 2s over 4 tokens = 0.5s per token.
    assert_eq!(
        sample(&text, "inference_objective_normalized_time_per_output_token_seconds_sum", &model),
        Some(0.5)
    );
    assert_eq!(
        sample(&text, "inference_objective_input_tokens_count", &model),
        None,
        "zero prompt tokens skipped"
    );
    assert_eq!(sample(&text, "inference_objective_prompt_cached_tokens_count", &model), Some(1.0));
}

#[test]
fn running_gauges_never_go_negative() {
    let m = M::new("p");
    m.requests.running_dec(&m.requests.series(LABELS));
    m.requests.running_inc(&m.requests.series(LABELS));
    m.requests.running_dec(&m.requests.series(LABELS));
    m.requests.running_dec(&m.requests.series(LABELS));
    let text = m.encode();
    assert_eq!(sample(&text, "inference_objective_running_requests", &[("model_name", "llama")]), Some(0.0));
    assert_eq!(sample(&text, "llm_d_epp_request_running", &[("model_name", "llama")]), Some(0.0));
    m.requests.running_inc(&m.requests.series(LABELS));
    let text = m.encode();
    assert_eq!(sample(&text, "inference_objective_running_requests", &[("model_name", "llama")]), Some(1.0));
    // No model name: not counted, as in Go.
    m.requests.running_inc(&m.requests.series(RequestLabels { model_name: "", ..LABELS }));
    assert!(!m.encode().contains("inference_objective_running_requests{model_name=\"\"}"));
}

#[test]
fn pool_gauges_use_fresh_endpoints_and_prune_departed_ones() {
    let m = M::new("vllm-pool");
    let now = Instant::now();
    let staleness = Duration::from_secs(2);
    let telemetry = |queue: u64, running: u64, kv: f64, age: Duration| EndpointTelemetry {
        waiting_queue_size: queue,
        running_requests: running,
        kv_cache_usage: kv,
        update_time: Some(now.checked_sub(age).expect("after boot")),
        ..Default::default()
    };
    let eps: Vec<Arc<Endpoint>> = (0..3)
        .map(|i| Arc::new(endpoint(&format!("pod-{i}-rank-0"), &format!("10.0.0.{}:8000", i + 1))))
        .collect();
    eps[0].update_telemetry(telemetry(1, 2, 0.25, Duration::ZERO));
    eps[1].update_telemetry(telemetry(4, 2, 0.5, Duration::from_secs(1)));
    eps[2].update_telemetry(telemetry(100, 100, 1.0, Duration::from_secs(10))); // stale
    m.pool.update_pool(&eps, now, staleness);

    let text = m.encode();
    let pool = [("name", "vllm-pool")];
    assert_eq!(sample(&text, "inference_pool_ready_pods", &pool), Some(2.0));
    assert_eq!(sample(&text, "llm_d_epp_ready_endpoints", &pool), Some(2.0));
    assert_eq!(sample(&text, "inference_pool_average_queue_size", &pool), Some(2.5));
    assert_eq!(sample(&text, "llm_d_epp_std_dev_queue_size", &pool), Some(2.12));
    assert_eq!(sample(&text, "inference_pool_average_kv_cache_utilization", &pool), Some(0.38));
    assert_eq!(sample(&text, "llm_d_epp_std_dev_running_requests", &pool), Some(0.0));
    assert_eq!(sample(&text, "inference_pool_average_running_requests", &pool), Some(2.0));
    // Per-pod queue sizes cover every current endpoint, stale ones included.
    let pod2 = [("name", "vllm-pool"), ("model_server_pod", "pod-2-rank-0")];
    assert_eq!(sample(&text, "inference_pool_per_pod_queue_size", &pod2), Some(100.0));
    let ep1 = [("model_server_endpoint", "pod-1-rank-0")];
    assert_eq!(sample(&text, "llm_d_epp_per_endpoint_queue_size", &ep1), Some(4.0));

    // pod-1 leaves: its series go, the others stay.
    m.plugins.inflight.set(&eps[1], "inflight-load-producer", 2, 500);
    m.pool.update_pool(&[eps[0].clone(), eps[2].clone()], now, staleness);
    let text = m.encode();
    assert_eq!(sample(&text, "llm_d_epp_per_endpoint_queue_size", &ep1), None);
    assert_eq!(
        sample(&text, "inference_pool_per_pod_queue_size", &[("model_server_pod", "pod-1-rank-0")]),
        None
    );
    assert_eq!(sample(&text, "llm_d_epp_inflight_tokens", &[("endpoint_name", "pod-1-rank-0")]), None);
    assert_eq!(sample(&text, "inference_pool_per_pod_queue_size", &pod2), Some(100.0));
    assert_eq!(sample(&text, "inference_pool_ready_pods", &pool), Some(1.0));
    assert_eq!(sample(&text, "inference_pool_average_queue_size", &pool), Some(1.0));
    assert_eq!(m.registry.endpoints().tracked_names(), ["pod-0-rank-0", "pod-2-rank-0"]);

    // Nothing fresh: ready drops to 0 and the averages keep their last values, as in Go.
    m.pool.update_pool(&[eps[2].clone()], now, staleness);
    let text = m.encode();
    assert_eq!(sample(&text, "inference_pool_ready_pods", &pool), Some(0.0));
    assert_eq!(sample(&text, "inference_pool_average_queue_size", &pool), Some(1.0));
}

#[test]
fn remove_endpoint_drops_all_its_series() {
    let m = M::new("p");
    let a = Arc::new(endpoint("a", "10.0.0.1:8000"));
    let b = Arc::new(endpoint("b", "10.0.0.2:8000"));
    for ep in [&a, &b] {
        m.plugins.inflight.set(ep, "inflight-load-producer", 1, 10);
        m.scheduler.record_scheduling(Duration::from_micros(100), "llama", Some(ep));
    }
    m.pool.update_pool(&[a.clone(), b.clone()], Instant::now(), Duration::from_secs(2));
    m.plugins.inflight.remove_endpoint(&a);
    let text = m.encode();
    for name in
        ["llm_d_epp_inflight_requests", "llm_d_epp_inflight_tokens", "llm_d_epp_scheduler_attempts_total"]
    {
        assert_eq!(sample(&text, name, &[("endpoint_name", "a")]), None, "{name}");
        assert!(sample(&text, name, &[("endpoint_name", "b")]).is_some(), "{name}");
    }
    assert_eq!(sample(&text, "inference_extension_scheduler_attempts_total", &[("pod_name", "a")]), None);
    assert_eq!(sample(&text, "inference_pool_per_pod_queue_size", &[("model_server_pod", "a")]), None);
    let b_attempt = [("pod_name", "b"), ("status", "success"), ("port", "8000"), ("namespace", "ns")];
    assert_eq!(sample(&text, "inference_extension_scheduler_attempts_total", &b_attempt), Some(1.0));
}

#[test]
fn attempts_through_kept_counters_count_exactly_and_start_again_when_the_endpoint_returns() {
    let m = M::new("p");
    let a = Arc::new(endpoint("a", "10.0.0.1:8000"));
    // The first attempt per model finds its series through the families; the rest through the counters
    // the endpoint keeps.
    for _ in 0..3 {
        m.scheduler.record_scheduling(Duration::ZERO, "llama", Some(&a));
    }
    m.scheduler.record_scheduling(Duration::ZERO, "llama-lora", Some(&a));
    let llmd = |text: &str, model: &str| {
        sample(
            text,
            "llm_d_epp_scheduler_attempts_total",
            &[("endpoint_name", "a"), ("target_model_name", model)],
        )
    };
    let gie = |text: &str| {
        sample(
            text,
            "inference_extension_scheduler_attempts_total",
            &[("pod_name", "a"), ("target_model_name", "llama")],
        )
    };
    let text = m.encode();
    assert_eq!(
        (llmd(&text, "llama"), llmd(&text, "llama-lora"), gie(&text)),
        (Some(3.0), Some(1.0), Some(3.0))
    );
    // The endpoint leaves and comes back: its kept counters went with its series.
    m.plugins.inflight.remove_endpoint(&a);
    m.scheduler.record_scheduling(Duration::ZERO, "llama", Some(&a));
    let text = m.encode();
    assert_eq!((llmd(&text, "llama"), llmd(&text, "llama-lora"), gie(&text)), (Some(1.0), None, Some(1.0)));
}

#[test]
fn same_name_at_new_address_replaces_the_old_series() {
    let m = M::new("p");
    let old = endpoint("pod-0", "10.0.0.1:8000");
    let new = endpoint("pod-0", "10.0.0.9:9000");
    m.scheduler.record_scheduling(Duration::ZERO, "llama", Some(&old));
    m.scheduler.record_scheduling(Duration::ZERO, "llama", Some(&new));
    // Removing the old endpoint afterwards must not touch the new one's series.
    m.plugins.inflight.remove_endpoint(&old);
    let text = m.encode();
    let attempts = "llm_d_epp_scheduler_attempts_total";
    assert_eq!(sample(&text, attempts, &[("endpoint_name", "pod-0"), ("port", "8000")]), None);
    assert_eq!(sample(&text, attempts, &[("endpoint_name", "pod-0"), ("port", "9000")]), Some(1.0));
}

#[test]
fn failed_scheduling_has_empty_endpoint_labels() {
    let m = M::new("p");
    m.scheduler.record_scheduling(Duration::ZERO, "llama", None);
    let text = m.encode();
    let failure = [("status", "failure"), ("pod_name", ""), ("namespace", ""), ("port", "")];
    assert_eq!(sample(&text, "inference_extension_scheduler_attempts_total", &failure), Some(1.0));
}

#[test]
fn info_metric_carries_commit_and_build_ref() {
    let m = M::new("p");
    let text = m.encode();
    let info = [("commit", BUILD_COMMIT), ("build_ref", BUILD_REF)];
    assert!(!BUILD_COMMIT.is_empty());
    assert_eq!(BUILD_REF, env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&text, "inference_extension_info", &info), Some(1.0));
    assert_eq!(sample(&text, "llm_d_epp_info", &info), Some(1.0));
}

#[test]
fn request_derived_labels_are_escaped_and_bounded() {
    let m = M::new("p");
    let hostile = RequestLabels { model_name: "a\"b\\c\nd", ..LABELS };
    m.requests.record_request(&m.requests.series(hostile), 1);
    let text = m.encode();
    assert!(text.contains(r#"model_name="a\"b\\c\nd""#), "{text}");

    // The per-label cap alone: a series cap above the 1,002 combinations.
    let m = M::with_registry(MetricsRegistry::with_max_series("p", NonZeroUsize::new(10_000).unwrap()));
    m.registry.pin_model_names(["configured"]);
    let names: Vec<String> = (0..MAX_MODEL_LABEL_VALUES + 10).map(|i| format!("m{i}")).collect();
    for name in &names {
        let l = RequestLabels { model_name: name, target_model_name: name, ..LABELS };
        m.requests.record_request(&m.requests.series(l), 1);
    }
    let configured = RequestLabels { model_name: "configured", target_model_name: "configured", ..LABELS };
    m.requests.record_request(&m.requests.series(configured), 1);
    let text = m.encode();
    let series = text.lines().filter(|l| l.starts_with("inference_objective_request_total{")).count();
    assert_eq!(series, MAX_MODEL_LABEL_VALUES + 2, "distinct names capped, the rest fold into `other`");
    let other = [("model_name", OVERFLOW_LABEL), ("target_model_name", OVERFLOW_LABEL)];
    assert_eq!(sample(&text, "inference_objective_request_total", &other), Some(10.0));
    let configured = [("model_name", "configured")];
    assert_eq!(sample(&text, "inference_objective_request_total", &configured), Some(1.0));
}
