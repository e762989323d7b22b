//! epp-test-backend: a fake OpenAI-compatible model server for epp's integration and e2e tests.
//!
//! Why it exists: e2e tests need model servers whose load they control (the vLLM V1 `/metrics` that epp
//! scrapes, set through `POST /admin/metrics`), whose identity shows in every response (`x-backend-id`,
//! `x-backend-port`), and which report exactly what arrived upstream (`GET /debug/last-request`) so tests
//! can check header stripping and byte-for-byte body forwarding. One process serves several backends (one
//! listener per port) so that tests start one child, not N.
//!
//! Test knobs, read from request headers on the `/v1/*` API: `x-test-status: 503` answers with that status
//! and a JSON error; `x-test-delay-ms: 500` holds the request (counted as running) before answering.
//! `POST /admin/faults` injects faults: a hung, garbage or slow `/metrics`, every Nth request failing.

mod faults;
mod load;
mod openai;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::serve::ListenerExt;
use axum::Router;
use clap::Parser;
use serde_json::{json, Value};

use faults::{Faults, MetricsFault, GARBAGE_PAGE};
use load::{render_metrics, LoadSettings};
use openai::{embeddings, generate, Kind};

/// Request bodies above this are refused; far above anything a test sends.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
pub(crate) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";

#[derive(Parser, Debug, Clone)]
#[command(name = "epp-test-backend", about = "Fake OpenAI-compatible model server for epp tests")]
struct Args {
    /// Port to serve one backend on (repeatable; 0 picks a free port).
    #[arg(long = "port")]
    port: Vec<u16>,
    /// Comma-separated ports, one backend per port (combined with --port).
    #[arg(long, value_delimiter = ',')]
    ports: Vec<u16>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Backend id prefix; each backend's id is `<prefix>-<port>`.
    #[arg(long, default_value = "backend")]
    id: String,
    /// Model name used when a request names none (and in /metrics and /v1/models).
    #[arg(long, default_value = "test-model")]
    model: String,
    /// Number of content chunks (= completion tokens) per response.
    #[arg(long, default_value_t = 5)]
    chunks: u32,
    /// Delay between two streamed chunks, in milliseconds.
    #[arg(long, default_value_t = 20)]
    chunk_delay_ms: u64,
}

