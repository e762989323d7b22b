use super::*;
use crate::telemetry::engines::{EngineConfigParams, EngineSet};
use crate::telemetry::test_data::sample_page;

fn engine(name: &str) -> std::sync::Arc<EngineMapping> {
    EngineSet::builtin().get(name).unwrap().clone()
}

fn run(page: &str, engine_name: &str) -> Extraction {
    extract(page.as_bytes(), &engine(engine_name), &EndpointTelemetry::default(), Instant::now())
}

fn set(names: &[&str]) -> HashSet<String> {
    names.iter().map(std::string::ToString::to_string).collect()
}

fn v1() -> String {
    String::from_utf8(sample_page("vllm-v1-metrics.txt")).unwrap()
}

/// The v1 page with every line of `family` (and its HELP/TYPE) removed.
fn without(page: &str, family: &str) -> String {
    page.lines().filter(|l| !l.contains(family)).map(|l| format!("{l}\n")).collect()
}

#[test]
fn vllm_v1_sample_page() {
    let now = Instant::now();
    let out = extract(v1().as_bytes(), &engine("vllm"), &EndpointTelemetry::default(), now);
    assert_eq!(out.error, None);
    assert_eq!(out.malformed_lines, 0);
    let m = out.metrics;
    assert_eq!(m.waiting_queue_size, 3);
    assert_eq!(m.running_requests, 14);
    assert_eq!(m.kv_cache_usage, 0.6421875);
    assert_eq!(m.cache_block_size, 16);
    assert_eq!(m.cache_num_blocks, 81767);
    assert_eq!(m.active_models, set(&["food-review-1"]));
    assert_eq!(m.waiting_models, set(&[]));
    assert_eq!(m.max_active_models, 2);
    assert_eq!(m.update_time, Some(now));
}

#[test]
fn kv_gauge_under_either_name() {
    // vLLM >= 0.12: only the new name.
    let out = run(&without(&v1(), "gpu_cache_usage_perc"), "vllm");
    assert_eq!((out.metrics.kv_cache_usage, out.error), (0.6421875, None));
    // Older servers: only the old name.
    let old = without(&v1(), "vllm:kv_cache_usage_perc").replace("0.6421875", "0.25");
    let out = run(&old, "vllm");
    assert_eq!((out.metrics.kv_cache_usage, out.error), (0.25, None));
    // Both present with different values: the new name wins.
    let both = v1().replacen(
        "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen3-32B\"} 0.6421875",
        "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen3-32B\"} 0.1",
        1,
    );
    assert_eq!(run(&both, "vllm").metrics.kv_cache_usage, 0.6421875);
}

#[test]
fn data_parallel_ranks_are_summed_and_maxed() {
    let rank1 = concat!(
        "vllm:num_requests_running{engine=\"1\",model_name=\"Qwen/Qwen3-32B\"} 6.0\n",
        "vllm:num_requests_waiting{engine=\"1\",model_name=\"Qwen/Qwen3-32B\"} 2.0\n",
        "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"Qwen/Qwen3-32B\"} 0.9\n",
        "vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"81767\"} 1.0\n",
    );
    let out = run(&format!("{}{rank1}", v1()), "vllm");
    assert_eq!(out.error, None);
    assert_eq!(out.metrics.running_requests, 20);
    assert_eq!(out.metrics.waiting_queue_size, 5);
    assert_eq!(out.metrics.kv_cache_usage, 0.9);
    assert_eq!(out.metrics.cache_num_blocks, 81767, "cache config is per rank, not summed");
    let lower = rank1.replace("0.9\n", "0.1\n");
    assert_eq!(run(&format!("{}{lower}", v1()), "vllm").metrics.kv_cache_usage, 0.6421875);
}

#[test]
fn vllm_v0_excerpt_reports_the_missing_queue_and_keeps_its_old_value() {
    let page = sample_page("vllm-v0-metrics-excerpt.txt");
    let previous = EndpointTelemetry { waiting_queue_size: 9, kv_cache_usage: 0.5, ..Default::default() };
    let out = extract(&page, &engine("vllm"), &previous, Instant::now());
    let error = out.error.unwrap();
    assert_eq!(error.problems, vec![ExtractProblem::MissingFamily("vllm:num_requests_waiting".into())]);
    assert_eq!(error.to_string(), "metric family \"vllm:num_requests_waiting\" not found");
    assert_eq!(out.metrics.waiting_queue_size, 9);
    assert_eq!(out.metrics.running_requests, 0);
    assert_eq!(out.metrics.kv_cache_usage, 0.0, "read from vllm:gpu_cache_usage_perc");
    assert_eq!(out.metrics.max_active_models, 0);
    assert!(out.metrics.active_models.is_empty() && out.metrics.waiting_models.is_empty());
    assert!(out.metrics.update_time.is_some());
}

