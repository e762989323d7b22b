//! The sidecar over loopback between a client and two scripted engines.
//!
//! The engines are fakes: a real P/D pair needs vLLM with the NIXL connector on GPUs, which these machines
//! lack. What they stand in for is the contract (llm-d/llm-d-router:pkg/sidecar/proxy/connector_nixlv2.go):
//! a prefill engine answers a one-token, non-streamed request with `kv_transfer_params`; a decode engine
//! takes them back. A real pair would also show the KV transfer itself (its time, a stale NIXL agent after
//! a restart), which the fakes do not; epp-sim's P/D mode is where transfer time is modelled.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;
use epp_pd_sidecar::prefiller::AllowList;
use epp_pd_sidecar::proxy::{Settings, Sidecar};
use serde_json::{json, Value};

/// One request an engine saw: path, headers, JSON body.
type SeenRequest = (String, Vec<(String, String)>, Value);

/// What a scripted engine saw.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<SeenRequest>>,
    /// Handlers whose future was dropped before they answered (the caller went away).
    abandoned: AtomicUsize,
    calls: AtomicUsize,
}

#[derive(Clone, Copy)]
enum Script {
    /// Prefill: answers the handoff.
    Prefill,
    /// Prefill that fails, quoting the prompt in its error body.
    PrefillFails,
    /// Never answers.
    Hang,
    /// Decode: streams three events with usage, or answers JSON, as asked.
    Decode,
}

struct Abandon<'a>(&'a Seen, bool);
impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn engine(State((script, seen)): State<(Script, Arc<Seen>)>, req: Request) -> Response {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    let mut guard = Abandon(&seen, false);
    let path = req.uri().path().to_string();
    let headers =
        req.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string())).collect();
    let bytes = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    seen.requests.lock().unwrap().push((path.clone(), headers, body.clone()));
    let json_response = |status: u16, v: Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(v.to_string()))
            .unwrap()
    };
    let response = match script {
        Script::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json_response(200, json!({}))
        }
        Script::PrefillFails => {
            json_response(500, json!({"error": format!("failed on prompt {}", body["messages"])}))
        }
        Script::Prefill => json_response(
            200,
            json!({
                "choices": [{"message": {"content": "x"}}],
                "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "prefill-1",
                    "remote_block_ids": [[1, 2, 3]], "remote_host": "10.0.0.1", "remote_port": 5600, "tp_size": 1},
                "usage": {"prompt_tokens": 48, "prompt_tokens_details": {"cached_tokens": 16}}
            }),
        ),
        Script::Decode if path == "/metrics" => json_response(200, json!({"engine": "metrics"})),
        Script::Decode if body["stream"] == json!(true) => {
            let usage = json!({"choices": [], "usage": {"prompt_tokens": 48, "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 48}}});
            let sse = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"hi\"}}}}],\"usage\":null}}\n\ndata: {usage}\n\ndata: [DONE]\n\n");
            Response::builder().header("content-type", "text/event-stream").body(Body::from(sse)).unwrap()
        }
        Script::Decode => json_response(
            200,
            json!({"choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 48, "prompt_tokens_details": {"cached_tokens": 48}}}),
        ),
    };
    guard.1 = true;
    response
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

async fn start_engine(script: Script) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let router = Router::new().fallback(engine).with_state((script, seen.clone()));
    (serve(router).await, seen)
}

/// The tests' sidecar: short timeouts (the prefill leg 500 ms), small bodies.
fn settings(engine: SocketAddr, allow: AllowList) -> Settings {
    Settings {
        engine_url: format!("http://{engine}"),
        allow,
        connect_timeout: Duration::from_secs(2),
        prefill_timeout: Duration::from_millis(500),
        decode_timeout: Duration::from_secs(5),
        prefill_max_retries: 0,
        prefill_retry_backoff: Duration::from_millis(10),
        max_body_bytes: 1 << 16,
    }
}

struct Rig {
    sidecar: SocketAddr,
    prefill: SocketAddr,
    /// A pod in the allow-list that nothing listens on.
    dead: SocketAddr,
    prefill_seen: Arc<Seen>,
    decode_seen: Arc<Seen>,
    client: reqwest::Client,
}

async fn rig(prefill_script: Script) -> Rig {
    let (prefill, prefill_seen) = start_engine(prefill_script).await;
    let (decode, decode_seen) = start_engine(Script::Decode).await;
    // A port nothing listens on: a dead prefill pod (bound, then dropped).
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let settings = settings(decode, AllowList::members([prefill, dead]));
    let sidecar = serve(Sidecar::new(settings).unwrap().router()).await;
    Rig {
        sidecar,
        prefill,
        dead,
        prefill_seen,
        decode_seen,
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
    }
}

impl Rig {
    async fn chat(&self, prefiller: Option<&str>, stream: bool) -> reqwest::Response {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "secret prompt"}],
            "stream": stream, "max_tokens": 50, "stream_options": {"include_usage": true}});
        let url = format!("http://{}/v1/chat/completions", self.sidecar);
        let mut req = self.client.post(url).header("content-type", "application/json").body(body.to_string());
        if let Some(p) = prefiller {
            req = req.header("x-prefiller-host-port", p);
        }
        req.header("x-request-id", "client-id").send().await.unwrap()
    }

    async fn metrics(&self) -> String {
        let url = format!("http://{}/pd-sidecar/metrics", self.sidecar);
        self.client.get(url).send().await.unwrap().text().await.unwrap()
    }
}

