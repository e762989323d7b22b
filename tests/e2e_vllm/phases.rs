//! The phases of the real-vLLM run, in order; each leaves the fleet idle for the next.

use super::*;

/// A completion of 2,025 characters: 4 blocks (the last one partial) of 128 tokens at epp's 4 characters
/// per token, where epp's default block of 16 tokens would make 32.
fn long_probe_body() -> Value {
    json!({"model": MODEL, "prompt": "The quick brown fox jumps over the lazy dog. ".repeat(45), "max_tokens": 1})
}
const PROBE_BLOCKS: u64 = 2_025_u64.div_ceil(4 * VLLM_CPU_BLOCK_SIZE);

/// Waits until neither replica runs or queues a request (by vLLM's own gauges).
async fn wait_idle(fleet: &VllmFleet) {
    let idle = wait_until_async(PROPAGATION_DEADLINE, || {
        let busy =
            fleet.replicas_sum("vllm:num_requests_running") + fleet.replicas_sum("vllm:num_requests_waiting");
        async move { busy == 0.0 }
    })
    .await;
    assert!(idle, "vLLM never went idle");
}

/// epp scrapes both replicas' real pages (replica 1's multiprocess page holds no load gauge before its
/// first request: idle, and healthy all the same): healthy (no LoRA families, and no error for their absence),
/// queue and running read, and the prefix producer's block size taken from `cache_config_info` (128 on
/// CPU).
pub(crate) async fn reads_the_real_metrics(fleet: &VllmFleet, client: &reqwest::Client) {
    let probe = fleet
        .wait_for_probe(client, &long_probe_body(), |p| {
            fleet.replicas.iter().all(|r| {
                probe_candidate(p, &r.address()).is_some_and(|c| c["prefix_total_blocks"] == PROBE_BLOCKS)
            })
        })
        .await;
    for replica in &fleet.replicas {
        let seen = probe_candidate(&probe, &replica.address());
        let seen = seen.unwrap_or_else(|| panic!("{} is no candidate: {probe:#}", replica.address()));
        assert_eq!(
            seen["prefix_total_blocks"], PROBE_BLOCKS,
            "block size 128 from cache_config_info: {seen:#}"
        );
        assert_eq!(
            (seen["waiting_queue_size"].as_u64(), seen["running_requests"].as_u64()),
            (Some(0), Some(0))
        );
        assert!(seen["kv_cache_usage"].is_number(), "KV usage read: {seen:#}");
        let labels = [("model_server_endpoint", replica.address()), ("state", "healthy".to_string())];
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(metric_sample(&fleet.epp_metrics(), "epp_endpoint_health_state", &labels), Some(1.0));
    }
    the_page_restricted_to_epps_families(fleet, client).await;
}

/// What epp's scrape loops rely on to ask for only their families (src/telemetry/name_filter.rs): real
/// vLLM's `/metrics/` honours `name[]` and answers with just those samples, while `/metrics` ignores it;
/// with a multiprocess registry (replica 1) the restricted page is empty, and epp reads that replica's
/// whole page (the phase above found it healthy, with its block size, before any request reached it).
async fn the_page_restricted_to_epps_families(fleet: &VllmFleet, client: &reqwest::Client) {
    let names = epp::telemetry::EngineSet::builtin().default_engine().wanted_names().to_vec();
    let query: Vec<String> = names.iter().map(|n| format!("name%5B%5D={}", n.replace(':', "%3A"))).collect();
    let query = query.join("&");
    let address = fleet.replicas[0].address();
    let get = |path: String| {
        let client = client.clone();
        async move {
            let response = client.get(path).send().await.expect("vLLM answers /metrics");
            assert_eq!(response.status(), 200);
            response.text().await.expect("a page")
        }
    };
    let restricted = get(format!("http://{address}/metrics/?{query}")).await;
    let whole = get(format!("http://{address}/metrics?{query}")).await;
    let sample_names: Vec<&str> = restricted
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or(""))
        .collect();
    assert!(!sample_names.is_empty(), "an empty restricted page: {restricted:?}");
    assert!(sample_names.iter().all(|n| names.iter().any(|w| w == n)), "only epp's families: {restricted}");
    for family in ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"] {
        assert!(sample_names.contains(&family), "{family} in {restricted}");
    }
    assert!(whole.contains("vllm:prompt_tokens_total") && whole.len() > 10 * restricted.len());
    let multiprocess = fleet.replicas[1].address();
    assert_eq!(get(format!("http://{multiprocess}/metrics/?{query}")).await, "", "a multiprocess registry");
    assert!(get(format!("http://{multiprocess}/metrics")).await.contains("vllm:cache_config_info"));
}

