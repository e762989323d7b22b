//! Precise prefix-cache routing end to end, with config/precise-prefix.yaml: client → a real Envoy → epp (`token-producer` asking the
//! engine's render endpoint for token ids, `precise-prefix-cache-producer` subscribed to every engine's
//! KV events over ZMQ) → two `epp-sim` replicas, each on its own loopback address as pods are, publishing
//! vLLM-format KV events on the same port (llm-d's `socketPort`).
//!
//! What it proves: a request whose prompt shares a prefix with one the engines already cached goes to the
//! engine that holds it, because that engine said so, not because epp remembers sending it there. So a
//! second epp replica, which routed none of the traffic, routes the same way as the one that did: the
//! property approximate prefix routing lacks (llm-d's reason to tell users not to run active-active
//! EPPs). Every wait polls epp's metrics under one generous deadline; nothing is timed. Without Envoy the
//! test fails (`EPP_SKIP_MISSING_TOOLS=1` skips it, printing SKIP, outside CI).
//!
//! The simulator stands in for vLLM here (the real vLLM publisher is in `make test-vllm`): it publishes
//! what its own prefix cache does, in vLLM's encoding; what it does not model is vLLM's hybrid-allocator
//! groups and CPU offloading, which would add events of other media and groups.

use std::time::Duration;

use epp_testkit::*;
use serde_json::json;

const MODEL: &str = "precise-model";
/// Each pod's address: both serve on their own port, and publish KV events on one shared port.
const PODS_AT: [&str; 2] = ["127.0.0.5", "127.0.0.6"];

/// A pod at `ip` publishing KV events on the first of `kv_ports` and replaying on the second (none without
/// them), with `num_gpu_blocks` KV blocks of 16 tokens (the profile's default when `None`).
fn sim_pod(ip: &str, kv_ports: Option<(u16, u16)>, num_gpu_blocks: Option<usize>) -> SimPod {
    let mut options = epp_sim::ServeOptions::new(MODEL);
    options.num_gpu_blocks = num_gpu_blocks;
    options.host = ip.to_string();
    // A handed-out port, not 0: the kernel's pick for port 0 on this address could be the KV-event port
    // handed out below but not bound yet, and the publisher's bind would then fail (address in use).
    options.port = free_port();
    options.name_prefix = ip.to_string();
    options.time_scale = 20.0;
    options.kv_events_port = kv_ports.map(|(events, _)| events);
    options.kv_replay_port = kv_ports.map(|(_, replay)| replay);
    SimPod::start(options)
}

/// config/precise-prefix.yaml, pointed at the simulators' render endpoint and KV-event port.
fn config(render_url: &str, socket_port: u16, replay_port: u16) -> String {
    let shipped = include_str!("../config/precise-prefix.yaml");
    for placeholder in ["http://render:8000", " socketPort: 5557", "replaySocketPort: 5558"] {
        assert!(shipped.contains(placeholder), "{placeholder} is not in {shipped}");
    }
    shipped
        .replace("http://render:8000", render_url)
        .replace(" socketPort: 5557", &format!(" socketPort: {socket_port}"))
        .replace("replaySocketPort: 5558", &format!("replaySocketPort: {replay_port}"))
        .replace("meta-llama/Llama-3.1-8B-Instruct", MODEL)
}

fn metric(epp: &Epp, name: &str) -> f64 {
    metric_sum(&epp.metrics_text(), name, &[]).unwrap_or(0.0)
}

/// A chat request: a shared system prompt long enough for many blocks, and a question of its own.
fn chat(system: &str, question: &str) -> serde_json::Value {
    json!({"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": question}]})
}

