//! HTTP tests against the real server on 127.0.0.1:0, read back with epp's own metrics parser.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;
use epp::datastore::EndpointTelemetry;
use epp::telemetry::{extract, EngineSet};

fn options() -> ServeOptions {
    ServeOptions {
        time_scale: 50.0,
        noise: Some(0.0),
        default_max_tokens: 3,
        ..ServeOptions::new("sim-model")
    }
}

async fn start(options: ServeOptions) -> SocketAddr {
    serve(options).await.unwrap()[0]
}

async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn scrape(page: &str) -> EndpointTelemetry {
    let vllm = EngineSet::builtin().get("vllm").unwrap().clone();
    let out = extract(page.as_bytes(), &vllm, &EndpointTelemetry::default(), std::time::Instant::now());
    assert_eq!((out.error, out.malformed_lines), (None, 0));
    out.metrics
}

/// The value of the first sample line starting with `prefix`.
fn sample(page: &str, prefix: &str) -> f64 {
    let line = page.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Polls `/metrics` until `done` holds (the server works in its own time; no sleeps are asserted).
async fn wait_for_metrics(addr: SocketAddr, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..500 {
        let (_, page) = get(addr, "/metrics").await;
        if done(&page) {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("metrics never reached the expected state");
}

fn completion(prompt: &str, max_tokens: Option<u32>) -> String {
    let mut body = serde_json::json!({"model": "sim-model", "prompt": prompt});
    if let Some(n) = max_tokens {
        body["max_tokens"] = n.into();
    }
    body.to_string()
}

#[tokio::test]
async fn completions_report_usage_and_prefix_cache_hits() {
    // vLLM details cached prompt tokens only with --enable-prompt-tokens-details; without, the field is
    // null (the last request below).
    let addr = start(ServeOptions { prompt_tokens_details: true, ..options() }).await;
    let plain = start(options()).await;
    let prompt = "abcd".repeat(1000); // 1000 tokens + the quotes
    let (status, headers, body) = post(addr, "/v1/completions", &completion(&prompt, Some(5))).await;
    assert_eq!(status, 200, "{body}");
    let name = format!("sim-{}", addr.port());
    assert_eq!(headers["x-sim-replica"], name.as_str());
    assert_eq!(headers["x-backend-id"], name.as_str());
    let cold: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cold["object"], "text_completion");
    assert_eq!(cold["model"], "sim-model");
    assert_eq!(cold["choices"][0]["finish_reason"], "length");
    assert_eq!(cold["choices"][0]["text"].as_str().unwrap().split_whitespace().count(), 5);
    assert_eq!(cold["usage"]["prompt_tokens"], 1001);
    assert_eq!(cold["usage"]["completion_tokens"], 5);
    assert_eq!(cold["usage"]["total_tokens"], 1006);
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    let (_, _, body) = post(addr, "/v1/completions", &completion(&prompt, Some(5))).await;
    let warm: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(warm["usage"]["prompt_tokens_details"]["cached_tokens"], 992);
    let (_, _, body) = post(plain, "/v1/completions", &completion(&prompt, Some(5))).await;
    let undetailed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(undetailed["usage"]["prompt_tokens_details"], Value::Null, "vLLM's default");

    let (_, page) = get(addr, "/metrics").await;
    assert_eq!(sample(&page, "vllm:prefix_cache_hits_total{"), 992.0);
    assert_eq!(sample(&page, "vllm:prefix_cache_queries_total{"), 2002.0);
    assert_eq!(sample(&page, "vllm:generation_tokens_total{"), 10.0);
    assert_eq!(sample(&page, "vllm:time_to_first_token_seconds_count{"), 2.0);
    assert_eq!(sample(&page, "vllm:inter_token_latency_seconds_count{"), 8.0);
    assert_eq!(sample(&page, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\""), 2.0);
    // Simulated TTFT: the cold 1k prompt took a ~65 ms prefill step on the simulated H100.
    assert!(sample(&page, "vllm:time_to_first_token_seconds_sum{") > 0.06);
}

#[tokio::test]
async fn the_page_restricted_by_name_as_vllm_serves_it() {
    let addr = start(options()).await;
    let query = "name%5B%5D=vllm%3Anum_requests_waiting&name%5B%5D=vllm%3Akv_cache_usage_perc";
    let (status, restricted) = get(addr, &format!("/metrics/?{query}")).await;
    assert_eq!(status, 200);
    let samples: Vec<&str> = restricted.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(samples.len(), 2, "{restricted}");
    assert!(
        samples[0].starts_with("vllm:num_requests_waiting{")
            || samples[1].starts_with("vllm:num_requests_waiting{")
    );
    // `/metrics` is the instrumentator's handler in vLLM: it ignores the query.
    let (_, whole) = get(addr, &format!("/metrics?{query}")).await;
    let (_, plain) = get(addr, "/metrics/").await;
    assert!(whole.len() > 10 * restricted.len());
    assert!(whole.contains("vllm:prefix_cache_hits_total") && plain.contains("vllm:prefix_cache_hits_total"));
}

#[tokio::test]
async fn default_length_is_a_natural_stop() {
    let addr = start(options()).await;
    let body = r#"{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, _, body) = post(addr, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["object"], "chat.completion");
    assert_eq!(reply["choices"][0]["message"]["role"], "assistant");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert_eq!(reply["usage"]["completion_tokens"], 3);
}

/// The `data:` payloads of an SSE body.
fn events(body: &str) -> Vec<&str> {
    body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect()
}

/// The first bytes of a chat stream carry the first token with the role chunk, as vLLM sends them: a
/// gateway that times the first body chunk (epp's TTFT) must not see the role alone before the prefill.
#[tokio::test]
async fn a_chat_streams_role_chunk_comes_with_its_first_token() {
    let addr = start(options()).await;
    let body =
        r#"{"model":"sim-model","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let first = response.chunk().await.unwrap().expect("a first body chunk");
    let first = String::from_utf8_lossy(&first);
    let data = events(&first);
    assert!(data.len() >= 2, "role and first token in one chunk: {first}");
    let token: Value = serde_json::from_str(data[1]).unwrap();
    assert!(!token["choices"][0]["delta"]["content"].as_str().unwrap().is_empty(), "{first}");
}

#[tokio::test]
async fn chat_streams_tokens_finish_reason_and_usage() {
    let addr = start(options()).await;
    let body = r#"{"model":"sim-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":4,
                   "messages":[{"role":"user","content":"tell me something"}]}"#;
    let (status, headers, body) = post(addr, "/v1/chat/completions", body).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let data = events(&body);
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks.len(), 7, "role, 4 tokens, finish, usage: {body}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for chunk in &chunks[1..5] {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert!(!chunk["choices"][0]["delta"]["content"].as_str().unwrap().is_empty());
    }
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["choices"].as_array().map(Vec::len), Some(0));
    assert_eq!(chunks[6]["usage"]["completion_tokens"], 4);
    assert!(chunks[6]["usage"]["prompt_tokens"].as_u64().unwrap() > 5);

    let plain = r#"{"model":"sim-model","stream":true,"prompt":"x","max_tokens":2}"#;
    let (_, _, body) = post(addr, "/v1/completions", plain).await;
    let data = events(&body);
    assert_eq!(data.len(), 4, "2 tokens, finish, [DONE] and no usage: {body}");
    assert!(data[0].contains("\"object\":\"text_completion\""));
}

