//! Names and help texts of every family.
//!
//! Names, label sets, help texts and buckets follow the Go EPP (GIE `pkg/epp/metrics/metrics.go` and
//! llm-d-router `llm_d_router_metrics.go`) so dashboards, alerts and KEDA queries keep working.
//! prometheus-client appends `_total` to counters and a `.` to help texts, so names here omit `_total`
//! and help texts omit the final full stop.

use prometheus_client::registry::Registry;

use super::families::Families;

/// Help text with the `[ALPHA] ` stability prefix Go's `HelpMsgWithStability` adds.
fn alpha(text: &str) -> String {
    format!("[ALPHA] {text}")
}

impl Families {
    pub(super) fn register_gie(&self, r: &mut Registry) {
        let (g, p, e) = (&self.gie, &self.pool, &self.epp);
        let per_model = "broken out for each model and target model";
        r.register(
            "inference_objective_request",
            alpha(&format!("Counter of inference objective requests {per_model}")),
            g.requests.clone(),
        );
        r.register(
            "inference_objective_request_error",
            alpha(&format!("Counter of inference objective requests errors {per_model}")),
            g.errors.clone(),
        );
        r.register(
            "inference_objective_request_duration_seconds",
            alpha("Inference objective response latency distribution in seconds for each model and target model"),
            g.duration.clone(),
        );
        r.register(
            "inference_objective_request_sizes",
            alpha("Inference objective requests size distribution in bytes for each model and target model"),
            g.request_sizes.clone(),
        );
        r.register(
            "inference_objective_response_sizes",
            alpha("Inference objective responses size distribution in bytes for each model and target model"),
            g.response_sizes.clone(),
        );
        r.register(
            "inference_objective_input_tokens",
            alpha("Inference objective input token count distribution for requests in each model"),
            g.input_tokens.clone(),
        );
        r.register(
            "inference_objective_output_tokens",
            alpha("Inference objective output token count distribution for requests in each model"),
            g.output_tokens.clone(),
        );
        r.register(
            "inference_objective_prompt_cached_tokens",
            alpha("Inference objective prompt cached token count distribution for requests in each model"),
            g.cached_tokens.clone(),
        );
        r.register(
            "inference_objective_running_requests",
            alpha("Inference objective number of running requests in each model"),
            g.running.clone(),
        );
        r.register(
            "inference_objective_normalized_time_per_output_token_seconds",
            alpha(
                "Inference objective latency divided by number of output tokens in seconds for each model \
                 and target model",
            ),
            g.ntpot.clone(),
        );
        r.register(
            "inference_objective_request_ttft_seconds",
            alpha("Inference model TTFT distribution in seconds for each model and target model"),
            g.ttft.clone(),
        );
        r.register(
            "inference_pool_average_kv_cache_utilization",
            alpha("The average kv cache utilization for an inference server pool"),
            p.gie_avg_kv_cache.clone(),
        );
        r.register(
            "inference_pool_average_queue_size",
            alpha("The average number of requests pending in the model server queue"),
            p.gie_avg_queue.clone(),
        );
        r.register(
            "inference_pool_average_running_requests",
            alpha("The average number of running requests across model servers in the pool"),
            p.gie_avg_running.clone(),
        );
        r.register(
            "inference_pool_ready_pods",
            alpha("The number of ready pods in the inference server pool"),
            p.gie_ready.clone(),
        );
        r.register(
            "inference_pool_per_pod_queue_size",
            alpha("The total number of requests pending in the model server queue for each underlying pod"),
            p.gie_pod_queue.clone(),
        );
        r.register(
            "inference_extension_scheduler_e2e_duration_seconds",
            alpha("End-to-end scheduling latency distribution in seconds"),
            e.gie_scheduler_e2e.clone(),
        );
        r.register(
            "inference_extension_scheduler_attempts",
            alpha("Total number of scheduling attempts"),
            e.gie_attempts.clone(),
        );
        r.register("inference_extension_plugin_duration_seconds", alpha(PLUGIN_HELP), e.gie_plugin.clone());
        r.register(
            "inference_extension_prefix_indexer_size",
            alpha("Size of the prefix indexer"),
            e.prefix_size.clone(),
        );
        r.register(
            "inference_extension_prefix_indexer_hit_ratio",
            alpha("Ratio of prefix length matched to total prefix length in the cache lookup"),
            e.prefix_hit_ratio.clone(),
        );
        r.register(
            "inference_extension_prefix_indexer_hit_bytes",
            alpha("Length of the prefix match in number of bytes in the cache lookup"),
            e.prefix_hit_bytes.clone(),
        );
        r.register("inference_extension_info", alpha(INFO_HELP), e.gie_info.clone());
        r.register(
            "inference_extension_model_rewrite_decisions",
            alpha(REWRITE_HELP),
            e.gie_rewrites.clone(),
        );
        self.flow.register_gie(r);
    }

