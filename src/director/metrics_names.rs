//! Names and help texts of the director's families, as the Go EPP registers them (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/metrics/metrics.go and llm-d's router metrics).

use super::metrics::RequestMetrics;
use crate::metrics::{alpha, MetricsRegistry};

const REWRITE_HELP: &str = "Total number of inference model rewrite decisions";

impl RequestMetrics {
    pub(super) fn register_in(&self, r: &MetricsRegistry) {
        let (g, l) = (&self.gie, &self.llmd);
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
            "inference_extension_model_rewrite_decisions",
            alpha(REWRITE_HELP),
            self.gie_rewrites.clone(),
        );
        r.register("llm_d_epp_model_rewrite_decisions", alpha(REWRITE_HELP), self.llmd_rewrites.clone());
    }
}