#[tokio::test]
async fn queue_running_kv_and_cache_info_extract_under_load() {
    let opts = ServeOptions {
        time_scale: 1.0,
        max_num_seqs: Some(1),
        num_gpu_blocks: Some(5000),
        lora_modules: vec!["food-review-1".into()],
        max_loras: 2,
        ..options()
    };
    let addr = start(opts).await;
    let (_, idle) = get(addr, "/metrics").await;
    let m = scrape(&idle);
    assert_eq!((m.running_requests, m.waiting_queue_size, m.kv_cache_usage), (0, 0, 0.0));
    assert_eq!((m.cache_block_size, m.cache_num_blocks, m.max_active_models), (16, 5000, 2));

    let mut clients = Vec::new();
    for model in ["food-review-1", "sim-model", "sim-model"] {
        let body = format!(
            r#"{{"model":"{model}","stream":true,"prompt":"{}","max_tokens":50000}}"#,
            "y".repeat(800)
        );
        clients.push(tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("http://{addr}/v1/completions"))
                .body(body)
                .send()
                .await
                .unwrap();
            let _ = response.bytes().await;
        }));
        // Arrival order decides who runs: wait until this one is queued.
        let queued = clients.len();
        wait_for_metrics(addr, |p| {
            scrape(p).running_requests + scrape(p).waiting_queue_size == queued as u64
        })
        .await;
    }
    let page = wait_for_metrics(addr, |p| scrape(p).running_requests == 1).await;
    let m = scrape(&page);
    assert_eq!((m.running_requests, m.waiting_queue_size), (1, 2));
    assert!(m.kv_cache_usage > 0.0);
    assert!(m.active_models.contains("food-review-1"), "{:?}", m.active_models);
    assert!(page.contains("vllm:cache_config_info{block_size=\"16\""));

    for client in &clients {
        client.abort();
    }
    let page = wait_for_metrics(addr, |p| {
        sample(p, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\"") == 3.0
    })
    .await;
    let m = scrape(&page);
    assert_eq!(
        (m.running_requests, m.waiting_queue_size, m.kv_cache_usage),
        (0, 0, 0.0),
        "aborts free everything"
    );
}

