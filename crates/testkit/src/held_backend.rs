//! Model servers that hold requests until the test releases them, for flow-control and autoscaling tests.
//!
//! Why not epp-test-backend's `x-test-delay-ms`: a delay races the assertions (is the queue still full when
//! the test looks?). Here a request carrying [`HOLD_HEADER`] waits at the backend until the test calls
//! [`HeldBackends::release`] (one request per call) or [`HeldBackends::release_all`], so "while the load is
//! held" lasts exactly as long as the test needs and nothing depends on timing. Requests without the
//! header are answered at once (the "interactive request is served while saturated" checks).
//!
//! The servers run on their own thread and tokio runtime, so they keep serving however the test's runtime
//! is busy (blocking /metrics reads included). Each backend answers OpenAI completions with a `usage` block
//! (epp reads it), stamps `x-backend-id: held-<port>`, and serves a vLLM V1 `/metrics` whose running count
//! is its in-flight requests and whose `kv_cache_usage_perc` is 0.1 per in-flight request (capped at 1.0),
//! enough for the KV trigger of the token-backlog signal to move with the load.

use std::net::{Ipv4Addr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Semaphore};

/// A request with this header (any value) is held until released.
pub const HOLD_HEADER: &str = "x-test-hold";

/// What every backend shares: the release gate and the counts across all of them.
#[derive(Debug)]
struct Shared {
    /// One permit releases one held request; closed = every held request (and every later one) goes.
    gate: Semaphore,
    held: AtomicI64,
    max_held: AtomicI64,
    served: AtomicU64,
}

/// One backend (one port).
#[derive(Debug)]
struct Backend {
    port: u16,
    id: HeaderValue,
    shared: Arc<Shared>,
    in_flight: AtomicI64,
    held: AtomicI64,
}

/// Counts a request in flight (and held, while it is) for exactly as long as its handler lives, so a
/// client that goes away while held is uncounted too.
struct Counted<'a> {
    backend: &'a Backend,
    held: bool,
}

impl<'a> Counted<'a> {
    fn start(backend: &'a Backend) -> Self {
        backend.in_flight.fetch_add(1, Ordering::SeqCst);
        Self { backend, held: false }
    }

    fn hold(&mut self) {
        self.held = true;
        self.backend.held.fetch_add(1, Ordering::SeqCst);
        let shared = &self.backend.shared;
        let now = shared.held.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_held.fetch_max(now, Ordering::SeqCst);
    }

