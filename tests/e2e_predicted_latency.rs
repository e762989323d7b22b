//! Predicted-latency routing end to end: client → real Envoy (ext_proc) → epp with llm-d's SLO-aware
//! pipeline (config/predicted-latency-slo.yaml plus objectives) → epp-test-backend, streaming.
//!
//! What only this path shows: the SLO headers arrive through Envoy and are honoured; a malformed one is a
//! 400 with the reason; the first requests route while no model exists (the warm-up fallback); epp trains
//! its own predictor from what the responses took, publishes a model, and then predicts; a sheddable
//! request no endpoint is predicted to serve in time is refused with a 429 and the reason, while the same
//! request at standard priority is served; and the predicted, observed and prediction-error families appear
//! on /metrics. No timing is asserted: the test waits for states (a published model, scraped loads).

use epp_testkit::*;
use serde_json::{json, Value};

const MODEL: &str = "food-review";

/// The SLO-aware guide pipeline with the objectives the test uses, and training settings small enough to
/// publish a first model after a few requests.
fn config() -> String {
    let guide = std::fs::read_to_string(manifest_dir().join("config/predicted-latency-slo.yaml"))
        .expect("config/predicted-latency-slo.yaml");
    format!("{guide}\nobjectives:\n- name: batch\n  priority: -1\n- name: interactive\n  priority: 10\n")
}

fn streamed(prompt: &str) -> Value {
    json!({"model": MODEL, "prompt": prompt, "max_tokens": 8, "stream": true,
           "stream_options": {"include_usage": true}})
}

/// Sends one streamed completion with `headers`; returns the status and the body.
async fn send(
    client: &reqwest::Client,
    stack: &Stack,
    prompt: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut request = client
        .post(stack.url("/v1/completions"))
        .header("content-type", "application/json")
        .body(streamed(prompt).to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request through Envoy");
    let status = response.status().as_u16();
    (status, read_text(response).await)
}

fn generation(epp: &Epp) -> f64 {
    metric_sample(&epp.metrics_text(), "epp_predictor_model_generation", &[]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slo_aware_routing_trains_predicts_and_sheds_through_envoy() {
    let test_name = "slo_aware_routing_trains_predicts_and_sheds_through_envoy";
    let config = format!("--config-text={}", config());
    let epp_args = [
        config.as_str(),
        FAST_POOL_GAUGES,
        "--latency-min-samples-for-retrain=8",
        "--latency-min-samples-for-retrain-fresh=8",
        "--latency-retraining-interval=100ms",
    ];
    let Some(stack) = start_stack(test_name, "envoy-full-duplex.yaml", 2, &["--chunk-delay-ms=5"], &epp_args)
    else {
        return;
    };
    let client = http_client();

    // A malformed objective is the client's error, named.
    let (status, body) = send(&client, &stack, "bad slo", &[("x-llm-d-slo-ttft-ms", "soon")]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("x-llm-d-slo-ttft-ms"), "{body}");

    // Warm-up: no model yet, yet every request is routed (the scorer's composite fallback). The window
    // holds a tenth of the samples out for scoring, chosen by a hash of each sample (timings included), so
    // how many requests the first model takes varies from run to run: send until one is published. (With
    // a fixed 12 and the default first-model minimum of 10, one run in 10 to 25 had too few left.)
    assert_eq!(generation(&stack.epp), 0.0);
    let mut sent = 0;
    while generation(&stack.epp) < 1.0 {
        let (status, body) =
            send(&client, &stack, &format!("warm-up {sent}"), &[("x-llm-d-slo-ttft-ms", "5000")]).await;
        assert_eq!(status, 200, "warm-up request {sent}: {body}");
        sent += 1;
        if sent >= 400 {
            // The full exposition is too long for CI's log; what explains a missing model is the
            // predictor's own families and the request-side latency histograms that feed it.
            let explaining: Vec<String> = stack
                .epp
                .metrics_text()
                .lines()
                .filter(|l| {
                    !l.starts_with('#')
                        && (l.starts_with("epp_predictor_")
                            || l.contains("ttft_seconds_count")
                            || l.contains("tpot_seconds_count")
                            || l.starts_with("inference_objective_request_total"))
                })
                .map(str::to_string)
                .collect();
            panic!("no model published after {sent} streamed requests:\n{}", explaining.join("\n"));
        }
    }

    // With a model, requests carry predictions; a loose SLO is met.
    for n in 0..6 {
        let headers = [("x-llm-d-slo-ttft-ms", "60000"), ("x-llm-d-slo-tpot-ms", "60000")];
        let (status, body) = send(&client, &stack, &format!("predicted {n}"), &headers).await;
        assert_eq!(status, 200, "{body}");
    }

    // Busy endpoints (something running, KV warm) and an impossible TTFT objective: a sheddable request is
    // refused with the reason, a standard one is served (and counted as a violation).
    let mut queues = Vec::new();
    for &port in &stack.backends.ports {
        set_backend_load(&client, port, &json!({"waiting": 3, "running": 4, "kv": 0.6})).await;
        queues.push((port, 3.0));
    }
    wait_for_scraped_queues(&stack.epp, &queues).await;
    let impossible = ("x-llm-d-slo-ttft-ms", "0.001");
    let (status, body) =
        send(&client, &stack, "shed me", &[impossible, ("x-gateway-inference-objective", "batch")]).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("no endpoint is predicted to meet the SLO"), "{body}");
    let (status, body) =
        send(&client, &stack, "serve me", &[impossible, ("x-gateway-inference-objective", "interactive")])
            .await;
    assert_eq!(status, 200, "a non-sheddable request is never shed: {body}");
    // The deprecated header names are read too.
    let (status, body) = send(
        &client,
        &stack,
        "shed me too",
        &[("x-slo-ttft-ms", "0.001"), ("x-gateway-inference-objective", "batch")],
    )
    .await;
    assert_eq!(status, 429, "{body}");

    let text = stack.epp.metrics_text();
    for family in [
        "llm_d_epp_request_predicted_ttft_seconds_count",
        "llm_d_epp_request_predicted_tpot_seconds_count",
        "llm_d_epp_request_ttft_prediction_duration_seconds_count",
        "llm_d_epp_request_streaming_tpot_seconds_count",
        "inference_objective_request_predicted_ttft_seconds_count",
    ] {
        let count = metric_sum(&text, family, &[]).unwrap_or(0.0);
        assert!(count > 0.0, "{family} has no observations:\n{text}");
    }
    let violations =
        metric_sum(&text, "llm_d_epp_request_slo_violation_total", &[("type", "ttft")]).unwrap_or(0.0);
    assert!(violations >= 1.0, "the served impossible request missed its TTFT objective:\n{text}");
    let errors =
        metric_sum(&text, "epp_request_prediction_error_ratio_count", &[("model", "ttft")]).unwrap_or(0.0);
    assert!(errors > 0.0, "no predicted-vs-actual error recorded:\n{text}");
    assert!(
        metric_sample(&text, "epp_predictor_samples", &[("model", "tpot")]).unwrap_or(0.0) > 0.0,
        "{text}"
    );
}