#[tokio::test]
async fn bad_inputs_get_vllm_style_errors() {
    let addr = start(ServeOptions { num_gpu_blocks: Some(10), ..options() }).await;
    let error_type = |body: &str| serde_json::from_str::<Value>(body).unwrap()["error"]["type"].clone();
    let (status, _, body) = post(addr, "/v1/completions", "{not json").await;
    assert_eq!((status, error_type(&body)), (400, "BadRequestError".into()));
    let (status, _, body) = post(addr, "/v1/completions", r#"{"model":"nope","prompt":"x"}"#).await;
    assert_eq!((status, error_type(&body)), (404, "NotFoundError".into()));
    let (status, _, body) = post(addr, "/v1/completions", &completion("x", Some(0))).await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = post(addr, "/v1/completions", &completion(&"z".repeat(800), Some(10))).await;
    assert_eq!(status, 400);
    assert!(body.contains("maximum context length is 160 tokens"), "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["param"], "input_tokens");
    let (status, _, body) = post(addr, "/v1/completions", &completion("x", Some(161))).await;
    assert_eq!(status, 400, "max_tokens above max_model_len: {body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["param"], "max_tokens");
    // A prompt that fits with a max_tokens that does not: vLLM cuts the output to what fits.
    let (status, _, body) = post(addr, "/v1/completions", &completion("x", Some(160))).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["total_tokens"], 160, "{body}");
    assert_eq!(get(addr, "/v1/completions").await.0, 405);
    assert_eq!(get(addr, "/nowhere").await.0, 404);
    assert_eq!(get(addr, "/health").await.0, 200);
}

#[tokio::test]
async fn error_rate_answers_500() {
    let addr =
        start(ServeOptions { faults: FaultOptions { error_rate: 1.0, ..Default::default() }, ..options() })
            .await;
    let (status, _, body) = post(addr, "/v1/completions", &completion("x", Some(2))).await;
    assert_eq!(status, 500);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["code"], 500);
}

#[tokio::test]
async fn latency_spikes_hold_requests() {
    let faults = FaultOptions { latency_spike_rate: 1.0, latency_spike_ms: 2000, ..Default::default() };
    let addr = start(ServeOptions { faults, ..options() }).await;
    let started = Instant::now();
    let (status, _, _) = post(addr, "/v1/completions", &completion("x", Some(1))).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(40), "2 s simulated at 50x is at least 40 ms");
}