async fn json_of(response: reqwest::Response) -> Value {
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_disaggregated_stream_prefills_remotely_then_decodes_with_the_handoff() {
    let r = rig(Script::Prefill).await;
    let response = r.chat(Some(&r.prefill.to_string()), true).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("\"cached_tokens\":16"), "usage reports the prefill's hit: {text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");

    let prefill = r.prefill_seen.requests.lock().unwrap().clone();
    let decode = r.decode_seen.requests.lock().unwrap().clone();
    let ((_, p_headers, p), (_, d_headers, d)) = (&prefill[0], &decode[0]);
    assert_eq!((p["max_tokens"].clone(), p["stream"].clone()), (json!(1), json!(false)));
    assert!(p.get("stream_options").is_none());
    assert_eq!(p["kv_transfer_params"]["do_remote_decode"], json!(true));
    assert_eq!((d["max_tokens"].clone(), d["stream"].clone()), (json!(50), json!(true)));
    assert_eq!(d["kv_transfer_params"]["remote_engine_id"], json!("prefill-1"));
    assert_eq!(d["kv_transfer_params"]["tp_size"], json!(1), "handed over verbatim");
    for h in [p_headers, d_headers] {
        assert_eq!(header(h, "x-prefiller-host-port"), None, "never passed to an engine");
        assert_ne!(header(h, "x-request-id"), Some("client-id"), "a fresh id per P/D request");
    }
    assert_eq!(header(p_headers, "x-request-id"), header(d_headers, "x-request-id"));
    assert!(r
        .metrics()
        .await
        .contains("epp_pd_sidecar_requests_total{route=\"disaggregated\",outcome=\"ok\"} 1"));
}

#[tokio::test]
async fn a_json_answer_reports_the_prefill_hit_and_requests_without_a_prefiller_stay_local() {
    let r = rig(Script::Prefill).await;
    let answer = json_of(r.chat(Some(&r.prefill.to_string()), false).await).await;
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], json!(16));
    let local = json_of(r.chat(None, false).await).await;
    assert_eq!(local["usage"]["prompt_tokens_details"]["cached_tokens"], json!(48), "untouched");
    assert_eq!(
        r.prefill_seen.calls.load(Ordering::SeqCst),
        1,
        "only the disaggregated request prefilled remotely"
    );
    let engine_metrics = r.client.get(format!("http://{}/metrics", r.sidecar)).send().await.unwrap();
    assert_eq!(json_of(engine_metrics).await, json!({"engine": "metrics"}), "/metrics is the engine's");
    let health = r.client.get(format!("http://{}/health", r.sidecar)).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let code =
        response.headers().get("x-pd-sidecar-error").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    (status, code, response.text().await.unwrap())
}

