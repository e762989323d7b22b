//! Names and help texts of the director's families, as the Go EPP registers them (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/metrics/metrics.go and llm-d's router metrics).
//! The per-request families are registered capped: their labels come from requests.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::metrics::{GieRequestFamilies, LlmdRequestFamilies, RequestMetrics};
use crate::metrics::{
    alpha, MetricsRegistry, GENERAL_LATENCY, INPUT_TOKENS, LLMD_TTFT, NTPOT, OUTPUT_TOKENS, REQUEST_BYTES,
    RESPONSE_BYTES,
};

const REWRITE_HELP: &str = "Total number of inference model rewrite decisions";
const PER_MODEL: &str = "broken out for each model and target model";

impl GieRequestFamilies {
    pub(super) fn register(r: &MetricsRegistry) -> Self {
        Self {
            requests: r.register_capped(
                "inference_objective_request",
                alpha(&format!("Counter of inference objective requests {PER_MODEL}")),
                Counter::default,
            ),
            errors: r.register_capped(
                "inference_objective_request_error",
                alpha(&format!("Counter of inference objective requests errors {PER_MODEL}")),
                Counter::default,
            ),
            duration: r.register_capped(
                "inference_objective_request_duration_seconds",
                alpha("Inference objective response latency distribution in seconds for each model and target model"),
                GENERAL_LATENCY,
            ),
            request_sizes: r.register_capped(
                "inference_objective_request_sizes",
                alpha("Inference objective requests size distribution in bytes for each model and target model"),
                REQUEST_BYTES,
            ),
            response_sizes: r.register_capped(
                "inference_objective_response_sizes",
                alpha("Inference objective responses size distribution in bytes for each model and target model"),
                RESPONSE_BYTES,
            ),
            input_tokens: r.register_capped(
                "inference_objective_input_tokens",
                alpha("Inference objective input token count distribution for requests in each model"),
                INPUT_TOKENS,
            ),
            output_tokens: r.register_capped(
                "inference_objective_output_tokens",
                alpha("Inference objective output token count distribution for requests in each model"),
                OUTPUT_TOKENS,
            ),
            cached_tokens: r.register_capped(
                "inference_objective_prompt_cached_tokens",
                alpha("Inference objective prompt cached token count distribution for requests in each model"),
                INPUT_TOKENS,
            ),
            running: r.register_capped(
                "inference_objective_running_requests",
                alpha("Inference objective number of running requests in each model"),
                Gauge::default,
            ),
            ntpot: r.register_capped(
                "inference_objective_normalized_time_per_output_token_seconds",
                alpha(
                    "Inference objective latency divided by number of output tokens in seconds for each model \
                     and target model",
                ),
                NTPOT,
            ),
            ttft: r.register_capped(
                "inference_objective_request_ttft_seconds",
                alpha("Inference model TTFT distribution in seconds for each model and target model"),
                GENERAL_LATENCY,
            ),
        }
    }
}

impl LlmdRequestFamilies {
    pub(super) fn register(r: &MetricsRegistry) -> Self {
        Self {
            requests: r.register_capped(
                "llm_d_epp_request",
                alpha("Total number of processed requests"),
                Counter::default,
            ),
            errors: r.register_capped(
                "llm_d_epp_request_error",
                alpha("Total number of request errors"),
                Counter::default,
            ),
            duration: r.register_capped(
                "llm_d_epp_request_duration_seconds",
                alpha("End-to-end request latency distribution in seconds"),
                GENERAL_LATENCY,
            ),
            request_sizes: r.register_capped(
                "llm_d_epp_request_size_bytes",
                alpha("Incoming request body size distribution in bytes"),
                REQUEST_BYTES,
            ),
            response_sizes: r.register_capped(
                "llm_d_epp_response_size_bytes",
                alpha("Outgoing response body size distribution in bytes"),
                RESPONSE_BYTES,
            ),
            input_tokens: r.register_capped(
                "llm_d_epp_request_input_tokens",
                alpha("Input token count distribution per request"),
                INPUT_TOKENS,
            ),
            output_tokens: r.register_capped(
                "llm_d_epp_request_output_tokens",
                alpha("Output token count distribution per request"),
                OUTPUT_TOKENS,
            ),
            cached_tokens: r.register_capped(
                "llm_d_epp_request_cached_tokens",
                alpha(
                    "Distribution of prompt tokens read from cache per request, as reported by the model \
                     server in the response",
                ),
                INPUT_TOKENS,
            ),
            running: r.register_capped(
                "llm_d_epp_request_running",
                alpha("Current number of active running requests"),
                Gauge::default,
            ),
            ntpot: r.register_capped(
                "llm_d_epp_request_ntpot_seconds",
                alpha(
                    "Normalized time per output token in seconds (end-to-end latency divided by output token \
                     count)",
                ),
                NTPOT,
            ),
            ttft: r.register_capped(
                "llm_d_epp_request_ttft_seconds",
                alpha(
                    "Time to first token in seconds, measured from request received to first response byte. \
                     For non-streaming requests, this equals total request duration",
                ),
                LLMD_TTFT,
            ),
        }
    }
}

impl RequestMetrics {
    /// The rewrite families: their labels are the configured rules' names and models, so uncapped.
    pub(super) fn register_rewrites(&self, r: &MetricsRegistry) {
        r.register(
            "inference_extension_model_rewrite_decisions",
            alpha(REWRITE_HELP),
            self.gie_rewrites.clone(),
        );
        r.register("llm_d_epp_model_rewrite_decisions", alpha(REWRITE_HELP), self.llmd_rewrites.clone());
    }
}
