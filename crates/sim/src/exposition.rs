//! vLLM V1's `/metrics` page, byte for byte in the format `prometheus_client` writes.
//!
//! Why exact: epp's scrapers, and any dashboard pointed at the simulator, must see what they would see
//! on a real vLLM: the same names, HELP text, `engine` + `model_name` labels (sorted, as the Python
//! client sorts them), `_total` counters with their `_created` gauges, vLLM's histogram buckets, the
//! info-style gauges (`cache_config_info`, `lora_requests_info`), and Go-style float formatting
//! (`1.8874368e+07`). `--legacy-metric-names` renders the pre-0.10 KV names instead.
//!
//! Why public ([`VllmPage`]): this is the workspace's one renderer of vLLM-format `/metrics` text. The
//! fake model servers (epp-test-backend, the testkit's held backends, `epp-bench backend`, the root
//! gRPC tests' server) fill in the load gauges and info series and render them here, so a change in
//! vLLM's exposition (upstream vllm-project/vllm:vllm/v1/metrics/loggers.py) is made once.

use std::fmt::Write;

use super::engine::{EngineConfig, EngineStats, FinishReason};
#[cfg(test)]
use super::histograms::TOKEN_LATENCY_BUCKETS;
pub(crate) use super::histograms::{Histogram, RequestMetrics};

/// The gauges and info series of a vLLM V1 page: what epp's scraper reads for routing.
///
/// Why public: every fake model server in the workspace (epp-test-backend, the held backends, the
/// overhead benchmark's backend, the root gRPC tests) renders its `/metrics` through this, so there is
/// one place that knows vLLM's names, HELP text, label order and number format. The simulator renders
/// the same struct and adds its counters and histograms (see [`render`]).
///
/// ```
/// let loras = ["sql-lora".to_string()];
/// let mut page = epp_sim::VllmPage::new("m");
/// page.waiting = 3.0;
/// page.lora = Some(epp_sim::LoraInfo { max_loras: 4, running: &loras, waiting: &[], updated_unix: 0.0 });
/// assert!(page.render().contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3.0\n"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct VllmPage<'a> {
    /// The `model_name` label.
    pub model: &'a str,
    pub running: f64,
    pub waiting: f64,
    /// 0..=1.
    pub kv_usage: f64,
    /// Pre-0.10 names (`gpu_cache_usage_perc`, `gpu_prefix_cache_*`).
    pub legacy_names: bool,
    /// `vllm:lora_requests_info`; vLLM registers it only when LoRA is enabled.
    pub lora: Option<LoraInfo<'a>>,
    /// `vllm:cache_config_info`, from which epp reads the KV block size and pool size.
    pub cache: Option<CacheInfo>,
}

/// The labels (and value) of `vllm:lora_requests_info`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraInfo<'a> {
    pub max_loras: usize,
    pub running: &'a [String],
    pub waiting: &'a [String],
    /// Unix seconds: the series' value (vLLM writes the time of the last update).
    pub updated_unix: f64,
}

/// The labels of `vllm:cache_config_info` that vary between engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheInfo {
    pub block_size: usize,
    pub num_gpu_blocks: usize,
    pub enable_prefix_caching: bool,
}

impl<'a> VllmPage<'a> {
    /// An idle engine serving `model`: zero load, no LoRA, no cache config series.
    pub fn new(model: &'a str) -> Self {
        Self {
            model,
            running: 0.0,
            waiting: 0.0,
            kv_usage: 0.0,
            legacy_names: false,
            lora: None,
            cache: None,
        }
    }

    /// The page text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(1024);
        self.render_into(&mut out);
        out
    }

    /// Renders into `out` (cleared first), so a server can reuse one buffer.
    pub fn render_into(&self, out: &mut String) {
        write_page(out, self, None);
    }
}

/// The simulator's counters and histograms: what a page shows beyond [`VllmPage`].
struct History<'a> {
    stats: &'a EngineStats,
    requests: &'a RequestMetrics,
    /// Unix seconds: the `_created` value of every counter and histogram.
    created: f64,
}