/// Sends `body` through Envoy; the pod that served it (`x-sim-replica`, named after its IP).
async fn served_by(client: &reqwest::Client, url: &str, body: &serde_json::Value) -> String {
    let response = post_json(client, url, body).await;
    assert_eq!(response.status(), 200, "{}", read_text(response).await);
    let pod = header(&response, "x-sim-replica").expect("x-sim-replica");
    pod.rsplit_once('-').map_or(pod.clone(), |(ip, _)| ip.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_prefixes_go_where_the_engines_say_they_are_from_either_epp() {
    let (kv_port, replay_port) = (free_port(), free_port());
    let pods: Vec<SimPod> =
        PODS_AT.iter().map(|ip| sim_pod(ip, Some((kv_port, replay_port)), None)).collect();
    let endpoints = pods.iter().map(|p| p.addr.to_string()).collect::<Vec<_>>().join(",");
    let render = format!("http://{}", pods[0].addr);
    let config = format!("--config-text={}", config(&render, kv_port, replay_port));
    let template = "envoy-full-duplex.yaml";
    let test = "shared_prefixes_go_where_the_engines_say_they_are_from_either_epp";
    let args = [config.as_str(), "--enable-route-probe"];
    let Some(first) = start_epp_behind_envoy(test, template, &endpoints, &args, &[]) else { return };
    let Some(mut second) = start_epp_behind_envoy(test, template, &endpoints, &[&config], &[]) else {
        return;
    };
    let subscribed = |epp: &Epp| metric(epp, "llm_d_epp_kv_cache_events_active_subscribers") == 2.0;
    assert!(wait_until(Duration::from_secs(30), || subscribed(&first.epp) && subscribed(&second.epp)));

    let client = http_client();
    let url = first.url("/v1/chat/completions");
    let system = "You review restaurants for a food guide. ".repeat(40);
    let home = served_by(&client, &url, &chat(&system, "first question")).await;
    // The engine's events reach both epps (each subscribes to every pod) a moment after the request.
    let indexed = |epp: &Epp| metric(epp, "llm_d_epp_kv_cache_index_admissions_total") >= 20.0;
    assert!(
        wait_until(Duration::from_secs(30), || indexed(&first.epp) && indexed(&second.epp)),
        "the engines' KV events never reached both epps:\n{}",
        first.epp.metrics_text()
    );
    // Six requests: a router blind to the cache would send all six of the second epp's to one pod 1 time in 32.
    let routes_home = |epp_url: String, home: String| {
        let client = client.clone();
        let system = system.clone();
        async move {
            for n in 0..6 {
                let question = format!("question {n}: which dish?");
                assert_eq!(served_by(&client, &epp_url, &chat(&system, &question)).await, home, "{epp_url}");
            }
        }
    };
    routes_home(url.clone(), home.clone()).await;
    routes_home(second.url("/v1/chat/completions"), home.clone()).await;
    for epp in [&first.epp, &second.epp] {
        assert_eq!(metric(epp, "epp_token_producer_failures_total"), 0.0, "every request had its token ids");
        assert!(metric(epp, "llm_d_epp_kv_cache_index_lookup_hits_total") >= 6.0);
        assert_eq!(metric(epp, "epp_kv_cache_events_malformed_total"), 0.0);
    }

    // The route probe tokenizes as the request path does, so it explains the precise match.
    let probe_url = format!("http://127.0.0.1:{}/debug/route/v1/chat/completions", first.epp.metrics_port);
    let probe = read_json(post_json(&client, &probe_url, &chat(&system, "a probe's question")).await).await;
    let home_address = pods.iter().map(|p| p.addr.to_string()).find(|a| a.starts_with(&home)).expect("home");
    for pod in &pods {
        let address = pod.addr.to_string();
        let matched = probe_candidate(&probe, &address).map(|c| c["prefix_match_blocks"].as_u64());
        let expect_match = address == home_address;
        assert_eq!(matched.flatten().is_some_and(|blocks| blocks > 0), expect_match, "{address}: {probe}");
    }
    assert_eq!(probe["pick"]["address"], home_address.as_str(), "{probe}");
    // Each routed request's tokenization is timed as the producer's PrepareData (as llm-d times its
    // tokenizer); the probe's is not, as it counts in no other family.
    let producer = [("extension_point", "PrepareData"), ("plugin_type", "token-producer")];
    let timed = metric_sum(&first.epp.metrics_text(), "llm_d_epp_plugin_duration_seconds_count", &producer);
    assert_eq!(
        timed,
        Some(metric(&first.epp, "epp_token_producer_requests_total")),
        "{}",
        first.epp.metrics_text()
    );

    // A restarted epp has heard no live event since, yet routes the same way: its subscribers replayed
    // the engines' buffers on connecting.
    second.epp.restart();
    assert!(
        wait_until(Duration::from_secs(30), || subscribed(&second.epp) && indexed(&second.epp)),
        "the restarted epp never replayed the engines' events:\n{}",
        second.epp.metrics_text()
    );
    assert!(metric(&second.epp, "epp_kv_cache_events_replays_total") >= 2.0);
    routes_home(second.url("/v1/chat/completions"), home.clone()).await;
}

/// The probe's prefix match for `body` on each pod, in `pods` order (0 where it shows none).
async fn probed_matches(
    client: &reqwest::Client,
    epp: &Epp,
    pods: &[SimPod],
    body: &serde_json::Value,
) -> Vec<u64> {
    let url = format!("http://127.0.0.1:{}/debug/route/v1/chat/completions", epp.metrics_port);
    let probe = read_json(post_json(client, &url, body).await).await;
    let matched =
        |pod: &SimPod| probe_candidate(&probe, &pod.addr.to_string())?["prefix_match_blocks"].as_u64();
    pods.iter().map(|pod| matched(pod).unwrap_or(0)).collect()
}

/// Both pods cached a conversation's system prompt (requests sent to them directly, which epp never
/// routed); then one evicts it under other traffic (a small KV cache). The engine's `BlockRemoved`
/// events tell epp, so the conversation goes to the pod that still holds it: what approximate routing,
/// which saw none of this traffic, cannot know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_one_engine_evicted_goes_to_the_engine_still_holding_it() {
    const EVICTING_AT: [&str; 2] = ["127.0.0.7", "127.0.0.8"];
    let (kv_port, replay_port) = (free_port(), free_port());
    // 100 blocks of 16 tokens: the system prompt takes about a quarter, each flood prompt three quarters.
    let pods: Vec<SimPod> =
        EVICTING_AT.iter().map(|ip| sim_pod(ip, Some((kv_port, replay_port)), Some(100))).collect();
    let endpoints = pods.iter().map(|p| p.addr.to_string()).collect::<Vec<_>>().join(",");
    let config =
        format!("--config-text={}", config(&format!("http://{}", pods[0].addr), kv_port, replay_port));
    let test = "a_prefix_one_engine_evicted_goes_to_the_engine_still_holding_it";
    let args = [config.as_str(), "--enable-route-probe"];
    let Some(stack) = start_epp_behind_envoy(test, "envoy-full-duplex.yaml", &endpoints, &args, &[]) else {
        return;
    };
    let client = http_client();
    let system = "You review restaurants for a food guide. ".repeat(40);
    let direct = |pod: &SimPod| format!("http://{}/v1/chat/completions", pod.addr);
    for pod in &pods {
        let response = post_json(&client, &direct(pod), &chat(&system, "warm-up")).await;
        assert_eq!(response.status(), 200, "{}", read_text(response).await);
    }
    let probe_body = chat(&system, "which dish?");
    let both = wait_until_async(Duration::from_secs(30), || {
        let fetch = probed_matches(&client, &stack.epp, &pods, &probe_body);
        async { fetch.await.iter().all(|&blocks| blocks > 0) }
    })
    .await;
    assert!(both, "both pods' events should show the prompt cached");
    // Pod 1 serves other long prompts until the system prompt's blocks are reused.
    for n in 0..3 {
        let flood = chat(&format!("Unrelated document {n}: ").repeat(150), "summarise");
        let response = post_json(&client, &direct(&pods[1]), &flood).await;
        assert_eq!(response.status(), 200, "{}", read_text(response).await);
    }
    let evicted = wait_until_async(Duration::from_secs(30), || {
        let fetch = probed_matches(&client, &stack.epp, &pods, &probe_body);
        async { matches!(fetch.await.as_slice(), [held, 0] if *held > 0) }
    })
    .await;
    let matches = probed_matches(&client, &stack.epp, &pods, &probe_body).await;
    assert!(evicted, "pod 1's evictions should have reached epp, and pod 0 still hold it: {matches:?}");
    let holder = pods[0].addr.ip().to_string();
    for n in 0..6 {
        let body = chat(&system, &format!("question {n}"));
        assert_eq!(served_by(&client, &stack.url("/v1/chat/completions"), &body).await, holder);
    }
    assert!(metric(&stack.epp, "llm_d_epp_kv_cache_index_evictions_total") > 0.0);
}

/// Two epps behind their own Envoys, sharing their speculative entries (`speculativePeers`), in front of
/// two pods that publish no KV events: all the second epp can know of where the first sent a prompt is
/// what the first told it. Each of six prompts the first epp placed goes to the same pod from the second;
/// a router without that knowledge would match all six by chance 1 time in 64. The TTL is a minute so
/// that no wait here races it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_peers_a_second_epp_sends_a_prompt_where_the_first_placed_it() {
    const SILENT_AT: [&str; 2] = ["127.0.0.9", "127.0.0.10"];
    let pods: Vec<SimPod> = SILENT_AT.iter().map(|ip| sim_pod(ip, None, None)).collect();
    let endpoints = pods.iter().map(|p| p.addr.to_string()).collect::<Vec<_>>().join(",");
    // Nothing publishes on these ports: the subscribers never connect.
    let (kv_port, replay_port) = (free_port(), free_port());
    let (peer_a, peer_b) = (free_port(), free_port());
    let with_peers = |own: u16, other: u16| {
        let shipped = config(&format!("http://{}", pods[0].addr), kv_port, replay_port);
        let peers = format!(
            "speculativeIndexing: true\n    speculativeTTL: 60s\n    speculativePeers:\n      \
             listen: \"127.0.0.1:{own}\"\n      peers: [\"127.0.0.1:{other}\"]"
        );
        format!("--config-text={}", shipped.replacen("speculativeIndexing: true", &peers, 1))
    };
    let (config_a, config_b) = (with_peers(peer_a, peer_b), with_peers(peer_b, peer_a));
    let test = "with_peers_a_second_epp_sends_a_prompt_where_the_first_placed_it";
    let template = "envoy-full-duplex.yaml";
    let Some(first) = start_epp_behind_envoy(test, template, &endpoints, &[&config_a], &[]) else { return };
    let Some(second) = start_epp_behind_envoy(test, template, &endpoints, &[&config_b], &[]) else { return };

    let client = http_client();
    let system = |n: usize| format!("Guide {n}: you review restaurants for a food guide. ").repeat(30);
    let mut homes = Vec::new();
    for n in 0..6 {
        homes.push(served_by(&client, &first.url("/v1/chat/completions"), &chat(&system(n), "first")).await);
    }
    // Six placements and six first tokens.
    let heard = wait_until(Duration::from_secs(30), || {
        metric(&second.epp, "epp_kv_cache_peer_messages_received_total") >= 12.0
    });
    assert!(heard, "the first epp's placements never reached the second:\n{}", second.epp.metrics_text());
    for (n, home) in homes.iter().enumerate() {
        let body = chat(&system(n), "second");
        assert_eq!(&served_by(&client, &second.url("/v1/chat/completions"), &body).await, home, "prompt {n}");
    }
    assert_eq!(metric(&second.epp, "llm_d_epp_kv_cache_index_admissions_total"), 0.0, "no engine spoke");
    assert_eq!(metric(&second.epp, "epp_kv_cache_peer_messages_dropped_total"), 0.0);
    assert!(metric(&first.epp, "epp_kv_cache_peer_messages_sent_total") >= 12.0);
}