    pub(super) fn register_llmd(&self, r: &mut Registry) {
        let (l, p, e) = (&self.llmd, &self.pool, &self.epp);
        r.register("llm_d_epp_request", alpha("Total number of processed requests"), l.requests.clone());
        r.register("llm_d_epp_request_error", alpha("Total number of request errors"), l.errors.clone());
        r.register(
            "llm_d_epp_request_duration_seconds",
            alpha("End-to-end request latency distribution in seconds"),
            l.duration.clone(),
        );
        r.register(
            "llm_d_epp_request_size_bytes",
            alpha("Incoming request body size distribution in bytes"),
            l.request_sizes.clone(),
        );
        r.register(
            "llm_d_epp_response_size_bytes",
            alpha("Outgoing response body size distribution in bytes"),
            l.response_sizes.clone(),
        );
        r.register(
            "llm_d_epp_request_input_tokens",
            alpha("Input token count distribution per request"),
            l.input_tokens.clone(),
        );
        r.register(
            "llm_d_epp_request_output_tokens",
            alpha("Output token count distribution per request"),
            l.output_tokens.clone(),
        );
        r.register(
            "llm_d_epp_request_cached_tokens",
            alpha(
                "Distribution of prompt tokens read from cache per request, as reported by the model server \
                 in the response",
            ),
            l.cached_tokens.clone(),
        );
        r.register(
            "llm_d_epp_request_running",
            alpha("Current number of active running requests"),
            l.running.clone(),
        );
        r.register(
            "llm_d_epp_request_ntpot_seconds",
            alpha(
                "Normalized time per output token in seconds (end-to-end latency divided by output token \
                 count)",
            ),
            l.ntpot.clone(),
        );
        r.register(
            "llm_d_epp_request_ttft_seconds",
            alpha(
                "Time to first token in seconds, measured from request received to first response byte. For \
                 non-streaming requests, this equals total request duration",
            ),
            l.ttft.clone(),
        );
        r.register(
            "llm_d_epp_average_kv_cache_utilization",
            alpha("The average kv cache utilization for an inference server pool"),
            p.llmd_avg_kv_cache.clone(),
        );
        r.register(
            "llm_d_epp_average_queue_size",
            alpha("The average number of requests pending in the model server queue"),
            p.llmd_avg_queue.clone(),
        );
        r.register(
            "llm_d_epp_average_running_requests",
            alpha("The average number of running requests across model servers in the pool"),
            p.llmd_avg_running.clone(),
        );
        r.register(
            "llm_d_epp_std_dev_kv_cache_utilization",
            alpha("The standard deviation kv cache utilization for an inference server pool"),
            p.llmd_std_kv_cache.clone(),
        );
        r.register(
            "llm_d_epp_std_dev_queue_size",
            alpha("The standard deviation number of requests pending in the model server queue"),
            p.llmd_std_queue.clone(),
        );
        r.register(
            "llm_d_epp_std_dev_running_requests",
            alpha("The standard deviation number of running requests across model servers in the pool"),
            p.llmd_std_running.clone(),
        );
        r.register(
            "llm_d_epp_ready_endpoints",
            alpha("The number of ready endpoints in the inference server pool"),
            p.llmd_ready.clone(),
        );
        r.register(
            "llm_d_epp_per_endpoint_queue_size",
            alpha(
                "The total number of requests pending in the model server queue for each underlying endpoint",
            ),
            p.llmd_endpoint_queue.clone(),
        );
        r.register(
            "llm_d_epp_scheduler_e2e_duration_seconds",
            alpha("End-to-end scheduling latency distribution in seconds"),
            e.llmd_scheduler_e2e.clone(),
        );
        r.register(
            "llm_d_epp_scheduler_attempts",
            alpha("Total number of scheduling attempts"),
            e.llmd_attempts.clone(),
        );
        r.register("llm_d_epp_plugin_duration_seconds", alpha(PLUGIN_HELP), e.llmd_plugin.clone());
        r.register(
            "llm_d_epp_request_processing_duration_seconds",
            alpha(
                "EPP request orchestration latency distribution in seconds, from request receipt through \
                 endpoint selection and request preparation, excluding admission-control time",
            ),
            e.request_processing.clone(),
        );
        r.register(
            "llm_d_epp_response_processing_duration_seconds",
            alpha(
                "EPP response processing latency distribution in seconds, accumulated across response \
                 handlers and excluding model server generation time",
            ),
            e.response_processing.clone(),
        );
        r.register("llm_d_epp_info", alpha(INFO_HELP), e.llmd_info.clone());
        r.register("llm_d_epp_model_rewrite_decisions", alpha(REWRITE_HELP), e.llmd_rewrites.clone());
        r.register(
            "llm_d_epp_inflight_requests",
            alpha("Current number of in-flight requests per endpoint, as tracked by the in-flight load producer"),
            e.inflight_requests.clone(),
        );
        r.register(
            "llm_d_epp_inflight_tokens",
            alpha(
                "Current number of in-flight tokens per endpoint (uncached prompt tokens, optionally plus \
                 estimated output), as tracked by the in-flight load producer",
            ),
            e.inflight_tokens.clone(),
        );
        self.flow.register_llmd(r);
    }
}

const PLUGIN_HELP: &str =
    "Plugin processing latency distribution in seconds for each extension point, plugin type and plugin name";
const INFO_HELP: &str = "General information of the current build of Inference Extension";
const REWRITE_HELP: &str = "Total number of inference model rewrite decisions";
