//! vLLM V1's `/metrics` page, byte for byte in the format `prometheus_client` writes.
//!
//! Why exact: epp's scrapers, and any dashboard pointed at the simulator, must see what they would see
//! on a real vLLM: the same names, HELP text, `engine` + `model_name` labels (sorted, as the Python
//! client sorts them), `_total` counters with their `_created` gauges, vLLM's histogram buckets, the
//! info-style gauges (`cache_config_info`, `lora_requests_info`), and Go-style float formatting
//! (`1.8874368e+07`). `--legacy-metric-names` renders the pre-0.10 KV names instead.

use std::fmt::Write;

use super::engine::{EngineConfig, EngineStats, FinishReason};

/// vLLM's TTFT buckets.
pub(crate) const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's per-token latency buckets (TPOT, ITL, per-request TPOT).
pub(crate) const TOKEN_LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
/// vLLM's request-phase buckets (e2e, queue, inference, prefill, decode).
pub(crate) const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];

/// A Prometheus histogram: per-bucket counts (the last is `+Inf`), sum and count.
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 }
    }

    pub(crate) fn observe(&mut self, value: f64) {
        let value = value.max(0.0);
        let bucket = self.bounds.iter().position(|&b| value <= b).unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }
}

/// The request-level series a replica records as its requests progress (simulated seconds).
#[derive(Debug, Clone)]
pub(crate) struct RequestMetrics {
    pub ttft: Histogram,
    /// Every gap between two tokens; vLLM feeds both `time_per_output_token` and `inter_token_latency`.
    pub inter_token: Histogram,
    pub request_tpot: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    pub inference: Histogram,
    pub prefill: Histogram,
    pub decode: Histogram,
    /// Finished requests by reason: stop, length, abort.
    pub success: [u64; 3],
}

impl Default for RequestMetrics {
    fn default() -> Self {
        Self {
            ttft: Histogram::new(TTFT_BUCKETS),
            inter_token: Histogram::new(TOKEN_LATENCY_BUCKETS),
            request_tpot: Histogram::new(TOKEN_LATENCY_BUCKETS),
            e2e: Histogram::new(REQUEST_LATENCY_BUCKETS),
            queue: Histogram::new(REQUEST_LATENCY_BUCKETS),
            inference: Histogram::new(REQUEST_LATENCY_BUCKETS),
            prefill: Histogram::new(REQUEST_LATENCY_BUCKETS),
            decode: Histogram::new(REQUEST_LATENCY_BUCKETS),
            success: [0; 3],
        }
    }
}

impl RequestMetrics {
    pub(crate) fn count_finished(&mut self, reason: FinishReason) {
        let slot = match reason {
            FinishReason::Stop => 0,
            FinishReason::Length => 1,
            FinishReason::Abort => 2,
        };
        self.success[slot] += 1;
    }
}

/// Everything one page shows.
pub(crate) struct PageInputs<'a> {
    pub model: &'a str,
    pub config: &'a EngineConfig,
    pub stats: &'a EngineStats,
    pub requests: &'a RequestMetrics,
    /// `Some(max_loras)` when LoRA is enabled: only then does vLLM register `lora_requests_info`.
    pub lora: Option<usize>,
    pub legacy_names: bool,
    /// Unix seconds: the `_created` value of every counter and histogram.
    pub created: f64,
    /// Unix seconds now: the value of `lora_requests_info`.
    pub now: f64,
}

/// Python `prometheus_client`'s `floatToGoString`: Python's repr, switched to Go-style exponents for
/// numbers with more than six integer digits.
pub(crate) fn go_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    let repr =
        if value.fract() == 0.0 && value.abs() < 1e16 { format!("{value:.1}") } else { format!("{value}") };
    match repr.find('.') {
        Some(dot) if value > 0.0 && dot > 6 => {
            let digits = format!("{}{}", &repr[1..dot], &repr[dot + 1..]);
            let mantissa = format!("{}.{digits}", &repr[..1]);
            format!("{}e+0{}", mantissa.trim_end_matches(['0', '.']), dot - 1)
        }
        _ => repr,
    }
}

struct Page<'a> {
    out: &'a mut String,
    /// `engine="0",model_name="..."`: the labels every per-engine series carries.
    labels: String,
    created: f64,
}

