//! Prefill/decode disaggregation end to end: client → Envoy → epp (llm-d's P/D guide configuration,
//! unchanged) → the decode pod's `epp-pd-sidecar` → epp-sim replicas playing the prefill and decode
//! engines (vLLM's NIXL handoff over HTTP, crates/sim/src/pd.rs).
//!
//! Each pod has its own loopback address. Prefill pods are epp-sim replicas; a decode pod is a sidecar
//! (the pool's target port) in front of an epp-sim replica. epp and the sidecars read one endpoints file,
//! which labels each pod's `llm-d.ai/role` and is the sidecars' allow-list. What a real pair would add: the
//! KV transfer over NIXL itself (epp-sim only waits its modelled time) and GPU memory pressure.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use epp_sim::ServeOptions;
use epp_testkit::*;
use serde_json::{json, Value};

const GUIDE: &str = "config/pd-disaggregation.yaml";
const MODEL: &str = "sim-model";

fn sim(ip: &str) -> SimPod {
    let mut options = ServeOptions::new(MODEL);
    options.host = ip.to_string();
    (options.time_scale, options.noise, options.prompt_tokens_details) = (20.0, Some(0.0), true);
    SimPod::start(options)
}

/// A decode pod: its engine, and the sidecar in front of it on `ip`.
struct DecodePod {
    engine: SimPod,
    sidecar: ChildGuard,
    addr: SocketAddr,
}

fn decode_pod(ip: &str, endpoints_file: &std::path::Path) -> DecodePod {
    let engine = sim(ip);
    // A handed-out port can be taken before the sidecar binds it (a parallel test's engine binding port 0
    // on the same address): then the sidecar exits, and it starts again on another port.
    for _ in 0..5 {
        let port = free_port();
        let mut command = Command::new(workspace_bin("epp-pd-sidecar"));
        command.args([
            "--port",
            &port.to_string(),
            "--model-server-host",
            ip,
            "--model-server-port",
            &engine.addr.port().to_string(),
            "--secure-proxy=false",
            "--endpoints-file",
            endpoints_file.to_str().unwrap_or_default(),
            "--endpoints-file-poll",
            "200ms",
            "--prefill-timeout",
            "10s",
        ]);
        let dir = tempfile::Builder::new().prefix("epp-pd-sidecar-").tempdir().expect("tempdir");
        let mut sidecar = ChildGuard::spawn("epp-pd-sidecar", command, dir);
        if sidecar.wait_listening_unless_taken(SocketAddr::from(([127, 0, 0, 1], port))) {
            let addr = format!("{ip}:{port}").parse().expect("address");
            return DecodePod { engine, sidecar, addr };
        }
    }
    panic!("epp-pd-sidecar found its port taken five times in a row");
}

/// The pool: prefill pods then decode pods, labelled, in llm-d's file-discovery format.
fn endpoints_yaml(prefill: &[SocketAddr], decode: &[SocketAddr]) -> String {
    let entry = |name: String, addr: &SocketAddr, role: &str| {
        format!(
            "- {{name: {name}, address: \"{}\", port: \"{}\", labels: {{llm-d.ai/role: {role}}}}}\n",
            addr.ip(),
            addr.port()
        )
    };
    let mut out = String::from("endpoints:\n");
    for (i, a) in prefill.iter().enumerate() {
        out.push_str(&entry(format!("prefill-{i}"), a, "prefill"));
    }
    for (i, a) in decode.iter().enumerate() {
        out.push_str(&entry(format!("decode-{i}"), a, "decode"));
    }
    out
}

struct PdStack {
    prefill: Vec<SimPod>,
    decode: Vec<DecodePod>,
    epp: Epp,
    envoy: Envoy,
    _dir: tempfile::TempDir,
}

