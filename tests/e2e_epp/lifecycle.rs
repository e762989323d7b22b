//! Request lifecycle as epp's metrics show it: every request is counted, and every one is released,
//! whether it completed, the client went away mid-stream, or the chosen backend could not be reached.
//! What tells epp a request is over differs by mode and by outcome (the last response chunk, the end of
//! the ext_proc stream, Envoy resetting it), and only a real Envoy produces each of them.

use serde_json::json;

use crate::*;
use epp_testkit::*;

const MODEL_LABEL: [(&str, &str); 1] = [("model_name", MODEL)];

/// Waits until epp's /metrics for [`MODEL`] satisfies `settled`; panics with the metrics if it never does.
async fn wait_for_model_metrics(stack: &Stack, context: &str, settled: impl Fn(&str) -> bool) {
    let ok = wait_until_async(PROPAGATION_DEADLINE, || {
        let text = stack.epp.metrics_text();
        let ok = settled(&text);
        async move { ok }
    })
    .await;
    assert!(ok, "{context}: epp /metrics never settled:\n{}", stack.epp.metrics_text());
}

fn running_requests(text: &str) -> Option<f64> {
    metric_sample(text, "inference_objective_running_requests", &MODEL_LABEL)
}

/// Concurrent traffic is counted once per request and released in full (in buffered mode, with no
/// response body, only the end of the ext_proc stream says a request is done).
#[tokio::test]
async fn request_metrics_count_concurrent_traffic_and_running_requests_return_to_zero() {
    let test_name = "request_metrics_count_concurrent_traffic_and_running_requests_return_to_zero";
    for template in [FULL_DUPLEX, BUFFERED] {
        let Some(stack) = stack_with(test_name, template, 2, &[]) else { return };
        let client = http_client();
        let prompts: Vec<String> = (0..8).map(|n| unique_prompt("metrics", n)).collect();

        let served =
            futures::future::join_all(prompts.iter().map(|p| send_completion(&client, &stack, p))).await;

        assert!(served.iter().all(|(status, _)| *status == 200), "{template}: {served:?}");
        wait_for_model_metrics(&stack, template, |text| {
            metric_sample(text, "inference_objective_request_total", &MODEL_LABEL) == Some(8.0)
                && running_requests(text) == Some(0.0)
        })
        .await;
    }
}

/// The client hangs up after the first SSE event: Envoy resets the ext_proc stream and epp must release
/// the request although no last chunk ever came.
#[tokio::test]
async fn client_hanging_up_mid_stream_releases_the_request() {
    let test_name = "client_hanging_up_mid_stream_releases_the_request";
    for template in [FULL_DUPLEX, BUFFERED] {
        let backend_args = ["--chunks", "50", "--chunk-delay-ms", "200"];
        let Some(stack) = stack_with(test_name, template, 1, &backend_args) else { return };
        let client = http_client();
        let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true});

        let mut response = post_json(&client, &stack.url("/v1/chat/completions"), &chat).await;
        let first = response.chunk().await.expect("first SSE chunk");
        assert!(first.is_some_and(|bytes| bytes.starts_with(b"data:")), "{template}");
        wait_for_model_metrics(&stack, template, |text| running_requests(text) == Some(1.0)).await;
        drop(response);

        wait_for_model_metrics(&stack, template, |text| running_requests(text) == Some(0.0)).await;
    }
}

/// epp picked a backend that is gone: Envoy answers 503 itself, and epp still releases the request.
#[tokio::test]
async fn unreachable_backend_yields_503_from_envoy_and_releases_the_request() {
    let test_name = "unreachable_backend_yields_503_from_envoy_and_releases_the_request";
    for template in [FULL_DUPLEX, BUFFERED] {
        let Some(mut stack) = stack_with(test_name, template, 1, &[]) else { return };
        let client = http_client();
        stack.backends.child.kill();

        let body = json!({"model": MODEL, "prompt": "anyone there?"});
        let response = post_json(&client, &stack.url("/v1/completions"), &body).await;

        assert_eq!(response.status(), 503, "{template}");
        wait_for_model_metrics(&stack, template, |text| {
            metric_sample(text, "inference_objective_request_total", &MODEL_LABEL) == Some(1.0)
                && running_requests(text) == Some(0.0)
        })
        .await;
    }
}

/// A gateway that keeps the answers out of epp (`response_body_mode: NONE`, the cheap setup in
/// docs/operations.md): the answer reaches the client whole, and epp, which never sees its chunks, counts
/// the request as running until Envoy ends the ext_proc stream with the answer, then releases it.
#[tokio::test]
async fn with_the_answers_kept_out_of_epp_a_request_runs_until_its_answer_ends() {
    let test_name = "with_the_answers_kept_out_of_epp_a_request_runs_until_its_answer_ends";
    let backend_args = ["--chunks", "10", "--chunk-delay-ms", "200"];
    let envoy_vars = [("RESPONSE_BODY_MODE", "NONE")];
    let Some(stack) = start_stack_with_envoy_vars(
        test_name,
        FULL_DUPLEX,
        1,
        &backend_args,
        &[FAST_POOL_GAUGES],
        &envoy_vars,
    ) else {
        return;
    };
    let client = http_client();
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true});

    let mut response = post_json(&client, &stack.url("/v1/chat/completions"), &chat).await;
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.expect("first SSE chunk");
    assert!(first.is_some_and(|bytes| bytes.starts_with(b"data:")));
    wait_for_model_metrics(&stack, "mid-answer", |text| running_requests(text) == Some(1.0)).await;
    let mut rest = Vec::new();
    while let Some(bytes) = response.chunk().await.expect("the rest of the answer") {
        rest.extend_from_slice(&bytes);
    }

    assert!(String::from_utf8_lossy(&rest).trim_end().ends_with("data: [DONE]"), "the answer arrives whole");
    wait_for_model_metrics(&stack, "after the answer", |text| {
        metric_sample(text, "inference_objective_request_total", &MODEL_LABEL) == Some(1.0)
            && running_requests(text) == Some(0.0)
    })
    .await;
}