#[test]
fn missing_optional_families_keep_previous_values_without_error() {
    let page = "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n";
    let previous = EndpointTelemetry {
        active_models: set(&["a"]),
        max_active_models: 4,
        cache_block_size: 32,
        cache_num_blocks: 100,
        ..Default::default()
    };
    let out = extract(page.as_bytes(), &engine("vllm"), &previous, Instant::now());
    assert_eq!(out.error, None);
    assert_eq!(out.metrics.active_models, set(&["a"]));
    assert_eq!(
        (out.metrics.max_active_models, out.metrics.cache_block_size, out.metrics.cache_num_blocks),
        (4, 32, 100)
    );
    assert_eq!((out.metrics.waiting_queue_size, out.metrics.running_requests), (1, 2));
}

#[test]
fn lora_takes_the_newest_series_and_parses_lists() {
    let page = concat!(
        "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 100\n",
        "vllm:lora_requests_info{max_lora=\"3\",running_lora_adapters=\" a, b,,c \",waiting_lora_adapters=\"d\"} 300\n",
        "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"older\",waiting_lora_adapters=\"\"} 200\n",
    );
    let out = run(page, "vllm");
    assert_eq!(out.metrics.active_models, set(&["a", "b", "c"]));
    assert_eq!(out.metrics.waiting_models, set(&["d"]));
    assert_eq!(out.metrics.max_active_models, 3);
}

#[test]
fn bad_integer_labels_are_reported_and_other_fields_still_update() {
    let page = concat!(
        "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n",
        "vllm:lora_requests_info{max_lora=\"two\",running_lora_adapters=\"x\",waiting_lora_adapters=\"\"} 1\n",
        "vllm:cache_config_info{block_size=\"sixteen\",num_gpu_blocks=\"10\"} 1\n",
    );
    let previous = EndpointTelemetry { max_active_models: 7, cache_block_size: 16, ..Default::default() };
    let out = extract(page.as_bytes(), &engine("vllm"), &previous, Instant::now());
    let problems = out.error.unwrap().problems;
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(matches!(&problems[0], ExtractProblem::InvalidLabel { label, .. } if label == "max_lora"));
    assert_eq!(out.metrics.max_active_models, 7);
    assert_eq!(out.metrics.active_models, set(&["x"]));
    assert_eq!(out.metrics.cache_block_size, 0, "reset as in Go");
    assert_eq!(out.metrics.cache_num_blocks, 10);
    assert_eq!(out.metrics.running_requests, 2);
}

#[test]
fn sglang_page() {
    let page = concat!(
        "# TYPE sglang:num_queue_reqs gauge\n",
        "sglang:num_queue_reqs{model_name=\"m\"} 4.0\n",
        "sglang:num_queue_reqs{model_name=\"m\"} 9.0\n",
        "sglang:num_running_reqs{model_name=\"m\"} 12.0\n",
        "sglang:token_usage{model_name=\"m\"} 0.31\n",
        "sglang:cache_config_info{model_name=\"m\",num_pages=\"5000\",page_size=\"32\"} 1\n",
    );
    let out = run(page, "sglang");
    assert_eq!(out.error, None);
    assert_eq!(out.metrics.waiting_queue_size, 4, "first series wins outside vLLM, as in Go");
    assert_eq!((out.metrics.running_requests, out.metrics.kv_cache_usage), (12, 0.31));
    assert_eq!((out.metrics.cache_block_size, out.metrics.cache_num_blocks), (32, 5000));
}

#[test]
fn trtllm_serve_page() {
    let page = concat!(
        "trtllm_num_requests_waiting 2\ntrtllm_num_requests_running 8\n",
        "trtllm_kv_cache_utilization 0.75\ntrtllm_kv_cache_tokens_per_block 64\n",
        "trtllm_kv_cache_max_blocks 1.2e+04\n",
    );
    let out = run(page, "trtllm-serve");
    assert_eq!(out.error, None);
    let m = out.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (2, 8, 0.75));
    assert_eq!((m.cache_block_size, m.cache_num_blocks), (64, 12000));
}