/// Everything one simulator page shows.
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
pub fn go_float(value: f64) -> String {
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

/// The families of the page's load gauges and info series: a page restricted to some of these needs no
/// counters or histograms rendered.
pub(crate) const GAUGE_FAMILIES: [&str; 6] = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:lora_requests_info",
    "vllm:cache_config_info",
];

/// Renders a simulator's page into `out` (cleared first): the whole page, or without its counters and
/// histograms when `history` is false.
pub(crate) fn render(out: &mut String, page: &PageInputs<'_>, history: bool) {
    let stats = page.stats;
    let lora = page.lora.map(|max_loras| LoraInfo {
        max_loras,
        running: &stats.running_loras,
        waiting: &stats.waiting_loras,
        updated_unix: page.now,
    });
    let gauges = VllmPage {
        model: page.model,
        running: stats.running as f64,
        waiting: stats.waiting as f64,
        kv_usage: stats.kv_usage,
        legacy_names: page.legacy_names,
        lora,
        cache: Some(CacheInfo {
            block_size: page.config.block_size,
            num_gpu_blocks: page.config.num_gpu_blocks,
            enable_prefix_caching: page.config.enable_prefix_caching,
        }),
    };
    let counters = History { stats, requests: page.requests, created: page.created };
    write_page(out, &gauges, history.then_some(&counters));
}

/// The page in vLLM's order: load gauges, then (simulator only) counters and histograms, then the
/// info series.
fn write_page(out: &mut String, page: &VllmPage<'_>, history: Option<&History<'_>>) {
    out.clear();
    let mut p = Page {
        out,
        labels: format!("engine=\"0\",model_name=\"{}\"", label_value(page.model)),
        created: history.map_or(0.0, |h| h.created),
    };
    p.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", page.running);
    p.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", page.waiting);
    if page.legacy_names {
        let help = "GPU KV-cache usage. 1 means 100 percent usage.";
        p.gauge("vllm:gpu_cache_usage_perc", help, page.kv_usage);
    } else {
        p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", page.kv_usage);
    }
    if let Some(history) = history {
        write_history(&mut p, history, page.legacy_names);
    }
    if let Some(lora) = &page.lora {
        p.header("vllm:lora_requests_info", "Running stats on lora requests.", "gauge");
        let _ = writeln!(
            p.out,
            "vllm:lora_requests_info{{max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {}",
            lora.max_loras,
            label_value(&lora.running.join(",")),
            label_value(&lora.waiting.join(",")),
            go_float(lora.updated_unix),
        );
    }
    if let Some(cache) = &page.cache {
        p.header("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
        let _ = writeln!(
            p.out,
            "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",enable_prefix_caching=\"{}\",engine=\"0\",\
             gpu_memory_utilization=\"0.9\",num_gpu_blocks=\"{}\",prefix_caching_hash_algo=\"sha256\",\
             sliding_window=\"None\"}} 1.0",
            cache.block_size,
            if cache.enable_prefix_caching { "True" } else { "False" },
            cache.num_gpu_blocks,
        );
    }
}

/// The counters and histograms only the simulator has.
fn write_history(p: &mut Page<'_>, history: &History<'_>, legacy_names: bool) {
    let stats = history.stats;
    if legacy_names {
        let queries = "GPU prefix cache queries, in terms of number of queried tokens.";
        p.counter("vllm:gpu_prefix_cache_queries", queries, stats.prefix_queries);
        let hits = "GPU prefix cache hits, in terms of number of cached tokens.";
        p.counter("vllm:gpu_prefix_cache_hits", hits, stats.prefix_hits);
    } else {
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
    for (reason, count) in reasons.iter().zip(history.requests.success) {
        let labels = p.labels.replacen(
            ",model_name",
            &format!(",finished_reason=\"{}\",model_name", reason.as_str()),
            1,
        );
        let _ = writeln!(p.out, "vllm:request_success_total{{{labels}}} {}", go_float(count as f64));
    }
    p.created("vllm:request_success", success_help, Some(("finished_reason", &["stop", "length", "abort"])));

    let r = history.requests;
    p.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &r.ttft);
    if legacy_names {
        // Gone from vLLM's page by 0.32 (tests/fixtures/vllm-real-metrics-idle.txt): inter_token_latency
        // replaced it.
        p.histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            &r.inter_token,
        );
    }
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
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod tests;
