//! Requests through the real stack: both APIs, streamed and not, the model rewrite, usage, and routing on
//! what epp reads from llama.cpp's `/metrics`.

use super::*;

/// The body of a small deterministic request to `path`, streamed (with the usage chunk) or not.
fn small_request(path: &str, streamed: bool) -> Value {
    let mut body = if path.ends_with("/chat/completions") {
        json!({"model": CLIENT_MODEL, "messages": [{"role": "user", "content": "Say hello."}]})
    } else {
        json!({"model": CLIENT_MODEL, "prompt": "Once upon a time"})
    };
    body["max_tokens"] = json!(6);
    body["temperature"] = json!(0);
    if streamed {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_apis_streamed_and_not_carry_usage_and_the_rewritten_model() {
    let name = "both_apis_streamed_and_not_carry_usage_and_the_rewritten_model";
    let Some(fleet) = RealFleet::start(name, 2) else { return };
    let client = http_client();
    // llama.cpp serves whatever name a request carries and answers with its own (vLLM would answer 404
    // to an unknown name), so the rewrite shows in the body only as the round trip back.
    let direct = format!("http://{}/v1/completions", fleet.servers[0].address());
    let answer = read_json(post_json(&client, &direct, &small_request("/v1/completions", false)).await).await;
    assert_eq!(answer["model"], LLAMACPP_MODEL, "llama.cpp names itself: {answer}");
    let (mut prompt_tokens, mut completion_tokens) = (0, 0);
    let cases = [("/v1/completions", false), ("/v1/completions", true)];
    let chat_cases = [("/v1/chat/completions", false), ("/v1/chat/completions", true)];
    for (path, streamed) in cases.into_iter().chain(chat_cases) {
        let response = post_json(&client, &fleet.url(path), &small_request(path, streamed)).await;
        assert_eq!(response.status(), 200, "{path} streamed={streamed}");
        let body = read_text(response).await;
        let last = usage_object(&body, streamed);
        // llama.cpp answers with its own name (below); epp rewrites it back to the client's.
        assert_eq!(last["model"], CLIENT_MODEL, "{path} streamed={streamed}: {body}");
        let usage = &last["usage"];
        let counted = |field: &str| usage[field].as_u64().unwrap_or_else(|| panic!("usage.{field}: {body}"));
        assert_eq!(counted("completion_tokens"), 6, "{path} streamed={streamed}: {body}");
        prompt_tokens += counted("prompt_tokens");
        completion_tokens += counted("completion_tokens");
    }

    // epp read the same usage out of llama.cpp's answers, under the client's and the target's names.
    let labels = [("model_name", CLIENT_MODEL), ("target_model_name", LLAMACPP_MODEL)];
    let counted = wait_until_async(PROPAGATION_DEADLINE, || {
        let text = fleet.epp_metrics();
        let ok = metric_sum(&text, "inference_objective_request_total", &labels) == Some(4.0)
            && metric_sum(&text, "inference_objective_output_tokens_sum", &labels)
                == Some(completion_tokens as f64)
            && metric_sum(&text, "inference_objective_input_tokens_sum", &labels)
                == Some(prompt_tokens as f64);
        async move { ok }
    })
    .await;
    assert!(
        counted,
        "epp's counts differ from llama.cpp's usage ({prompt_tokens} prompt, {completion_tokens} completion \
         tokens):\n{}",
        fleet.epp_metrics()
    );
    // And llama.cpp's own counter agrees with both.
    let direct_tokens = answer["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    let want = (completion_tokens + direct_tokens) as f64;
    let predicted = settled_value(want, || {
        let servers = fleet.servers.iter();
        servers
            .map(|s| metric_sample(&s.metrics_text(), "llamacpp:tokens_predicted_total", &[]).unwrap_or(0.0))
            .sum()
    })
    .await;
    assert_eq!(
        predicted, want,
        "llamacpp:tokens_predicted_total over both servers (the direct request's {direct_tokens} included)"
    );
}

/// With one slot per server, a second long request on server 0 waits ("deferred"): epp reads both the
/// running and the waiting request from llama.cpp's page through the built-in mapping, and sends the
/// next request to the idle server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epp_reads_llamacpps_running_and_deferred_requests_and_routes_around_them() {
    let name = "epp_reads_llamacpps_running_and_deferred_requests_and_routes_around_them";
    let Some(fleet) = RealFleet::start(name, 1) else { return };
    let client = http_client();
    let (busy, idle) = (fleet.servers[0].address(), fleet.servers[1].address());
    // Straight to server 0, not through the gateway: the load epp did not route, so only a scrape shows it.
    let direct = format!("http://{busy}/v1/completions");
    let mut body = long_stream_body(2_000);
    body["model"] = json!(LLAMACPP_MODEL);
    let held: Vec<_> = (0..2)
        .map(|_| {
            let (client, url, body) = (client.clone(), direct.clone(), body.clone());
            tokio::spawn(async move { post_json(&client, &url, &body).await })
        })
        .collect();
    let probe = wait_for_probe(&fleet, &client, |probe| {
        probe_candidate(probe, &busy)
            .is_some_and(|c| c["running_requests"] == 1 && c["waiting_queue_size"] == 1)
    })
    .await;
    let seen = probe_candidate(&probe, &busy);
    assert!(
        seen.is_some_and(|c| c["running_requests"] == 1 && c["waiting_queue_size"] == 1),
        "epp never read llama.cpp's requests_processing/requests_deferred for {busy}: {probe:#}"
    );
    assert_eq!(probe["pick"]["address"], idle.as_str(), "the probe picks the idle server: {probe:#}");

    let response =
        post_json(&client, &fleet.url("/v1/completions"), &small_request("/v1/completions", false)).await;
    assert_eq!(response.status(), 200);
    let idle_server = &fleet.servers[1];
    let processed = settled_value(6.0, || {
        metric_sample(&idle_server.metrics_text(), "llamacpp:tokens_predicted_total", &[]).unwrap_or(0.0)
    })
    .await;
    assert_eq!(processed, 6.0, "the gateway's request went to the idle server");
    for request in held {
        request.abort();
    }
}