/// Six long requests straight to replica 0 (`--max-num-seqs 4`: four run, two wait): epp reads them from
/// vLLM's page alone (it did not route them) and the next request goes to replica 1.
pub(crate) async fn routes_around_a_loaded_replica(fleet: &VllmFleet, client: &reqwest::Client) {
    let (loaded, idle) = (fleet.replicas[0].address(), fleet.replicas[1].address());
    let url = format!("http://{loaded}/v1/completions");
    let body = json!({"model": MODEL, "prompt": "Count slowly:", "max_tokens": 400, "ignore_eos": true,
                      "stream": true});
    let load: Vec<_> = (0..6)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            tokio::spawn(async move { read_text(post_json(&client, &url, &body).await).await })
        })
        .collect();
    let probe = fleet
        .wait_for_probe(client, &long_probe_body(), |p| {
            probe_candidate(p, &loaded)
                .is_some_and(|c| c["running_requests"] == 4 && c["waiting_queue_size"] == 2)
        })
        .await;
    let seen = probe_candidate(&probe, &loaded).expect("the loaded replica is a candidate");
    assert_eq!((seen["running_requests"].as_u64(), seen["waiting_queue_size"].as_u64()), (Some(4), Some(2)));
    assert!(seen["kv_cache_usage"].as_f64().is_some_and(|kv| kv > 0.0), "KV in use: {seen:#}");
    assert_eq!(probe["pick"]["address"], idle.as_str(), "the probe picks the idle replica: {probe:#}");
    let served = post_json(
        client,
        &fleet.url("/v1/completions"),
        &json!({"model": MODEL, "prompt": "Hi",
                                                                          "max_tokens": 2}),
    )
    .await;
    assert_eq!(served.status(), 200);
    // Dropping the streams' connections makes vLLM abort them.
    load.iter().for_each(tokio::task::JoinHandle::abort);
    wait_idle(fleet).await;
}