#[tokio::test]
async fn forged_and_malformed_prefillers_are_refused_before_anyone_is_called() {
    let r = rig(Script::Prefill).await;
    let (status, code, body) = error_of(r.chat(Some("169.254.169.254:80"), false).await).await;
    assert_eq!((status, code.as_str()), (502, "prefiller_not_allowed"));
    assert!(body.contains("169.254.169.254:80"), "{body}");
    for bad in ["", "pod-a:8000", &format!("{0},{0}", r.prefill)] {
        let (status, code, _) = error_of(r.chat(Some(bad), false).await).await;
        assert_eq!((status, code.as_str()), (502, "invalid_epp_metadata"), "{bad:?}");
    }
    assert_eq!(r.prefill_seen.calls.load(Ordering::SeqCst) + r.decode_seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_dead_failing_or_hung_prefill_pod_is_a_bounded_clear_error_that_quotes_nothing() {
    let r = rig(Script::PrefillFails).await;
    let (status, code, body) = error_of(r.chat(Some(&r.prefill.to_string()), false).await).await;
    assert_eq!((status, code.as_str()), (502, "prefill_upstream_error"));
    assert!(!body.contains("secret"), "the prefill's error body is not relayed: {body}");

    let started = Instant::now();
    let (status, code, _) = error_of(r.chat(Some(&r.dead.to_string()), false).await).await;
    assert_eq!((status, code.as_str()), (502, "prefill_upstream_unavailable"));
    eprintln!("dead prefill pod answered after {:?}", started.elapsed());
    let hung = rig(Script::Hang).await;
    let started = Instant::now();
    let (status, code, _) = error_of(hung.chat(Some(&hung.prefill.to_string()), false).await).await;
    let waited = started.elapsed();
    assert_eq!((status, code.as_str()), (504, "prefill_deadline_exceeded"));
    eprintln!("hung prefill pod answered after {waited:?} (prefill timeout 500ms)");
    assert_eq!(hung.decode_seen.calls.load(Ordering::SeqCst), 0, "no decode without a handoff");
    assert_eq!(r.decode_seen.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_prefill_leg() {
    let r = rig(Script::Hang).await;
    let url = format!("http://{}/v1/chat/completions", r.sidecar);
    let body = json!({"model": "m", "messages": [], "max_tokens": 5});
    let send = r
        .client
        .post(url)
        .header("x-prefiller-host-port", r.prefill.to_string())
        .body(body.to_string())
        .send();
    // Give up before the sidecar's prefill timeout.
    assert!(tokio::time::timeout(Duration::from_millis(150), send).await.is_err());
    for _ in 0..100 {
        if r.prefill_seen.abandoned.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the prefill leg was not cancelled when the client left");
}

#[tokio::test]
async fn the_secure_listener_serves_tls_with_a_self_signed_certificate() {
    let (decode, _) = start_engine(Script::Decode).await;
    let settings = settings(decode, AllowList::members([]));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let alpn = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let config = epp::tls::ServerTls { alpn, ..Default::default() }.server_config().unwrap();
    let tls = epp::tls::TlsIncoming::new(tcp, config).unwrap();
    let app = Sidecar::new(settings).unwrap().router();
    tokio::spawn(async move { axum::serve(tls, app).await });
    let client = reqwest::Client::builder().no_proxy().danger_accept_invalid_certs(true).build().unwrap();
    let health = client.get(format!("https://localhost:{}/health", addr.port())).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(plain.get(format!("http://{addr}/health")).send().await.is_err(), "no plaintext on a TLS port");
}

#[test]
fn the_command_line_needs_an_allow_list_and_loads_the_endpoints_file() {
    use clap::Parser;
    use epp_pd_sidecar::cli::Cli;
    let e = Cli::parse_from(["epp-pd-sidecar"]).allow_list().err().expect("no allow-list");
    assert!(e.to_string().contains("--allowed-prefillers"), "{e}");
    assert!(Cli::parse_from(["epp-pd-sidecar", "--allow-any-prefiller"]).allow_list().is_ok());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("endpoints.yaml");
    std::fs::write(&file, "endpoints:\n- {name: p0, address: \"10.0.0.7\", port: \"8000\"}\n").unwrap();
    let cli = Cli::parse_from([
        "epp-pd-sidecar",
        "--endpoints-file",
        file.to_str().unwrap(),
        "--model-server-port",
        "9",
    ]);
    let (allow, _) = cli.allow_list().unwrap();
    assert!(allow.check("10.0.0.7:8000".parse().unwrap()).is_ok());
    assert!(allow.check("10.0.0.8:8000".parse().unwrap()).is_err());
    assert_eq!(cli.settings(allow).engine_url, "http://127.0.0.1:9");
    std::fs::write(&file, "endpoints: [{name: p0}]\n").unwrap();
    let e = cli.allow_list().err().expect("an invalid entry");
    assert!(e.to_string().contains("address"), "{e}");
    assert!(
        Cli::try_parse_from(["epp-pd-sidecar", "--vllm-port", "8300"]).is_ok(),
        "llm-d's deprecated alias"
    );
}