/// A real llama.cpp server's page (xllamacpp 2026.10.11549, one slot, one request decoding and one
/// waiting for the slot), captured for tests/fixtures/llamacpp-metrics.txt.
#[test]
fn llamacpp_page() {
    let page = String::from_utf8(sample_page("llamacpp-metrics.txt")).unwrap();
    let out = run(&page, "llamacpp");
    assert_eq!(out.error, None, "no KV gauge on the page is not an error: the mapping has none");
    let m = out.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (1, 1, 0.0));
}

#[test]
fn triton_page() {
    let page = concat!(
        "nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"context\",version=\"1\"} 1\n",
        "nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"scheduled\",version=\"1\"} 6\n",
        "nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 3\n",
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\",model=\"tensorrt_llm\"} 4096\n",
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\",model=\"tensorrt_llm\"} 0.125\n",
        "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"tokens_per\",model=\"tensorrt_llm\"} 128\n",
    );
    let out = run(page, "triton-tensorrt-llm");
    assert_eq!(out.error, None);
    let m = out.metrics;
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (3, 6, 0.125));
    assert_eq!((m.cache_block_size, m.cache_num_blocks), (128, 4096));
}

#[test]
fn unmatched_labels_and_timestamps() {
    let page = "q{a=\"1\"} 5 100\nq{a=\"2\"} 7 300\nq{a=\"2\"} 8 200\n";
    let params = EngineConfigParams {
        name: "x".into(),
        queued_requests_spec: "q{a=2}".into(),
        running_requests_spec: "q{a=3}".into(),
        ..Default::default()
    };
    let mapping = EngineMapping::from_params(&params, "t").unwrap();
    let out = extract(page.as_bytes(), &mapping, &EndpointTelemetry::default(), Instant::now());
    assert_eq!(out.metrics.waiting_queue_size, 7, "latest timestamp wins");
    assert_eq!(out.error.unwrap().problems, vec![ExtractProblem::NoMatchingSeries("q{a=\"3\"}".into())]);
}

#[test]
fn garbage_pages_never_panic_and_report_missing_families() {
    for page in ["", "\u{0}\u{1}garbage", "vllm:num_requests_waiting{", "vllm:num_requests_running NaN\n"] {
        let out = run(page, "vllm");
        assert_eq!(out.metrics.waiting_queue_size, 0);
        assert!(out.error.is_some());
    }
}

#[test]
fn a_page_without_any_load_family_does_not_refresh_the_age() {
    let then = Instant::now();
    let previous = EndpointTelemetry { waiting_queue_size: 4, update_time: Some(then), ..Default::default() };
    let later = then + std::time::Duration::from_secs(5);
    for page in [&b"<html>502 Bad Gateway</html>"[..], b"", b"# HELP up\nup 1\n"] {
        let out = extract(page, &engine("vllm"), &previous, later);
        assert!(out.error.is_some());
        assert_eq!(out.metrics.update_time, Some(then), "{:?}", String::from_utf8_lossy(page));
        assert_eq!(out.metrics.waiting_queue_size, 4);
    }
    let out = extract(b"vllm:num_requests_waiting 0\n", &engine("vllm"), &previous, later);
    assert_eq!(out.metrics.update_time, Some(later), "one load family is enough");
}

#[test]
fn an_idle_multiprocess_vllm_page_without_load_gauges_is_fresh() {
    // vLLM with several API servers, before its first request (seen on a real vLLM with
    // PROMETHEUS_MULTIPROC_DIR set): its page has cache_config_info and none of the load gauges.
    let then = Instant::now();
    let previous = EndpointTelemetry { update_time: Some(then), ..Default::default() };
    let later = then + std::time::Duration::from_secs(5);
    let page = b"# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
                 vllm:cache_config_info{block_size=\"128\",num_gpu_blocks=\"900\"} 1.0\n";
    let out = extract(page, &engine("vllm"), &previous, later);
    assert_eq!(out.metrics.update_time, Some(later));
    assert_eq!(
        (out.metrics.waiting_queue_size, out.metrics.running_requests, out.metrics.kv_cache_usage),
        (0, 0, 0.0)
    );
    assert_eq!((out.metrics.cache_block_size, out.metrics.cache_num_blocks), (128, 900));
    assert!(!out.found_load_families);
    assert!(out.error.is_some(), "the missing load families are still reported");
}