#[derive(Debug, thiserror::Error)]
enum BackendError {
    #[error("no ports given: use --port N or --ports N,M")]
    NoPorts,
    #[error("backend id {0:?} is not a valid header value")]
    InvalidId(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("server on port {port} failed: {source}")]
    Serve { port: u16, source: std::io::Error },
    #[error("server task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// One fake model server (one listening port).
struct Backend {
    id: String,
    id_header: HeaderValue,
    port_header: HeaderValue,
    port: u16,
    model: String,
    chunks: u32,
    chunk_delay: Duration,
    started_unix: u64,
    load: Mutex<LoadSettings>,
    faults: Mutex<Faults>,
    /// API requests seen, for `fail_every`.
    fault_counter: AtomicU64,
    in_flight: AtomicI64,
    api_requests: AtomicU64,
    last_request: Mutex<Option<Value>>,
}

/// Counts a request as running (in /metrics) for as long as it lives, streaming included.
struct InFlight(Arc<Backend>);

impl InFlight {
    fn new(backend: &Arc<Backend>) -> Self {
        backend.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(backend.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    respond(status, JSON, value.to_string())
}

fn error_response(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = if status.is_client_error() { "BadRequestError" } else { "InternalServerError" };
    json_response(
        status,
        &json!({"error": {"message": message.into(), "type": kind, "code": status.as_u16()}}),
    )
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Entry point for every request: records `/v1/*` requests, dispatches, stamps the backend headers.
async fn handle(State(backend): State<Arc<Backend>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let mut response = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Err(e) => error_response(StatusCode::BAD_REQUEST, format!("cannot read body: {e}")),
        Ok(body) => {
            let path = parts.uri.path();
            if path.starts_with("/v1/") {
                serve_api(&backend, parts.method.as_str(), path, &parts.headers, &body).await
            } else if path == "/metrics" && parts.method == axum::http::Method::GET {
                serve_metrics(&backend).await
            } else {
                serve_control(&backend, parts.method.as_str(), path, &body)
            }
        }
    };
    let headers = response.headers_mut();
    headers.insert("x-backend-id", backend.id_header.clone());
    headers.insert("x-backend-port", backend.port_header.clone());
    response
}

/// The OpenAI API: recorded for /debug/last-request, counted in flight, subject to the test knobs.
async fn serve_api(
    backend: &Arc<Backend>,
    method: &str,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    record_request(backend, method, path, headers, body);
    let in_flight = InFlight::new(backend);
    let knob =
        |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(delay_ms) = knob("x-test-delay-ms") {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let fails = lock(&backend.faults).fails(&backend.fault_counter);
    if fails {
        return error_response(StatusCode::INTERNAL_SERVER_ERROR, "injected failure (fail_every)");
    }
    if let Some(status) = knob("x-test-status").and_then(|s| u16::try_from(s).ok()) {
        if let Ok(status) = StatusCode::from_u16(status) {
            return error_response(status, format!("x-test-status asked for {status}"));
        }
    }
    match (method, path) {
        ("POST", "/v1/completions") => generate(backend, Kind::Completion, body, in_flight),
        ("POST", "/v1/chat/completions") => generate(backend, Kind::Chat, body, in_flight),
        ("POST", "/v1/embeddings") => embeddings(backend, body),
        ("GET", "/v1/models") => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": backend.model, "object": "model",
                "created": backend.started_unix, "owned_by": "epp-test-backend"}]}),
        ),
        _ => error_response(StatusCode::NOT_FOUND, format!("no route for {method} {path}")),
    }
}

/// `/metrics`, subject to the injected faults.
async fn serve_metrics(backend: &Backend) -> Response {
    let faults = lock(&backend.faults).clone();
    tokio::time::sleep(faults.metrics_delay()).await;
    match faults.metrics() {
        MetricsFault::Ok => respond(StatusCode::OK, PROMETHEUS_TEXT, render_metrics(backend)),
        MetricsFault::Garbage => respond(StatusCode::OK, PROMETHEUS_TEXT, GARBAGE_PAGE),
        MetricsFault::Hang => std::future::pending().await,
    }
}

/// Health, admin and debug endpoints: never recorded, never counted as load.
fn serve_control(backend: &Backend, method: &str, path: &str, body: &Bytes) -> Response {
    match (method, path) {
        ("GET", "/health") => respond(StatusCode::OK, "text/plain", ""),
        ("GET", "/admin/faults") => json_response(StatusCode::OK, &json!(*lock(&backend.faults))),
        ("POST", "/admin/faults") => {
            let update: Value = match serde_json::from_slice(body) {
                Ok(update) => update,
                Err(e) => return error_response(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}")),
            };
            let mut faults = lock(&backend.faults);
            match faults.merged(&update) {
                Ok(merged) => {
                    *faults = merged;
                    json_response(StatusCode::OK, &json!(*faults))
                }
                Err(e) => error_response(StatusCode::BAD_REQUEST, e),
            }
        }
        ("GET", "/admin/metrics") => json_response(StatusCode::OK, &json!(*lock(&backend.load))),
        ("POST", "/admin/metrics") => {
            let update: Value = match serde_json::from_slice(body) {
                Ok(update) => update,
                Err(e) => return error_response(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}")),
            };
            let mut load = lock(&backend.load);
            match load.merged(&update) {
                Ok(merged) => {
                    *load = merged;
                    json_response(StatusCode::OK, &json!(*load))
                }
                Err(e) => error_response(StatusCode::BAD_REQUEST, e),
            }
        }
        ("GET", "/debug/last-request") => match lock(&backend.last_request).as_ref() {
            Some(last) => json_response(StatusCode::OK, last),
            None => error_response(StatusCode::NOT_FOUND, "no /v1/ request received yet"),
        },
        _ => error_response(StatusCode::NOT_FOUND, format!("no route for {method} {path}")),
    }
}

