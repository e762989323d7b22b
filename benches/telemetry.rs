//! The cost of one scrape's CPU work: a ~150 KB vLLM `/metrics` page (data-parallel ranks, many
//! histograms, LoRA info) turned into `EndpointTelemetry`. At a 50ms refresh this runs 20 times a second per
//! endpoint, so it bounds how many endpoints one EPP core can keep fresh.
//!
//! The page is generated here (vLLM names, label order and bucket boundaries, `prometheus_client`
//! formatting) so the bench needs no data files.

use std::fmt::Write;
use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use epp::datastore::EndpointTelemetry;
use epp::telemetry::{extract, parser, EngineSet};

const MODEL: &str = "Qwen/Qwen3-32B";
const RANKS: usize = 5;

const LATENCY_BUCKETS: &[&str] = &[
    "0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0", "50.0",
    "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0",
];
const TTFT_BUCKETS: &[&str] = &[
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5",
    "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0",
];
const TPOT_BUCKETS: &[&str] = &[
    "0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0", "2.5", "5.0",
    "7.5", "10.0", "20.0", "40.0", "80.0",
];
const TOKEN_BUCKETS: &[&str] =
    &["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0"];

fn family(page: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(page, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn gauge(page: &mut String, name: &str, kind: &str, value: impl Fn(usize) -> f64) {
    family(page, name, kind, "Per-engine value.");
    for rank in 0..RANKS {
        let _ = writeln!(page, "{name}{{engine=\"{rank}\",model_name=\"{MODEL}\"}} {:?}", value(rank));
    }
}

fn histogram(page: &mut String, name: &str, buckets: &[&str]) {
    family(page, name, "histogram", "Histogram of a per-request quantity.");
    for rank in 0..RANKS {
        let mut cumulative = 0u64;
        for (i, le) in buckets.iter().chain(["+Inf"].iter()).enumerate() {
            cumulative += (i as u64 * 37 + rank as u64 * 11) % 500;
            let _ = writeln!(
                page,
                "{name}_bucket{{engine=\"{rank}\",le=\"{le}\",model_name=\"{MODEL}\"}} {:?}",
                cumulative as f64
            );
        }
        let _ = writeln!(
            page,
            "{name}_count{{engine=\"{rank}\",model_name=\"{MODEL}\"}} {:?}",
            cumulative as f64
        );
        let _ = writeln!(
            page,
            "{name}_sum{{engine=\"{rank}\",model_name=\"{MODEL}\"}} {:?}",
            cumulative as f64 * 0.37
        );
    }
    family(page, &format!("{name}_created"), "gauge", "Creation time.");
    for rank in 0..RANKS {
        let _ = writeln!(page, "{name}_created{{engine=\"{rank}\",model_name=\"{MODEL}\"}} 1.7559312e+09");
    }
}

fn vllm_page() -> String {
    let mut page = String::with_capacity(160 << 10);
    for (name, value) in
        [("python_gc_objects_collected_total", "12874.0"), ("process_virtual_memory_bytes", "9.1e+10")]
    {
        family(&mut page, name, "counter", "Process statistic.");
        let _ = writeln!(page, "{name} {value}");
    }
    gauge(&mut page, "vllm:num_requests_running", "gauge", |r| 10.0 + r as f64);
    gauge(&mut page, "vllm:num_requests_waiting", "gauge", |r| r as f64);
    gauge(&mut page, "vllm:gpu_cache_usage_perc", "gauge", |r| 0.5 + r as f64 / 100.0);
    gauge(&mut page, "vllm:kv_cache_usage_perc", "gauge", |r| 0.5 + r as f64 / 100.0);
    for counter in
        ["prefix_cache_queries", "prefix_cache_hits", "num_preemptions", "prompt_tokens", "generation_tokens"]
    {
        gauge(&mut page, &format!("vllm:{counter}_total"), "counter", |r| 1.8874368e7 + r as f64);
        gauge(&mut page, &format!("vllm:{counter}_created"), "gauge", |_| 1.7559312e9);
    }
    family(&mut page, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    for rank in 0..RANKS {
        for reason in ["stop", "length", "abort"] {
            let _ = writeln!(
                page,
                "vllm:request_success_total{{engine=\"{rank}\",finished_reason=\"{reason}\",model_name=\"{MODEL}\"}} 2391.0"
            );
        }
    }
    histogram(&mut page, "vllm:time_to_first_token_seconds", TTFT_BUCKETS);
    for name in [
        "time_per_output_token_seconds",
        "inter_token_latency_seconds",
        "request_time_per_output_token_seconds",
    ] {
        histogram(&mut page, &format!("vllm:{name}"), TPOT_BUCKETS);
    }
    for name in [
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_inference_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
    ] {
        histogram(&mut page, &format!("vllm:{name}"), LATENCY_BUCKETS);
    }
    for name in [
        "request_prompt_tokens",
        "request_generation_tokens",
        "request_params_max_tokens",
        "iteration_tokens_total",
    ] {
        histogram(&mut page, &format!("vllm:{name}"), TOKEN_BUCKETS);
    }
    family(&mut page, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    for (i, running) in ["food-review-1", "food-review-1,sql-lora", "sql-lora"].iter().enumerate() {
        let _ = writeln!(
            page,
            "vllm:lora_requests_info{{max_lora=\"4\",running_lora_adapters=\"{running}\",waiting_lora_adapters=\"\"}} {:?}",
            1.7559318e9 + i as f64
        );
    }
    family(&mut page, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    for rank in 0..RANKS {
        let _ = writeln!(
            page,
            "vllm:cache_config_info{{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"{rank}\",gpu_memory_utilization=\"0.9\",num_gpu_blocks=\"81767\",prefix_caching_hash_algo=\"sha256\",sliding_window=\"None\"}} 1.0"
        );
    }
    page
}

fn bench_extract(c: &mut Criterion) {
    let page = vllm_page();
    let engines = EngineSet::builtin();
    let vllm = engines.default_engine().clone();
    let previous = EndpointTelemetry::default();
    let now = Instant::now();

    // Check once that the page reads as intended, so the figure is for real work.
    let out = extract(page.as_bytes(), &vllm, &previous, now);
    assert_eq!(out.error, None);
    assert_eq!(out.malformed_lines, 0);
    assert_eq!(out.metrics.running_requests, (0..RANKS as u64).map(|r| 10 + r).sum::<u64>());
    assert_eq!(out.metrics.active_models.len(), 1, "newest LoRA series holds only sql-lora");
    assert_eq!(out.metrics.cache_num_blocks, 81767);
    let lines = page.lines().count();
    eprintln!("vLLM page: {} bytes, {lines} lines, {RANKS} data-parallel ranks", page.len());

    let mut group = c.benchmark_group("telemetry");
    group.throughput(Throughput::Bytes(page.len() as u64));
    group.bench_function("extract_vllm_150k", |b| {
        b.iter(|| extract(black_box(page.as_bytes()), &vllm, &previous, now));
    });
    group.bench_function("parse_all_vllm_150k", |b| {
        b.iter(|| parser::parse_all(black_box(page.as_bytes())).map(|s| s.value).sum::<f64>());
    });
    group.finish();
}

criterion_group!(benches, bench_extract);
criterion_main!(benches);