/// Two prefill pods, two decode pods, epp with `config_file` behind Envoy.
fn pd_stack(test: &str, config_file: &std::path::Path) -> Option<PdStack> {
    envoy_or_skip(test)?;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("endpoints.yaml");
    let prefill = vec![sim("127.0.0.31"), sim("127.0.0.32")];
    let prefill_addrs: Vec<SocketAddr> = prefill.iter().map(|p| p.addr).collect();
    // The sidecars need the file at start; their own addresses are added once their ports are known.
    std::fs::write(&file, endpoints_yaml(&prefill_addrs, &[])).expect("write endpoints");
    let decode = vec![decode_pod("127.0.0.41", &file), decode_pod("127.0.0.42", &file)];
    let decode_addrs: Vec<SocketAddr> = decode.iter().map(|d| d.addr).collect();
    std::fs::write(&file, endpoints_yaml(&prefill_addrs, &decode_addrs)).expect("write endpoints");
    let (file_arg, config_arg) =
        (file.to_str().unwrap_or_default(), config_file.to_str().unwrap_or_default());
    let args = ["--endpoints-file", file_arg, "--config-file", config_arg];
    let epp = start_epp_on_free_ports(&args, &[]);
    let vars = [("EXTPROC_PORT", epp.grpc_port.to_string()), ("HEALTH_PORT", epp.health_port.to_string())];
    let envoy = start_envoy_on_free_ports("envoy-full-duplex.yaml", &vars);
    Some(PdStack { prefill, decode, epp, envoy, _dir: dir })
}

fn chat(prompt: &str, stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4, "stream": stream,
           "stream_options": {"include_usage": true}})
}

/// Requests each pod's engine finished, from its own /metrics.
async fn served(client: &reqwest::Client, addr: SocketAddr) -> f64 {
    let page = read_text(get(client, &format!("http://{addr}/metrics")).await).await;
    metric_sum(&page, "vllm:request_success_total", &[]).unwrap_or(0.0)
}

fn sidecar_count(client_page: &str, route: &str, outcome: &str) -> f64 {
    metric_sample(client_page, "epp_pd_sidecar_requests_total", &[("route", route), ("outcome", outcome)])
        .unwrap_or(0.0)
}

