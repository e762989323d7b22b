use std::time::Instant;

use super::*;
use crate::engine::AcceleratorProfile;
use epp::datastore::EndpointTelemetry;
use epp::telemetry::parser::parse_all;
use epp::telemetry::{extract, EngineSet};

fn stats() -> EngineStats {
    EngineStats {
        waiting: 3,
        running: 14,
        kv_usage: 0.6421875,
        prefix_queries: 18_874_368,
        prefix_hits: 15_204_352,
        preemptions: 7,
        prompt_tokens: 18_874_368,
        generation_tokens: 2_457_000,
        running_loras: vec!["food-review-1".into()],
        waiting_loras: vec![],
    }
}

fn page(legacy_names: bool, lora: Option<usize>) -> String {
    let config =
        EngineConfig { num_gpu_blocks: 81767, ..EngineConfig::for_profile(AcceleratorProfile::h100_8b()) };
    let mut requests = RequestMetrics::default();
    requests.ttft.observe(0.07);
    requests.ttft.observe(0.3);
    requests.ttft.observe(5000.0);
    requests.count_finished(FinishReason::Length);
    let mut out = String::from("stale content");
    render(
        &mut out,
        &PageInputs {
            model: "Qwen/Qwen3-32B",
            config: &config,
            stats: &stats(),
            requests: &requests,
            lora,
            legacy_names,
            created: 1.7559312e9,
            now: 1.7559318e9,
        },
        true,
    );
    out
}

#[test]
fn go_float_matches_prometheus_client() {
    assert_eq!(go_float(14.0), "14.0");
    assert_eq!(go_float(0.6421875), "0.6421875");
    assert_eq!(go_float(2457.0), "2457.0");
    assert_eq!(go_float(18_874_368.0), "1.8874368e+07");
    assert_eq!(go_float(2_457_000.0), "2.457e+06");
    assert_eq!(go_float(1.7559312e9), "1.7559312e+09");
    assert_eq!(go_float(1_000_000.0), "1e+06");
    assert_eq!(go_float(93272.634), "93272.634");
    assert_eq!(go_float(f64::INFINITY), "+Inf");
    assert_eq!(go_float(0.0), "0.0");
}

#[test]
fn page_matches_the_v1_sample_format() {
    let text = page(false, Some(2));
    // The real-format vLLM V1 page kept with epp's own telemetry tests.
    let sample = include_str!("../../../tests/fixtures/vllm-v1-metrics.txt");
    // Every line the hand-made V1 sample has for these families appears verbatim on our page.
    for line in sample.lines().filter(|l| {
        (l.starts_with("vllm:num_requests")
            || l.starts_with("vllm:kv_cache")
            || l.starts_with("vllm:prefix_cache"))
            || l.starts_with("# HELP vllm:time_to_first")
            || l.starts_with("vllm:cache_config_info")
            || l.starts_with("vllm:lora_requests_info")
            || l.starts_with("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\"")
    }) {
        // The stats above are the sample's values, so whole lines must match.
        assert!(text.contains(line), "missing line: {line}");
    }
    assert!(
        text.contains("vllm:prompt_tokens_total{engine=\"0\",model_name=\"Qwen/Qwen3-32B\"} 1.8874368e+07\n")
    );
    assert!(text.contains(
        "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"Qwen/Qwen3-32B\"} 1.0\n"
    ));
    assert!(text.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.08\",model_name=\"Qwen/Qwen3-32B\"} 1.0\n"));
    assert!(text.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2560.0\",model_name=\"Qwen/Qwen3-32B\"} 2.0\n"));
    assert!(text.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"Qwen/Qwen3-32B\"} 3.0\n"));
    assert!(text.contains("# TYPE vllm:inter_token_latency_seconds histogram\n"));
    assert!(!text.contains("vllm:time_per_output_token_seconds"), "gone from vLLM's page by 0.32");
    assert!(text.contains("vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"7680.0\",model_name=\"Qwen/Qwen3-32B\"} 0.0\n"));
    assert!(!text.contains("stale content"));
    assert!(!text.contains("gpu_cache_usage_perc"));
}

/// The `# TYPE` lines of a page: family name → type.
fn family_types(page: &str) -> std::collections::BTreeMap<&str, &str> {
    page.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .collect()
}

/// Every family the simulator shows is on real vLLM 0.32's page, with the same type (real vLLM, CPU build,
/// captured by scripts/vllm-server.sh; it has more families, which epp does not read). The LoRA family is
/// registered only with LoRA on, so the real page, served without, lacks it.
#[test]
fn every_family_is_on_real_vllm_0_32s_page() {
    let real = include_str!("../../../tests/fixtures/vllm-real-metrics-idle.txt");
    let real_families = family_types(real);
    let text = page(false, None);
    for (family, kind) in family_types(&text) {
        assert_eq!(real_families.get(family), Some(&kind), "{family} ({kind}) on the simulator's page");
    }
}