/// Completions and chat, streamed and not, through the gateway: epp counts the tokens vLLM reports, and
/// vLLM's own generation counter moves by the same amount.
pub(crate) async fn both_apis_with_usage_as_vllm_counts_it(fleet: &VllmFleet, client: &reqwest::Client) {
    let generated_before = fleet.replicas_sum("vllm:generation_tokens_total");
    let before = fleet.epp_metrics();
    let epp_sum = |text: &str, name: &str| metric_sum(text, name, &[("model_name", MODEL)]).unwrap_or(0.0);
    let (mut prompt, mut completion) = (0.0, 0.0);
    for (path, streamed) in [
        ("/v1/completions", false),
        ("/v1/completions", true),
        ("/v1/chat/completions", false),
        ("/v1/chat/completions", true),
    ] {
        let mut body = if path.contains("chat") {
            json!({"model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}]})
        } else {
            json!({"model": MODEL, "prompt": "The capital of France is"})
        };
        body["max_tokens"] = json!(8);
        body["temperature"] = json!(0);
        if streamed {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let response = post_json(client, &fleet.url(path), &body).await;
        assert_eq!(response.status(), 200, "{path} streamed={streamed}");
        let text = read_text(response).await;
        let usage = usage_object(&text, streamed);
        if streamed {
            assert_eq!(usage["choices"], json!([]), "vLLM's usage chunk has no choices: {text}");
        }
        assert_eq!(usage["model"], MODEL, "{text}");
        prompt += usage["usage"]["prompt_tokens"].as_f64().expect("prompt_tokens");
        completion += usage["usage"]["completion_tokens"].as_f64().expect("completion_tokens");
    }
    let counted = wait_until_async(PROPAGATION_DEADLINE, || {
        let after = fleet.epp_metrics();
        let delta = |name: &str| epp_sum(&after, name) - epp_sum(&before, name);
        let ok = delta("inference_objective_request_total") == 4.0
            && delta("inference_objective_input_tokens_sum") == prompt
            && delta("inference_objective_output_tokens_sum") == completion;
        async move { ok }
    })
    .await;
    assert!(
        counted,
        "epp's token counts differ from vLLM's usage ({prompt} prompt, {completion} completion)"
    );
    let generated =
        settled_value(completion, || fleet.replicas_sum("vllm:generation_tokens_total") - generated_before)
            .await;
    assert_eq!(generated, completion, "vllm:generation_tokens_total moved by the usage's completion tokens");
}

/// Eight requests sharing a ~700-token prefix, one after another through the gateway: epp sends each
/// repeat where the prefix is cached, so vLLM's `prefix_cache_hits_total` rises by every whole block of
/// the prefix on each of the seven repeats (one repeat sent elsewhere would miss them all).
pub(crate) async fn a_shared_prefix_hits_vllms_prefix_cache(fleet: &VllmFleet, client: &reqwest::Client) {
    let shared =
        format!("{}\n\n", "You are a careful assistant who answers questions about arithmetic. ".repeat(48));
    let tokenize = format!("http://{}/tokenize", fleet.replicas[0].address());
    let counted =
        read_json(post_json(client, &tokenize, &json!({"model": MODEL, "prompt": shared})).await).await;
    let shared_tokens = counted["count"].as_u64().unwrap_or_else(|| panic!("/tokenize: {counted}"));
    let cacheable = shared_tokens / VLLM_CPU_BLOCK_SIZE * VLLM_CPU_BLOCK_SIZE;
    assert!(cacheable >= 4 * VLLM_CPU_BLOCK_SIZE, "the shared prefix spans several blocks: {shared_tokens}");
    let hits_before = fleet.replicas_sum("vllm:prefix_cache_hits_total");
    for n in 0..8 {
        let body = json!({"model": MODEL, "prompt": format!("{shared}Question {n}: what is {n} plus {n}?"),
                          "max_tokens": 2, "temperature": 0});
        let response = post_json(client, &fleet.url("/v1/completions"), &body).await;
        assert_eq!(response.status(), 200, "request {n}");
        read_text(response).await;
    }
    let want = (7 * cacheable) as f64;
    let hits = settled_value(want, || fleet.replicas_sum("vllm:prefix_cache_hits_total") - hits_before).await;
    eprintln!("FIGURE shared prefix: {hits} of {} cacheable prompt tokens hit vLLM's cache", 7 * cacheable);
    assert_eq!(hits, (7 * cacheable) as f64, "every repeat hit the cache ({shared_tokens}-token prefix)");
}

/// The precise epp (config/precise-prefix.yaml; both replicas publish their KV events to the socket it
/// binds) sends a prompt to the replica whose engine reported caching its prefix. Each prefix is served by
/// one replica directly, past both epps, so nothing but vLLM's own events can tell epp where it is.
pub(crate) async fn precise_routing_follows_the_engines_events(fleet: &VllmFleet, client: &reqwest::Client) {
    for (i, replica) in fleet.replicas.iter().enumerate() {
        let prefix =
            format!("Replica {i} keeps this context about rivers and mountains, part {i}. ").repeat(40);
        let warm = json!({"model": MODEL, "prompt": format!("{prefix}\n\nWarm up."), "max_tokens": 1});
        let response =
            post_json(client, &format!("http://{}/v1/completions", replica.address()), &warm).await;
        assert_eq!(response.status(), 200, "replica {i}");
        read_text(response).await;
        // At least one of vLLM's 128-token blocks, in epp's 16-token blocks.
        let one_block = VLLM_CPU_BLOCK_SIZE / 16;
        let body = json!({"model": MODEL, "prompt": format!("{prefix}\n\nWhich replica?"), "max_tokens": 1});
        let address = replica.address();
        let held = |probe: &Value, at: &str| {
            probe_candidate(probe, at).and_then(|c| c["prefix_match_blocks"].as_u64()).unwrap_or(0)
        };
        let probe = wait_for_probe(client, fleet.precise.metrics_port, &body, |probe| {
            probe["pick"]["address"] == address.as_str() && held(probe, &address) >= one_block
        })
        .await;
        eprintln!("FIGURE precise: replica {i} holds {} blocks of the prefix", held(&probe, &address));
        assert_eq!(probe["pick"]["address"], address.as_str(), "the replica that cached it: {probe:#}");
        assert!(held(&probe, &address) >= one_block, "{probe:#}");
        let other = fleet.replicas[1 - i].address();
        assert_eq!(held(&probe, &other), 0, "the other replica never saw it: {probe:#}");
    }
    precise_chat_routing_renders_in_process(fleet, client).await;
    let metrics = fleet.precise.metrics_text();
    for name in ["epp_kv_cache_events_malformed_total", "epp_kv_cache_events_unknown_pods_total"] {
        assert_eq!(metric_sum(&metrics, name, &[]).unwrap_or(0.0), 0.0, "{name}");
    }
}

/// vLLM's own answers to bad requests reach the client unchanged, and nothing stays in flight.
pub(crate) async fn vllms_errors_pass_through(fleet: &VllmFleet, client: &reqwest::Client) {
    let unknown = json!({"model": "nope", "prompt": "hi", "max_tokens": 4});
    let response = post_json(client, &fleet.url("/v1/completions"), &unknown).await;
    assert_eq!(response.status(), 404);
    let body = read_json(response).await;
    assert_eq!(body["error"]["param"], "model", "vLLM's error body: {body}");
    let too_long = json!({"model": MODEL, "prompt": "hi", "max_tokens": 4000});
    let response = post_json(client, &fleet.url("/v1/completions"), &too_long).await;
    assert_eq!(response.status(), 400);
    let body = read_json(response).await;
    assert_eq!(body["error"]["param"], "max_tokens", "vLLM's error body: {body}");
    let gauges = ["inference_objective_running_requests", "llm_d_epp_inflight_requests"];
    let settled = wait_for_gauges_zero(|| fleet.epp_metrics(), &gauges).await;
    assert!(settled.is_ok(), "in-flight gauges never returned to 0: {settled:?}");
}

/// `token-producer`'s in-process tokenizer, on the model's own tokenizer.json (.vllm-model, which vLLM
/// loads too), gives exactly the ids vLLM's `/tokenize` gives for completions prompts, special tokens
/// included; and prints vLLM's round trip (the in-process cost is `cargo bench --bench kvcache`'s, on
/// the same text in a release build: this test binary is a debug build).
pub(crate) async fn in_process_tokens_are_vllms(fleet: &VllmFleet, client: &reqwest::Client) {
    let tokenizer = epp::kvcache::LocalTokenizer::load(&manifest_dir().join(".vllm-model/tokenizer.json"))
        .expect("the model's tokenizer.json loads");
    let long = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(100);
    let prompts = ["Hello, world!", "  leading spaces, émojis 🍜 and ünïcödé\n\tnew lines", long.as_str()];
    for prompt in prompts {
        let started = std::time::Instant::now();
        let vllm = vllm_tokens(fleet, client, &json!({"model": MODEL, "prompt": prompt})).await;
        let round_trip = started.elapsed();
        let ours = tokenizer.encode(prompt).expect("encodes");
        assert_eq!(ours, vllm, "in-process tokens differ from vLLM's for {prompt:?}");
        eprintln!("FIGURE tokens: {} tokens equal; vLLM /tokenize round trip {round_trip:?}", ours.len());
    }
}

/// The same for chat: a conversation served by one replica directly, then probed with one more turn. The
/// precise epp renders the chat template itself (`tokenizerConfigFile`) and finds the replica whose engine
/// cached the rendered prefix. Only the template can give it the ids: its render fallback, the first
/// replica, does not serve `/v1/chat/completions/render` (vLLM serves it with `--enable-scale-out`).
async fn precise_chat_routing_renders_in_process(fleet: &VllmFleet, client: &reqwest::Client) {
    for (i, replica) in fleet.replicas.iter().enumerate() {
        let system =
            format!("Replica {i} is the one that remembers this long briefing, item {i}. ").repeat(40);
        let turn = |question: &str| {
            json!({"model": MODEL, "max_tokens": 1, "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": question}]})
        };
        let url = format!("http://{}/v1/chat/completions", replica.address());
        let response = post_json(client, &url, &turn("Warm up.")).await;
        assert_eq!(response.status(), 200, "replica {i}");
        read_text(response).await;
        let address = replica.address();
        let held = |probe: &Value, at: &str| {
            probe_candidate(probe, at).and_then(|c| c["prefix_match_blocks"].as_u64()).unwrap_or(0)
        };
        let one_block = VLLM_CPU_BLOCK_SIZE / 16;
        let probe = wait_for_probe(client, fleet.precise.metrics_port, &turn("Which replica?"), |probe| {
            probe["pick"]["address"] == address.as_str() && held(probe, &address) >= one_block
        })
        .await;
        eprintln!(
            "FIGURE precise chat: replica {i} holds {} blocks of the conversation",
            held(&probe, &address)
        );
        assert_eq!(probe["pick"]["address"], address.as_str(), "the replica that cached it: {probe:#}");
        assert_eq!(held(&probe, &fleet.replicas[1 - i].address()), 0, "{probe:#}");
    }
}

/// `token-producer`'s in-process chat template (the model's tokenizer_config.json and the
/// chat_template.jinja beside it, which vLLM loads too) gives exactly the ids vLLM's own chat rendering
/// gives (`/tokenize` with `messages`: the code path of `/v1/chat/completions`) for chats of every shape
/// it renders, the first time and again with the tokenized pieces remembered (src/kvcache/segments.rs),
/// and leaves to render what it cannot render exactly.
pub(crate) async fn in_process_chat_tokens_are_vllms(fleet: &VllmFleet, client: &reqwest::Client) {
    let model = manifest_dir().join(".vllm-model");
    let tokenizer =
        epp::kvcache::LocalTokenizer::load(&model.join("tokenizer.json")).expect("tokenizer loads");
    let template = epp::kvcache::ChatTemplate::load(&model.join("tokenizer_config.json"), None)
        .expect("the model's chat template loads");
    assert!(tokenizer.remembers_pieces(), "SmolLM2's byte-level BPE splits exactly at its special tokens");
    assert!(tokenizer.remembers_words(), "SmolLM2's pieces are split and remembered word by word");
    let long = "Summarise this, please. ".repeat(200);
    let chats = [
        json!({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello, world!"}]}),
        json!({"messages": [{"role": "user", "content": "  leading spaces, émojis 🍜 and ünïcödé\n\tnew lines"},
            {"role": "assistant", "content": "Noted."}, {"role": "user", "content": long}]}),
        json!({"messages": [{"role": "user", "content": "no generation prompt"}], "add_generation_prompt": false}),
        json!({"messages": [{"role": "user", "content": "It's 2026-12-07; we've 3,141 items -- DON'T\r\n   x=y+1  \n\n\u{a0}l'été 中文   "}]}),
        json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}]}]}),
        json!({"messages": [{"role": "user", "content": "named", "name": "ann"}], "temperature": 0.5, "stream": true}),
    ];
    for chat in &chats {
        let mut body = chat.clone();
        body["model"] = json!(MODEL);
        let started = std::time::Instant::now();
        let rendered = template.render(body.to_string().as_bytes()).expect("renders");
        let epp::kvcache::ChatPrompt::Text(text) = rendered else {
            panic!("{chat} was left to render: {rendered:?}")
        };
        let ours = tokenizer.encode_rendered(&text).expect("encodes");
        let in_process = started.elapsed();
        let again = tokenizer.encode_rendered(&text).expect("encodes");
        assert_eq!(again, ours, "the remembered pieces give the same ids for {chat}");
        let started = std::time::Instant::now();
        let vllm = vllm_tokens(fleet, client, &body).await;
        let round_trip = started.elapsed();
        assert_eq!(ours, vllm, "in-process chat tokens differ from vLLM's for {chat}");
        eprintln!(
            "FIGURE chat tokens: {} tokens equal; in process {in_process:?} (a debug build), vLLM round trip {round_trip:?}",
            ours.len()
        );
    }
    let tools = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": []});
    let left = template.render(tools.to_string().as_bytes()).expect("renders");
    assert_eq!(left, epp::kvcache::ChatPrompt::NeedsRender("tools"));
}

/// The token ids the first replica's `/tokenize` gives for `body`: a `prompt` (special tokens included)
/// or chat `messages` (rendered with the model's template).
async fn vllm_tokens(fleet: &VllmFleet, client: &reqwest::Client, body: &Value) -> Vec<u32> {
    let url = format!("http://{}/tokenize", fleet.replicas[0].address());
    let answer = read_json(post_json(client, &url, body).await).await;
    answer["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("/tokenize: {answer}"))
        .iter()
        .filter_map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
        .collect()
}