async fn sidecar_metrics(client: &reqwest::Client, pod: &DecodePod) -> String {
    read_text(get(client, &format!("http://{}/pd-sidecar/metrics", pod.addr)).await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_config_disaggregates_through_envoy_and_the_sidecar() {
    let test = "the_guide_config_disaggregates_through_envoy_and_the_sidecar";
    let config = manifest_dir().join(GUIDE);
    let Some(stack) = pd_stack(test, &config) else { return };
    let client = http_client();
    let url = stack.envoy.url("/v1/chat/completions");

    for (n, stream) in [(0, false), (1, true), (2, false), (3, true)] {
        let prompt = format!("request {n}: {}", "a long document to prefill elsewhere ".repeat(40));
        let headers = [("content-type", "application/json"), ("x-prefiller-host-port", "169.254.169.254:80")];
        let response =
            post_raw(&client, &url, chat(&prompt, stream).to_string().into_bytes(), &headers).await;
        let status = response.status().as_u16();
        let body = read_text(response).await;
        assert_eq!(status, 200, "request {n}: {body}");
        let usage = usage_object(&body, stream)["usage"].clone();
        assert_eq!(usage["completion_tokens"], json!(4), "{body}");
        assert!(usage["prompt_tokens_details"]["cached_tokens"].is_number(), "the prefill's count: {body}");
    }

    let prefilled: f64 =
        futures::future::join_all(stack.prefill.iter().map(|p| served(&client, p.addr))).await.iter().sum();
    assert_eq!(
        prefilled, 4.0,
        "every request prefilled on a prefill pod (the forged header was overwritten)"
    );
    let mut disaggregated = 0.0;
    for pod in &stack.decode {
        disaggregated += sidecar_count(&sidecar_metrics(&client, pod).await, "disaggregated", "ok");
    }
    assert_eq!(disaggregated, 4.0);
    let page = stack.epp.metrics_text();
    let decisions =
        metric_sample(&page, "llm_d_epp_pd_decision_total", &[("decision_type", "prefill-decode")]);
    assert_eq!(decisions, Some(4.0), "{page}");
    wait_for_gauges_zero(
        || stack.epp.metrics_text(),
        &["llm_d_epp_inflight_requests", "llm_d_epp_inflight_tokens"],
    )
    .await
    .unwrap_or_else(|left| panic!("in-flight load left after completions: {left:?}"));
    drop(stack.envoy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_prefill_pod_costs_a_bounded_clear_error_and_leaves_no_load() {
    let test = "a_dead_prefill_pod_costs_a_bounded_clear_error_and_leaves_no_load";
    let config = manifest_dir().join(GUIDE);
    let Some(mut stack) = pd_stack(test, &config) else { return };
    let client = http_client();
    let url = stack.envoy.url("/v1/chat/completions");
    // A client that leaves mid-stream: both legs' load must still be released.
    let mut long = chat("a client that will not wait for the end", true);
    long["max_tokens"] = json!(5000);
    let mut response = post_json(&client, &url, &long).await;
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.chunk().await.ok().flatten().is_some(), "the stream started");
    drop(response);
    for pod in &mut stack.prefill {
        pod.kill();
    }
    let started = Instant::now();
    let response = post_json(&client, &url, &chat("hello after the prefill pods died", false)).await;
    let (status, code) = (response.status().as_u16(), header(&response, "x-pd-sidecar-error"));
    let body = read_text(response).await;
    let waited = started.elapsed();
    eprintln!("dead prefill pod: answered {status} after {waited:?}");
    assert_eq!((status, code.as_deref()), (502, Some("prefill_upstream_unavailable")), "{body}");
    assert!(body.contains("could not be reached"), "{body}");
    assert!(waited < Duration::from_secs(30), "bounded: {waited:?}");
    // A killed decode engine: its sidecar says so.
    stack.decode[0].engine.kill();
    stack.decode[1].engine.kill();
    let response = post_json(&client, &url, &chat("and now the decode engines", false)).await;
    assert_eq!(response.status().as_u16(), 502);
    wait_for_gauges_zero(
        || stack.epp.metrics_text(),
        &["llm_d_epp_inflight_requests", "llm_d_epp_inflight_tokens"],
    )
    .await
    .unwrap_or_else(|left| panic!("in-flight load left after failures: {left:?}"));
    let _ = &stack.decode[0].sidecar;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_based_decider_keeps_short_prompts_on_the_decode_pod() {
    let test = "the_prefix_based_decider_keeps_short_prompts_on_the_decode_pod";
    let guide = std::fs::read_to_string(manifest_dir().join(GUIDE)).expect("guide config");
    let config = guide
        .replace(
            "- type: always-disagg-pd-decider",
            "- type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 256",
        )
        .replace("prefill: always-disagg-pd-decider", "prefill: prefix-based-pd-decider");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pd-prefix.yaml");
    std::fs::write(&path, config).expect("write config");
    let Some(stack) = pd_stack(test, &path) else { return };
    let client = http_client();
    let url = stack.envoy.url("/v1/chat/completions");
    // A short prompt stays on the decode pod, and a client's own prefiller never reaches its sidecar
    // (which would otherwise call it, or refuse it as not allow-listed).
    let forged = [("content-type", "application/json"), ("x-prefiller-host-port", "169.254.169.254:80")];
    let body = chat("short", false).to_string().into_bytes();
    let response = post_raw(&client, &url, body, &forged).await;
    assert_eq!(response.status().as_u16(), 200, "{}", read_text(response).await);
    let long = "a long prompt that is worth prefilling on its own pod ".repeat(60);
    let response = post_json(&client, &url, &chat(&long, false)).await;
    assert_eq!(response.status().as_u16(), 200, "{}", read_text(response).await);
    let page = stack.epp.metrics_text();
    let count = |d: &str| metric_sample(&page, "llm_d_epp_pd_decision_total", &[("decision_type", d)]);
    assert_eq!((count("decode-only"), count("prefill-decode")), (Some(1.0), Some(1.0)), "{page}");
    let mut local = 0.0;
    for pod in &stack.decode {
        local += sidecar_count(&sidecar_metrics(&client, pod).await, "local", "ok");
    }
    assert_eq!(local, 1.0, "the short prompt was decoded where it was prefilled");
}
