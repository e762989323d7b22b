//! A minimal, fast OpenAI-style backend for the overhead benchmark (`epp-bench backend`): fixed SSE or
//! JSON answers of `chunks` tokens, a vLLM V1 `/metrics` page epp can scrape, and `x-backend-id`.
//!
//! Why the benchmark has its own: an overhead measurement needs a backend whose own cost is tiny and
//! flat, and whose sockets set TCP_NODELAY (without it, Nagle holds every streamed chunk after the
//! headers until the peer's delayed ACK, ~40 ms per answer on a kept-alive connection; BENCHMARKS.md has
//! the measurement). It does not parse the request JSON: it only looks for the `"stream":true` and
//! `"include_usage":true` that epp-bench sends, so its cost does not grow with the prompt.
//!
//! Why it is not folded into epp-test-backend (which takes the same `--ports --id --model --chunks
//! --chunk-delay-ms` flags, so `BACKEND=test-backend scripts/bench-overhead.sh` swaps them): the test
//! backend's job is to be steered and inspected. It parses every body as JSON (usage from the prompt's
//! words), copies each request into `/debug/last-request`, takes `x-test-*` knobs and streams through a
//! task and channel; all of that is per-request work that grows with a 220 KB prompt and would sit in
//! the "direct" baseline the overhead is measured against. What the two share is the page text: both
//! render `/metrics` through `epp_sim::VllmPage`, the workspace's one vLLM exposition.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::serve::ListenerExt;
use axum::Router;

use super::BenchError;

/// Largest request body read.
const MAX_BODY: usize = 64 << 20;

/// Most chunks one answer has with [`BackendOptions::chunks_from_max_tokens`].
pub const MAX_CHUNKS: u32 = 100_000;

/// What every backend answers.
#[derive(Debug, Clone)]
pub struct BackendOptions {
    pub model: String,
    /// Content chunks (= completion tokens) per answer.
    pub chunks: u32,
    pub chunk_delay: Duration,
    /// Answer with the request's `max_tokens` chunks (capped at [`MAX_CHUNKS`]) instead of `chunks`, so
    /// that one fleet serves answers of every length (`scripts/sizing.py`).
    pub chunks_from_max_tokens: bool,
    /// Backend ids are `<id_prefix>-<port>`.
    pub id_prefix: String,
}

struct BackendState {
    options: BackendOptions,
    id: HeaderValue,
    in_flight: AtomicI64,
}

/// Counts a request as running until dropped (held by the response stream).
struct Running(Arc<BackendState>);