impl Page<'_> {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        let _ = writeln!(self.out, "{name}{{{}}} {}", self.labels, go_float(value));
    }

    fn created(&mut self, name: &str, help: &str, extra_label: Option<(&str, &[&str])>) {
        let created_name = format!("{name}_created");
        self.header(&created_name, help, "gauge");
        let value = go_float(self.created);
        match extra_label {
            None => {
                let _ = writeln!(self.out, "{created_name}{{{}}} {value}", self.labels);
            }
            Some((label, values)) => {
                for v in values {
                    let labels =
                        self.labels.replacen(",model_name", &format!(",{label}=\"{v}\",model_name"), 1);
                    let _ = writeln!(self.out, "{created_name}{{{labels}}} {value}");
                }
            }
        }
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let total = format!("{name}_total");
        self.header(&total, help, "counter");
        let _ = writeln!(self.out, "{total}{{{}}} {}", self.labels, go_float(value as f64));
        self.created(name, help, None);
    }

    fn histogram(&mut self, name: &str, help: &str, histogram: &Histogram) {
        self.header(name, help, "histogram");
        let (engine, model) = self.labels.split_once(',').unwrap_or(("", ""));
        let mut cumulative = 0;
        for (i, count) in histogram.counts.iter().enumerate() {
            cumulative += count;
            let le = histogram.bounds.get(i).map_or_else(|| "+Inf".to_string(), |b| go_float(*b));
            let _ = writeln!(
                self.out,
                "{name}_bucket{{{engine},le=\"{le}\",{model}}} {}",
                go_float(cumulative as f64)
            );
        }
        let _ = writeln!(self.out, "{name}_count{{{}}} {}", self.labels, go_float(histogram.count as f64));
        let _ = writeln!(self.out, "{name}_sum{{{}}} {}", self.labels, go_float(histogram.sum));
        self.created(name, help, None);
    }
}

/// Escapes a label value the way the text format requires.
fn label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Renders the whole page into `out` (cleared first).
pub(crate) fn render(out: &mut String, page: &PageInputs<'_>) {
    out.clear();
    let stats = page.stats;
    let mut p = Page {
        out,
        labels: format!("engine=\"0\",model_name=\"{}\"", label_value(page.model)),
        created: page.created,
    };
    p.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        stats.running as f64,
    );
    p.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", stats.waiting as f64);
    if page.legacy_names {
        p.gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            stats.kv_usage,
        );
        let queries = "GPU prefix cache queries, in terms of number of queried tokens.";
        p.counter("vllm:gpu_prefix_cache_queries", queries, stats.prefix_queries);
        let hits = "GPU prefix cache hits, in terms of number of cached tokens.";
        p.counter("vllm:gpu_prefix_cache_hits", hits, stats.prefix_hits);
    } else {
        p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", stats.kv_usage);
        let queries = "Prefix cache queries, in terms of number of queried tokens.";
        p.counter("vllm:prefix_cache_queries", queries, stats.prefix_queries);
        p.counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_hits,
        );
    }
    p.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", stats.preemptions);
    p.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens);
    p.counter("vllm:generation_tokens", "Number of generation tokens processed.", stats.generation_tokens);

    let success_help = "Count of successfully processed requests.";
    p.header("vllm:request_success_total", success_help, "counter");
    let reasons = [FinishReason::Stop, FinishReason::Length, FinishReason::Abort];
    for (reason, count) in reasons.iter().zip(page.requests.success) {
        let labels = p.labels.replacen(
            ",model_name",
            &format!(",finished_reason=\"{}\",model_name", reason.as_str()),
            1,
        );
        let _ = writeln!(p.out, "vllm:request_success_total{{{labels}}} {}", go_float(count as f64));
    }
    p.created("vllm:request_success", success_help, Some(("finished_reason", &["stop", "length", "abort"])));

    let r = page.requests;
    p.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &r.ttft);
    p.histogram(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        &r.inter_token,
    );
    p.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &r.inter_token,
    );
    let per_request = "Histogram of time_per_output_token_seconds per request.";
    p.histogram("vllm:request_time_per_output_token_seconds", per_request, &r.request_tpot);
    p.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &r.e2e);
    let phases = [
        ("vllm:request_queue_time_seconds", "WAITING", &r.queue),
        ("vllm:request_inference_time_seconds", "RUNNING", &r.inference),
        ("vllm:request_prefill_time_seconds", "PREFILL", &r.prefill),
        ("vllm:request_decode_time_seconds", "DECODE", &r.decode),
    ];
    for (name, phase, histogram) in phases {
        p.histogram(name, &format!("Histogram of time spent in {phase} phase for request."), histogram);
    }

    if let Some(max_loras) = page.lora {
        p.header("vllm:lora_requests_info", "Running stats on lora requests.", "gauge");
        let _ = writeln!(
            p.out,
            "vllm:lora_requests_info{{max_lora=\"{max_loras}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {}",
            label_value(&stats.running_loras.join(",")),
            label_value(&stats.waiting_loras.join(",")),
            go_float(page.now),
        );
    }
    let cfg = page.config;
    p.header("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
    let _ = writeln!(
        p.out,
        "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",enable_prefix_caching=\"{}\",engine=\"0\",\
         gpu_memory_utilization=\"0.9\",num_gpu_blocks=\"{}\",prefix_caching_hash_algo=\"sha256\",\
         sliding_window=\"None\"}} 1.0",
        cfg.block_size,
        if cfg.enable_prefix_caching { "True" } else { "False" },
        cfg.num_gpu_blocks,
    );
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod tests;