    fn unhold(&mut self) {
        if std::mem::take(&mut self.held) {
            self.backend.held.fetch_sub(1, Ordering::SeqCst);
            self.backend.shared.held.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.unhold();
        self.backend.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Held backends on their own runtime; stopped (held requests released first) on drop.
pub struct HeldBackends {
    pub ports: Vec<u16>,
    backends: Vec<Arc<Backend>>,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HeldBackends {
    /// `count` backends on fresh ports.
    pub fn start(count: usize) -> Self {
        let listeners = (0..count)
            .map(|_| StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a held backend"))
            .collect();
        Self::serve(listeners)
    }

    /// Backends on exactly these ports (e.g. reserved earlier with `free_port`, for scale from zero).
    pub fn start_on(ports: &[u16]) -> Self {
        let listeners = ports
            .iter()
            .map(|&port| {
                StdTcpListener::bind((Ipv4Addr::LOCALHOST, port))
                    .unwrap_or_else(|e| panic!("bind held backend on port {port}: {e}"))
            })
            .collect();
        Self::serve(listeners)
    }

    fn serve(listeners: Vec<StdTcpListener>) -> Self {
        let shared = Arc::new(Shared {
            gate: Semaphore::new(0),
            held: AtomicI64::new(0),
            max_held: AtomicI64::new(0),
            served: AtomicU64::new(0),
        });
        let mut backends = Vec::new();
        for listener in &listeners {
            listener.set_nonblocking(true).expect("non-blocking listener");
            let port = listener.local_addr().expect("listener address").port();
            backends.push(Arc::new(Backend {
                port,
                id: HeaderValue::from_str(&format!("held-{port}")).expect("header value"),
                shared: shared.clone(),
                in_flight: AtomicI64::new(0),
                held: AtomicI64::new(0),
            }));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let served = backends.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("held backends runtime");
            for (listener, backend) in listeners.into_iter().zip(served) {
                runtime.spawn(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let app = Router::new().fallback(handle).with_state(backend);
                    let _ = axum::serve(listener, app).await;
                });
            }
            let _ = runtime.block_on(stopped);
            runtime.shutdown_background();
        });
        let ports = backends.iter().map(|b| b.port).collect();
        HeldBackends { ports, backends, shared, stop: Some(stop), thread: Some(thread) }
    }

    /// The `--endpoints` value for epp.
    pub fn endpoints(&self) -> String {
        self.ports.iter().map(|port| format!("127.0.0.1:{port}")).collect::<Vec<_>>().join(",")
    }

    /// The `x-backend-id` backend `index` answers with.
    pub fn id(&self, index: usize) -> String {
        format!("held-{}", self.ports[index])
    }

    /// Requests held right now, over all backends.
    pub fn held(&self) -> i64 {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Requests held right now by backend `index`.
    pub fn held_on(&self, index: usize) -> i64 {
        self.backends[index].held.load(Ordering::SeqCst)
    }

    /// The most requests ever held at once, over all backends.
    pub fn max_held(&self) -> i64 {
        self.shared.max_held.load(Ordering::SeqCst)
    }

    /// Completion responses sent so far, over all backends.
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::SeqCst)
    }

    /// Lets `n` held (or future held) requests go, one each.
    pub fn release(&self, n: usize) {
        self.shared.gate.add_permits(n);
    }

    /// Lets every held request go, and holds nothing from now on.
    pub fn release_all(&self) {
        self.shared.gate.close();
    }
}

impl Drop for HeldBackends {
    fn drop(&mut self) {
        self.release_all();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn handle(State(backend): State<Arc<Backend>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let mut response = match (parts.method.as_str(), parts.uri.path()) {
        ("GET", "/metrics") => respond(StatusCode::OK, "text/plain; version=0.0.4", metrics_text(&backend)),
        ("GET", "/health") => respond(StatusCode::OK, "text/plain", ""),
        ("POST", path) if path.starts_with("/v1/") => {
            let mut counted = Counted::start(&backend);
            let body = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
            if parts.headers.contains_key(HOLD_HEADER) {
                counted.hold();
                // Closed means "release everything": either way the request goes on.
                if let Ok(permit) = backend.shared.gate.acquire().await {
                    permit.forget();
                }
                counted.unhold();
            }
            let response = respond(StatusCode::OK, "application/json", completion(&body).to_string());
            backend.shared.served.fetch_add(1, Ordering::SeqCst);
            response
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "no such route"),
    };
    response.headers_mut().insert("x-backend-id", backend.id.clone());
    response
}

/// An OpenAI completion answering `body`, with `usage` (prompt tokens = words in the prompt).
fn completion(body: &[u8]) -> Value {
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let model = request.get("model").and_then(Value::as_str).unwrap_or("held-model");
    let prompt_tokens =
        request.get("prompt").and_then(Value::as_str).map_or(1, |p| p.split_whitespace().count().max(1));
    json!({
        "id": "cmpl-held", "object": "text_completion", "created": 0, "model": model,
        "choices": [{"index": 0, "text": "released", "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
    })
}

/// vLLM V1 gauges (rendered by `epp_sim::VllmPage`, the workspace's one vLLM `/metrics` renderer):
/// running = in-flight requests, nothing waiting, KV usage 0.1 per in-flight request, no info series.
fn metrics_text(backend: &Backend) -> String {
    let running = backend.in_flight.load(Ordering::SeqCst).max(0) as f64;
    let mut page = epp_sim::VllmPage::new("held-model");
    page.running = running;
    page.kv_usage = (running * 0.1).min(1.0);
    page.render()
}