#[tokio::test]
async fn die_mid_stream_cuts_the_stream_and_aborts_the_request() {
    let faults = FaultOptions { die_mid_stream_rate: 1.0, ..Default::default() };
    let addr = start(ServeOptions { faults, ..options() }).await;
    let body = r#"{"model":"sim-model","stream":true,"prompt":"x","max_tokens":50}"#;
    let response =
        reqwest::Client::new().post(format!("http://{addr}/v1/completions")).body(body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    match response.bytes().await {
        Err(_) => {}
        Ok(body) => assert!(!String::from_utf8_lossy(&body).contains("[DONE]"), "stream was not cut"),
    }
    wait_for_metrics(addr, |p| {
        sample(p, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\"") == 1.0
    })
    .await;
}

#[tokio::test]
async fn metrics_fault_modes() {
    let with_mode = |metrics_mode| ServeOptions {
        faults: FaultOptions { metrics_mode, ..Default::default() },
        ..options()
    };
    let garbage = start(with_mode(MetricsMode::Garbage)).await;
    let (status, page) = get(garbage, "/metrics").await;
    assert_eq!(status, 200);
    assert!(!page.contains("vllm:"));
    for mode in [MetricsMode::Hang, MetricsMode::Slow] {
        let addr = start(with_mode(mode)).await;
        let answered = tokio::time::timeout(Duration::from_millis(300), get(addr, "/metrics")).await;
        assert!(answered.is_err(), "{mode:?} must not answer at once");
        assert_eq!(get(addr, "/health").await.0, 200, "only /metrics misbehaves");
    }
}

#[tokio::test]
async fn heterogeneous_replicas_legacy_names_and_models() {
    let opts = ServeOptions {
        profiles: vec![AcceleratorProfile::h100_8b(), AcceleratorProfile::l4_8b()],
        legacy_metric_names: true,
        lora_modules: vec!["a".into()],
        ..options()
    };
    let addrs = serve(opts).await.unwrap();
    assert_eq!(addrs.len(), 2);
    let blocks: Vec<usize> = {
        let mut out = Vec::new();
        for addr in &addrs {
            let (_, page) = get(*addr, "/metrics").await;
            assert!(
                page.contains("vllm:gpu_cache_usage_perc{") && !page.contains("vllm:kv_cache_usage_perc")
            );
            out.push(scrape(&page).cache_num_blocks);
        }
        out
    };
    assert_eq!(blocks, vec![27_000, 2_200]);
    let (_, _, a) = post(addrs[0], "/v1/completions", &completion("x", Some(1))).await;
    let (_, headers, _) = post(addrs[1], "/v1/completions", &completion("x", Some(1))).await;
    assert!(a.contains(&format!("sim-{}", addrs[0].port())));
    assert_eq!(headers["x-sim-replica"], format!("sim-{}", addrs[1].port()).as_str());
    let (_, models) = get(addrs[0], "/v1/models").await;
    let models: Value = serde_json::from_str(&models).unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, vec!["sim-model", "a"]);
}

#[tokio::test]
async fn invalid_options_are_clear_errors() {
    let bad = [
        ServeOptions { time_scale: 0.0, ..options() },
        ServeOptions { faults: FaultOptions { error_rate: 1.5, ..Default::default() }, ..options() },
        ServeOptions { max_num_seqs: Some(0), ..options() },
        ServeOptions { profiles: vec![], ..options() },
        ServeOptions { lora_modules: vec!["".into()], ..options() },
        ServeOptions { kv_replay_port: Some(5558), ..options() },
        ServeOptions { kv_events_port: Some(0), ..options() },
    ];
    for opts in bad {
        let err = serve(opts).await.unwrap_err();
        assert!(matches!(err, SimError::Invalid(_) | SimError::Engine(_)), "{err}");
    }
    let taken = start(options()).await;
    let err = serve(ServeOptions { port: taken.port(), ..options() }).await.unwrap_err();
    assert!(err.to_string().contains("cannot listen"), "{err}");
}