#[test]
fn page_parses_cleanly_and_extracts() {
    let text = page(false, Some(2));
    let mut samples = parse_all(text.as_bytes());
    let count = samples.by_ref().count();
    assert_eq!(samples.malformed_lines(), 0);
    assert!(count > 150, "{count} samples");
    let vllm = EngineSet::builtin().get("vllm").unwrap().clone();
    let out = extract(text.as_bytes(), &vllm, &EndpointTelemetry::default(), Instant::now());
    assert_eq!(out.error, None);
    let m = out.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (3, 14, 0.6421875));
    assert_eq!((m.cache_block_size, m.cache_num_blocks, m.max_active_models), (16, 81767, 2));
    assert!(m.active_models.contains("food-review-1"));
}

#[test]
fn legacy_names_and_no_lora() {
    let text = page(true, None);
    assert!(
        text.contains("vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen3-32B\"} 0.6421875\n")
    );
    assert!(text.contains("vllm:gpu_prefix_cache_hits_total{"));
    assert!(!text.contains("vllm:kv_cache_usage_perc"));
    assert!(!text.contains("vllm:prefix_cache_hits"));
    assert!(!text.contains("lora_requests_info"));
    let vllm = EngineSet::builtin().get("vllm").unwrap().clone();
    let out = extract(text.as_bytes(), &vllm, &EndpointTelemetry::default(), Instant::now());
    assert_eq!(out.metrics.kv_cache_usage, 0.6421875, "the parser accepts the old name");
}

#[test]
fn histogram_buckets_are_cumulative() {
    let mut h = Histogram::new(TOKEN_LATENCY_BUCKETS);
    for v in [0.005, 0.01, 0.011, 100.0, -1.0] {
        h.observe(v);
    }
    assert_eq!(h.count, 5);
    assert_eq!(h.counts[0], 3, "le 0.01 holds 0.005, 0.01 and the clamped -1");
    assert_eq!(h.counts[1], 1);
    assert_eq!(*h.counts.last().unwrap(), 1);
}

#[test]
fn fake_server_page_has_only_what_is_set_and_extracts() {
    let loras = vec!["a\"b".to_string()];
    let mut page = VllmPage::new("fake");
    let bare = page.render();
    assert!(bare.contains("vllm:num_requests_running{engine=\"0\",model_name=\"fake\"} 0.0\n"), "{bare}");
    assert!(!bare.contains("cache_config_info") && !bare.contains("lora_requests_info"));
    assert!(!bare.contains("_total"), "no counters without a simulator history");
    page.running = 2.0;
    page.waiting = 5.0;
    page.kv_usage = 0.25;
    page.lora = Some(LoraInfo { max_loras: 4, running: &loras, waiting: &[], updated_unix: 1.7559312e9 });
    page.cache = Some(CacheInfo { block_size: 16, num_gpu_blocks: 8192, enable_prefix_caching: true });
    let text = page.render();
    assert!(text.contains("vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a\\\"b\",waiting_lora_adapters=\"\"} 1.7559312e+09\n"), "{text}");
    let vllm = EngineSet::builtin().get("vllm").unwrap().clone();
    let out = extract(text.as_bytes(), &vllm, &EndpointTelemetry::default(), Instant::now());
    assert_eq!(out.error, None);
    let m = out.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (5, 2, 0.25));
    assert_eq!((m.cache_block_size, m.cache_num_blocks, m.max_active_models), (16, 8192, 4));
}

#[test]
fn simulator_page_is_the_fake_page_plus_its_history() {
    // The gauges and info series a simulator writes are exactly what VllmPage writes for the same values.
    let text = page(false, Some(2));
    let running = ["food-review-1".to_string()];
    let gauges = VllmPage {
        model: "Qwen/Qwen3-32B",
        running: 14.0,
        waiting: 3.0,
        kv_usage: 0.6421875,
        legacy_names: false,
        lora: Some(LoraInfo { max_loras: 2, running: &running, waiting: &[], updated_unix: 1.7559318e9 }),
        cache: Some(CacheInfo { block_size: 16, num_gpu_blocks: 81767, enable_prefix_caching: true }),
    }
    .render();
    let gauge_lines: Vec<&str> = gauges.lines().collect();
    let page_lines: Vec<&str> = text.lines().collect();
    assert_eq!(page_lines[..9], gauge_lines[..9], "load gauges first, in the same order");
    assert_eq!(page_lines[page_lines.len() - 6..], gauge_lines[9..], "info series last");
}
