//! Every metric family epp exports, grouped by what records it; names and help texts are attached in
//! `registration.rs`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::buckets::*;
use super::flow_control::FlowControlFamilies;
use super::labels::*;

/// The per-request families under their GIE names (`inference_objective_*`).
#[derive(Debug)]
pub struct GieRequestFamilies {
    pub requests: Family<ModelPriorityLabels, Counter>,
    pub errors: Family<ModelErrorLabels, Counter>,
    pub duration: HistogramFamily<ModelLabels>,
    pub request_sizes: HistogramFamily<ModelLabels>,
    pub response_sizes: HistogramFamily<ModelLabels>,
    pub input_tokens: HistogramFamily<ModelLabels>,
    pub output_tokens: HistogramFamily<ModelLabels>,
    pub cached_tokens: HistogramFamily<ModelLabels>,
    pub running: Family<ModelNameLabels, Gauge>,
    pub ntpot: HistogramFamily<ModelLabels>,
    pub ttft: HistogramFamily<ModelLabels>,
}

/// The per-request families under their llm-d names (`llm_d_epp_request_*`).
#[derive(Debug)]
pub struct LlmdRequestFamilies {
    pub requests: Family<FlowLabels, Counter>,
    pub errors: Family<FlowErrorLabels, Counter>,
    pub duration: HistogramFamily<FlowLabels>,
    pub request_sizes: HistogramFamily<FlowLabels>,
    pub response_sizes: HistogramFamily<FlowLabels>,
    pub input_tokens: HistogramFamily<FlowLabels>,
    pub output_tokens: HistogramFamily<FlowLabels>,
    pub cached_tokens: HistogramFamily<FlowLabels>,
    pub running: Family<FlowLabels, Gauge>,
    pub ntpot: HistogramFamily<FlowLabels>,
    pub ttft: HistogramFamily<FlowStreamingLabels>,
}

/// Pool aggregates, recomputed by `update_pool`.
#[derive(Debug)]
pub struct PoolFamilies {
    pub gie_avg_kv_cache: Family<PoolLabels, FloatGauge>,
    pub gie_avg_queue: Family<PoolLabels, FloatGauge>,
    pub gie_avg_running: Family<PoolLabels, FloatGauge>,
    pub gie_ready: Family<PoolLabels, Gauge>,
    pub gie_pod_queue: Family<PodQueueLabels, Gauge>,
    pub llmd_avg_kv_cache: Family<PoolLabels, FloatGauge>,
    pub llmd_avg_queue: Family<PoolLabels, FloatGauge>,
    pub llmd_avg_running: Family<PoolLabels, FloatGauge>,
    pub llmd_std_kv_cache: Family<PoolLabels, FloatGauge>,
    pub llmd_std_queue: Family<PoolLabels, FloatGauge>,
    pub llmd_std_running: Family<PoolLabels, FloatGauge>,
    pub llmd_ready: Family<PoolLabels, Gauge>,
    pub llmd_endpoint_queue: Family<EndpointQueueLabels, Gauge>,
}

/// Scheduler, plugin, overhead, prefix-cache, info, rewrite and in-flight families.
#[derive(Debug)]
pub struct EppFamilies {
    pub gie_scheduler_e2e: Histogram,
    pub gie_attempts: Family<GieAttemptLabels, Counter>,
    pub gie_plugin: HistogramFamily<PluginLabels>,
    pub llmd_scheduler_e2e: Histogram,
    pub llmd_attempts: Family<LlmdAttemptLabels, Counter>,
    pub llmd_plugin: HistogramFamily<PluginLabels>,
    pub request_processing: Histogram,
    pub response_processing: Histogram,
    pub prefix_size: Gauge,
    pub prefix_hit_ratio: Histogram,
    pub prefix_hit_bytes: Histogram,
    pub gie_info: Family<InfoLabels, Gauge>,
    pub llmd_info: Family<InfoLabels, Gauge>,
    pub gie_rewrites: Family<RewriteLabels, Counter>,
    pub llmd_rewrites: Family<RewriteLabels, Counter>,
    pub inflight_requests: Family<InflightLabels, Gauge>,
    pub inflight_tokens: Family<InflightLabels, Gauge>,
}

/// All families, created and registered together.
#[derive(Debug)]
pub struct Families {
    pub gie: GieRequestFamilies,
    pub llmd: LlmdRequestFamilies,
    pub pool: PoolFamilies,
    pub epp: EppFamilies,
    pub flow: FlowControlFamilies,
}

impl Families {
    /// Creates every family and registers it in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let families = Self {
            gie: GieRequestFamilies {
                requests: Family::default(),
                errors: Family::default(),
                duration: GENERAL_LATENCY.family(),
                request_sizes: REQUEST_BYTES.family(),
                response_sizes: RESPONSE_BYTES.family(),
                input_tokens: INPUT_TOKENS.family(),
                output_tokens: OUTPUT_TOKENS.family(),
                cached_tokens: INPUT_TOKENS.family(),
                running: Family::default(),
                ntpot: NTPOT.family(),
                ttft: GENERAL_LATENCY.family(),
            },
            llmd: LlmdRequestFamilies {
                requests: Family::default(),
                errors: Family::default(),
                duration: GENERAL_LATENCY.family(),
                request_sizes: REQUEST_BYTES.family(),
                response_sizes: RESPONSE_BYTES.family(),
                input_tokens: INPUT_TOKENS.family(),
                output_tokens: OUTPUT_TOKENS.family(),
                cached_tokens: INPUT_TOKENS.family(),
                running: Family::default(),
                ntpot: NTPOT.family(),
                ttft: LLMD_TTFT.family(),
            },
            pool: PoolFamilies {
                gie_avg_kv_cache: Family::default(),
                gie_avg_queue: Family::default(),
                gie_avg_running: Family::default(),
                gie_ready: Family::default(),
                gie_pod_queue: Family::default(),
                llmd_avg_kv_cache: Family::default(),
                llmd_avg_queue: Family::default(),
                llmd_avg_running: Family::default(),
                llmd_std_kv_cache: Family::default(),
                llmd_std_queue: Family::default(),
                llmd_std_running: Family::default(),
                llmd_ready: Family::default(),
                llmd_endpoint_queue: Family::default(),
            },
            epp: EppFamilies {
                gie_scheduler_e2e: SCHEDULER.histogram(),
                gie_attempts: Family::default(),
                gie_plugin: SCHEDULER.family(),
                llmd_scheduler_e2e: SCHEDULER.histogram(),
                llmd_attempts: Family::default(),
                llmd_plugin: SCHEDULER.family(),
                request_processing: OVERHEAD.histogram(),
                response_processing: OVERHEAD.histogram(),
                prefix_size: Gauge::default(),
                prefix_hit_ratio: HIT_RATIO.histogram(),
                prefix_hit_bytes: HIT_BYTES.histogram(),
                gie_info: Family::default(),
                llmd_info: Family::default(),
                gie_rewrites: Family::default(),
                llmd_rewrites: Family::default(),
                inflight_requests: Family::default(),
                inflight_tokens: Family::default(),
            },
            flow: FlowControlFamilies::new(),
        };
        families.register_gie(registry);
        families.register_llmd(registry);
        families
    }
}