fn record_request(backend: &Backend, method: &str, path: &str, headers: &HeaderMap, body: &Bytes) {
    let count = backend.api_requests.fetch_add(1, Ordering::SeqCst) + 1;
    let mut header_map: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        header_map
            .entry(name.as_str().to_string())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    let record = json!({
        "method": method, "path": path, "headers": header_map,
        "body": String::from_utf8_lossy(body), "body_len": body.len(), "request_count": count,
    });
    *lock(&backend.last_request) = Some(record);
}

fn new_backend(args: &Args, port: u16) -> Result<Backend, BackendError> {
    let id = format!("{}-{port}", args.id);
    let id_header = HeaderValue::from_str(&id).map_err(|_| BackendError::InvalidId(id.clone()))?;
    Ok(Backend {
        id,
        id_header,
        port_header: HeaderValue::from(port),
        port,
        model: args.model.clone(),
        chunks: args.chunks,
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
        started_unix: unix_now(),
        load: Mutex::new(LoadSettings::default()),
        faults: Mutex::new(Faults::default()),
        fault_counter: AtomicU64::new(0),
        in_flight: AtomicI64::new(0),
        api_requests: AtomicU64::new(0),
        last_request: Mutex::new(None),
    })
}

#[tokio::main]
async fn main() -> Result<(), BackendError> {
    let args = Args::parse();
    let ports: Vec<u16> = args.port.iter().chain(&args.ports).copied().collect();
    if ports.is_empty() {
        return Err(BackendError::NoPorts);
    }
    let mut servers = tokio::task::JoinSet::new();
    for requested in ports {
        let addr = format!("{}:{requested}", args.host);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|source| BackendError::Bind { addr: addr.clone(), source })?;
        let port = listener.local_addr().map_err(|source| BackendError::Bind { addr, source })?.port();
        let backend = Arc::new(new_backend(&args, port)?);
        println!("epp-test-backend id={} listening on {}:{port}", backend.id, args.host);
        let app = Router::new().fallback(handle).with_state(backend.clone());
        servers.spawn(async move {
            // Streamed chunks are small writes: without TCP_NODELAY each waits for a delayed ACK (~40 ms).
            let listener = listener.tap_io(|t| {
                let _ = t.set_nodelay(true);
            });
            axum::serve(listener, app)
                .await
                .map_err(|source| BackendError::Serve { port: backend.port, source })
        });
    }
    while let Some(result) = servers.join_next().await {
        result??;
    }
    Ok(())
}

/// A backend on port 8001 serving `model`, for the unit tests of every module.
#[cfg(test)]
fn test_backend(model: &str) -> Backend {
    let args = Args::parse_from(["epp-test-backend", "--port", "8001", "--model", model]);
    new_backend(&args, 8001).expect("valid test backend")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_request_keeps_raw_body_and_joins_repeated_headers() {
        let backend = test_backend("m");
        let mut headers = HeaderMap::new();
        headers.append("X-Seen", HeaderValue::from_static("a"));
        headers.append("x-seen", HeaderValue::from_static("b"));
        record_request(&backend, "POST", "/v1/completions", &headers, &Bytes::from_static(b"{ \"a\" :1}"));
        let last = lock(&backend.last_request).clone().unwrap();
        assert_eq!(last["headers"]["x-seen"], "a, b");
        assert_eq!(last["body"], "{ \"a\" :1}");
        assert_eq!(last["body_len"], 9);
        assert_eq!(last["request_count"], 1);
    }

    #[test]
    fn ports_come_from_both_flags() {
        let args = Args::parse_from(["b", "--port", "1", "--ports", "2,3", "--port", "4"]);
        assert_eq!(args.port, vec![1, 4]);
        assert_eq!(args.ports, vec![2, 3]);
    }
}