/// P/D: a prefill leg answers where its blocks are; a decode leg given them prefills nothing but its last
/// token (its prompt is cached afterwards); malformed transfer parameters are a 400 naming the field.
#[tokio::test]
async fn prefill_and_decode_legs_speak_the_nixl_handoff() {
    let addr = start(ServeOptions { prompt_tokens_details: true, ..options() }).await;
    let prompt = "long shared document ".repeat(200);
    let prefill = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 1, "stream": false,
        "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null}});
    let (status, _, text) = post(addr, "/v1/completions", &prefill.to_string()).await;
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    let handoff = answer["kv_transfer_params"].clone();
    assert_eq!(handoff["do_remote_prefill"], json!(true));
    assert!(handoff["remote_block_ids"][0].as_array().is_some_and(|b| !b.is_empty()), "{handoff}");

    let decode_addr = start(ServeOptions { prompt_tokens_details: true, ..options() }).await;
    let decode =
        json!({"model": "sim-model", "prompt": prompt, "max_tokens": 3, "kv_transfer_params": handoff});
    let (status, _, text) = post(decode_addr, "/v1/completions", &decode.to_string()).await;
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(answer.get("kv_transfer_params").is_none(), "only the prefill leg answers a handoff");
    assert_eq!(answer["usage"]["completion_tokens"], json!(3));
    // The transferred prompt is the decode replica's own cache now.
    let again = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 1});
    let (_, _, text) = post(decode_addr, "/v1/completions", &again.to_string()).await;
    let cached = serde_json::from_str::<serde_json::Value>(&text).unwrap()["usage"]["prompt_tokens_details"]
        ["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached > 900, "cached {cached}");

    let bad = json!({"model": "sim-model", "prompt": "x", "kv_transfer_params": {"do_remote_prefill": true}});
    let (status, _, text) = post(decode_addr, "/v1/completions", &bad.to_string()).await;
    assert_eq!(status, 400);
    assert!(text.contains("remote_engine_id"), "{text}");
    let streamed_prefill = json!({"model": "sim-model", "prompt": "x", "stream": true,
        "kv_transfer_params": {"do_remote_decode": true}});
    assert_eq!(post(addr, "/v1/completions", &streamed_prefill.to_string()).await.0, 400);
}

/// `--tokenizer-dir`: a word-level tokenizer and a chat template; the render endpoints and the usage count
/// the model's token ids, and a chat the template leaves to render falls back to the stand-in.
#[tokio::test]
async fn the_models_own_tokenizer_and_chat_template_give_the_prompt_ids() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel",
        "vocab":{"[UNK]":0,"hello":1,"world":2,"again":3},"unk_token":"[UNK]"}}"#;
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer).unwrap();
    let template = r#"{"chat_template": "{% for m in messages %}{{ m.content }} {% endfor %}again"}"#;
    std::fs::write(dir.path().join("tokenizer_config.json"), template).unwrap();
    let model = crate::ModelTokenizer::load(dir.path()).unwrap();
    let addr = start(ServeOptions { tokenizer: Some(model), ..options() }).await;
    let chat = r#"{"model":"sim-model","messages":[{"role":"user","content":"hello world"}]}"#;
    let (status, _, body) = post(addr, "/v1/chat/completions/render", chat).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["token_ids"], serde_json::json!([1, 2, 3]));
    let prompt = r#"{"model":"sim-model","prompt":"hello again"}"#;
    let (_, _, body) = post(addr, "/v1/completions/render", prompt).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()[0]["token_ids"], serde_json::json!([1, 3]));
    let (_, _, body) = post(addr, "/v1/chat/completions", chat).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["usage"]["prompt_tokens"], 3);
    let tools = r#"{"model":"sim-model","messages":[{"role":"user","content":"hello"}],"tools":[]}"#;
    let (_, _, body) = post(addr, "/v1/chat/completions/render", tools).await;
    let stand_in = serde_json::from_str::<Value>(&body).unwrap()["token_ids"].as_array().map_or(0, Vec::len);
    assert!(stand_in > 3, "the stand-in's 4-byte tokens of the messages' JSON: {body}");
    let missing = crate::ModelTokenizer::load(std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(missing.contains("--tokenizer-dir /nonexistent"), "{missing}");
}