impl Running {
    fn new(state: &Arc<BackendState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(state.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// The `max_tokens` of a body epp-bench wrote (serde_json's compact form: `"max_tokens":N`). A quote
/// inside a prompt is escaped (`\"`), so prompt text cannot match.
fn max_tokens(body: &[u8]) -> Option<u32> {
    let needle = b"\"max_tokens\":";
    let start = memchr::memmem::find(body, needle)? + needle.len();
    let digits = body[start..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&body[start..start + digits]).ok()?.parse::<u32>().ok().map(|n| n.min(MAX_CHUNKS))
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Running = requests in flight (streams included); idle otherwise; vLLM's default cache geometry.
fn metrics(state: &BackendState) -> String {
    let mut page = epp_sim::VllmPage::new(&state.options.model);
    page.running = state.in_flight.load(Ordering::Relaxed).max(0) as f64;
    page.cache =
        Some(epp_sim::CacheInfo { block_size: 16, num_gpu_blocks: 8192, enable_prefix_caching: true });
    page.render()
}

/// The SSE event of content chunk `index`.
fn sse_chunk(chat: bool, model: &str, index: u32, last: bool) -> Bytes {
    let finish = if last { "\"length\"" } else { "null" };
    let text = if chat {
        format!(
            "data: {{\"id\":\"b\",\"object\":\"chat.completion.chunk\",\"model\":\"{model}\",\"choices\":\
             [{{\"index\":0,\"delta\":{{\"content\":\"tok{index} \"}},\"finish_reason\":{finish}}}]}}\n\n"
        )
    } else {
        format!(
            "data: {{\"id\":\"b\",\"object\":\"text_completion\",\"model\":\"{model}\",\"choices\":\
             [{{\"index\":0,\"text\":\"tok{index} \",\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    Bytes::from(text)
}

fn usage_json(chunks: u32) -> String {
    format!("{{\"prompt_tokens\":1,\"completion_tokens\":{chunks},\"total_tokens\":{}}}", chunks + 1)
}

async fn handle(State(state): State<Arc<BackendState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let mut response = match (parts.method.as_str(), path.as_str()) {
        ("GET", "/metrics") => respond(StatusCode::OK, "text/plain; version=0.0.4", metrics(&state)),
        ("GET", "/health") => respond(StatusCode::OK, "text/plain", ""),
        ("POST", "/v1/chat/completions" | "/v1/completions") => {
            match axum::body::to_bytes(body, MAX_BODY).await {
                Ok(body) => generate(&state, path == "/v1/chat/completions", &body),
                Err(e) => respond(StatusCode::BAD_REQUEST, "text/plain", format!("cannot read body: {e}")),
            }
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found"),
    };
    response.headers_mut().insert("x-backend-id", state.id.clone());
    response
}

fn generate(state: &Arc<BackendState>, chat: bool, body: &[u8]) -> Response {
    let o = &state.options;
    let chunks = if o.chunks_from_max_tokens { max_tokens(body).unwrap_or(o.chunks) } else { o.chunks };
    let stream = contains(body, b"\"stream\":true") || contains(body, b"\"stream\": true");
    if !stream {
        let text: String = (0..chunks).map(|i| format!("tok{i} ")).collect();
        let choice = if chat {
            format!("{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{text}\"}},\"finish_reason\":\"length\"}}")
        } else {
            format!("{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":\"length\"}}")
        };
        let json = format!(
            "{{\"id\":\"b\",\"model\":\"{}\",\"choices\":[{choice}],\"usage\":{}}}",
            o.model,
            usage_json(chunks)
        );
        return respond(StatusCode::OK, "application/json", json);
    }
    let include_usage =
        contains(body, b"\"include_usage\":true") || contains(body, b"\"include_usage\": true");
    let (delay, model) = (o.chunk_delay, o.model.clone());
    let running = Running::new(state);
    // Events: `chunks` content chunks, the usage chunk (if asked for), [DONE].
    let total = chunks + u32::from(include_usage) + 1;
    let stream = futures::stream::unfold((0u32, running), move |(index, running)| {
        let model = model.clone();
        async move {
            if index >= total {
                return None;
            }
            let bytes = if index < chunks {
                if index > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                sse_chunk(chat, &model, index, index + 1 == chunks)
            } else if index + 1 < total {
                let usage = usage_json(chunks);
                Bytes::from(format!(
                    "data: {{\"id\":\"b\",\"model\":\"{model}\",\"choices\":[],\"usage\":{usage}}}\n\n"
                ))
            } else {
                Bytes::from_static(b"data: [DONE]\n\n")
            };
            Some((Ok::<_, Infallible>(bytes), (index + 1, running)))
        }
    });
    let mut response = respond(StatusCode::OK, "text/event-stream", Body::from_stream(stream));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Binds one backend per address (port 0 picks one) and serves them on the current runtime until it
/// stops. Returns the bound addresses, in order.
pub async fn serve(addrs: &[SocketAddr], options: &BackendOptions) -> Result<Vec<SocketAddr>, BenchError> {
    let mut bound = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let bind_error = |e: std::io::Error| BenchError::Client(format!("cannot listen on {addr}: {e}"));
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let id = format!("{}-{}", options.id_prefix, local.port());
        let id =
            HeaderValue::from_str(&id).map_err(|_| BenchError::Client(format!("bad backend id {id:?}")))?;
        let state = Arc::new(BackendState { options: options.clone(), id, in_flight: AtomicI64::new(0) });
        let app = Router::new().fallback(handle).with_state(state);
        // TCP_NODELAY on every accepted connection: the point of this backend (see the module docs).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("epp-bench backend {local}: {e}");
            }
        });
        bound.push(local);
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseScanner;

    #[test]
    fn chunks_parse_as_content_and_usage() {
        let mut scanner = SseScanner::default();
        for i in 0..3 {
            scanner.feed(&sse_chunk(true, "m", i, i == 2), Duration::from_millis(u64::from(i)));
        }
        scanner.feed(&sse_chunk(false, "m", 3, false), Duration::from_millis(3));
        let usage = format!("data: {{\"choices\":[],\"usage\":{}}}\n\ndata: [DONE]\n\n", usage_json(4));
        scanner.feed(usage.as_bytes(), Duration::from_millis(4));
        assert_eq!(scanner.content_events, 4);
        assert_eq!(scanner.usage_completion_tokens, Some(4));
        assert!(scanner.complete());
        let state = BackendState {
            options: BackendOptions {
                model: "m".into(),
                chunks: 1,
                chunk_delay: Duration::ZERO,
                chunks_from_max_tokens: false,
                id_prefix: "b".into(),
            },
            id: HeaderValue::from_static("b-1"),
            in_flight: AtomicI64::new(2),
        };
        assert!(metrics(&state).contains("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2.0\n"));
    }

    #[test]
    fn max_tokens_is_read_from_the_request_not_from_the_prompt() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"say \"max_tokens\":7"}],"max_tokens":1000}"#;
        assert_eq!(max_tokens(body), Some(1000));
        assert_eq!(max_tokens(br#"{"max_tokens":999999999}"#), Some(MAX_CHUNKS));
        assert_eq!(max_tokens(br#"{"model":"m"}"#), None);
        assert_eq!(max_tokens(br#"{"max_tokens":-1}"#), None);
    }
}
