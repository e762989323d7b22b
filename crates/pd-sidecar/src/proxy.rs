//! The sidecar's HTTP server: `/health` and `/pd-sidecar/metrics` are its own; a generate request naming a
//! prefiller runs the P/D protocol ([`crate::nixl`]); everything else goes to the local engine unchanged.
//!
//! Failures are bounded in time and say what failed: connecting to either upstream is limited by
//! `connect_timeout`, the prefill leg as a whole by `prefill_timeout`, and the decode leg by
//! `decode_timeout` to its response headers and between any two chunks after them. An error after the
//! decode headers went out ends the stream abruptly (no fabricated `[DONE]`). A client that goes away
//! drops this request's future and with it both legs' connections, which cancels them upstream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;

use crate::error::SidecarError;
use crate::metrics::{Route, SidecarMetrics};
use crate::nixl::{self, Api};
use crate::prefiller::{self, AllowList};
use crate::usage::{self, SseRewriter};

/// How the sidecar runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The local engine, e.g. `http://127.0.0.1:8200`.
    pub engine_url: String,
    /// Who may be named as a prefiller.
    pub allow: AllowList,
    pub connect_timeout: Duration,
    pub prefill_timeout: Duration,
    pub decode_timeout: Duration,
    /// Retries of a prefill leg answered 502, 503 or 504, or not reached.
    pub prefill_max_retries: u32,
    pub prefill_retry_backoff: Duration,
    pub max_body_bytes: usize,
}

/// The shared state of every request.
#[derive(Debug)]
pub struct Sidecar {
    settings: Settings,
    client: reqwest::Client,
    pub metrics: Arc<SidecarMetrics>,
}

/// Headers that describe one hop, not the request; never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

impl Sidecar {
    pub fn new(settings: Settings) -> Result<Arc<Self>, reqwest::Error> {
        let client =
            reqwest::Client::builder().no_proxy().connect_timeout(settings.connect_timeout).build()?;
        Ok(Arc::new(Self { settings, client, metrics: SidecarMetrics::new() }))
    }

    /// The router serving this sidecar.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/pd-sidecar/metrics", get(metrics))
            .fallback(handle)
            .with_state(self.clone())
    }

    /// The client's headers as the legs send them.
    fn upstream_headers(headers: &HeaderMap) -> HeaderMap {
        let mut out = headers.clone();
        // The P/D headers name hosts: consumed here, never passed to an engine.
        for name in HOP_BY_HOP.iter().chain(epp::wire::PD_HEADERS) {
            out.remove(*name);
        }
        out
    }

    async fn prefill(
        &self,
        pod: SocketAddr,
        path: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Bytes, SidecarError> {
        let url = format!("http://{pod}{path}");
        let pod = pod.to_string();
        let mut attempt = 0;
        loop {
            let sent = self.client.post(&url).headers(headers.clone()).body(body.clone()).send();
            let answer = tokio::time::timeout(self.settings.prefill_timeout, async {
                let response = sent.await?;
                let status = response.status();
                response.bytes().await.map(|b| (status, b))
            })
            .await;
            let retryable = match &answer {
                Ok(Ok((status, _))) => matches!(status.as_u16(), 502..=504),
                Ok(Err(e)) => e.is_connect(),
                Err(_) => false,
            };
            if retryable && attempt < self.settings.prefill_max_retries {
                attempt += 1;
                tokio::time::sleep(self.settings.prefill_retry_backoff).await;
                continue;
            }
            return match answer {
                Ok(Ok((status, bytes))) if status.is_success() => Ok(bytes),
                Ok(Ok((status, _))) => Err(SidecarError::PrefillFailed { pod, status: status.as_u16() }),
                Ok(Err(e)) if e.is_timeout() => Err(prefill_timeout(pod, self.settings.prefill_timeout)),
                Ok(Err(_)) => Err(SidecarError::PrefillUnavailable(pod)),
                Err(_) => Err(prefill_timeout(pod, self.settings.prefill_timeout)),
            };
        }
    }

    /// Sends a request to the local engine and waits for its response headers.
    async fn local(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, SidecarError> {
        let url = format!("{}{path_and_query}", self.settings.engine_url);
        let sent = self.client.request(method, url).headers(headers).body(body).send();
        let after = humantime::format_duration(self.settings.decode_timeout).to_string();
        match tokio::time::timeout(self.settings.decode_timeout, sent).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) if e.is_timeout() => Err(SidecarError::DecodeTimeout(after)),
            Ok(Err(e)) => Err(SidecarError::DecodeUnavailable(e.without_url().to_string())),
            Err(_) => Err(SidecarError::DecodeTimeout(after)),
        }
    }

    async fn disaggregated(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
        pod: SocketAddr,
        api: Api,
    ) -> Result<Response, SidecarError> {
        self.settings.allow.check(pod)?;
        let client = nixl::client_body(body)?;
        let mut headers = Self::upstream_headers(headers);
        // One fresh id for both legs (llm-d's sidecar does the same): client ids need not be unique, and an
        // engine refuses a second request with the id of one it is running.
        let id = uuid::Uuid::new_v4().to_string();
        if let Ok(value) = id.parse() {
            headers.insert("x-request-id", value);
        }
        let prefill =
            serde_json::to_vec(&nixl::prefill_body(&client, api)).map(Bytes::from).map_err(invalid)?;
        let started = Instant::now();
        let answer = self.prefill(pod, path, headers.clone(), prefill).await?;
        self.metrics.prefill_done(started.elapsed().as_secs_f64());
        let handoff = nixl::handoff(&answer, &pod.to_string())?;
        let decode =
            serde_json::to_vec(&nixl::decode_body(client, &handoff)).map(Bytes::from).map_err(invalid)?;
        tracing::debug!(request_id = %id, prefiller = %pod, "prefill leg done; decoding");
        let response = self.local(Method::POST, path, headers, decode).await?;
        Ok(self.relay(response, Some(handoff.cached_tokens)).await)
    }

    /// The engine's response, streamed back; with `cached_tokens`, its usage reports that prefill hit.
    async fn relay(&self, response: reqwest::Response, cached_tokens: Option<u64>) -> Response {
        let status = response.status();
        let mut headers = response.headers().clone();
        for name in HOP_BY_HOP {
            headers.remove(*name);
        }
        let is_sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let body = match cached_tokens {
            Some(n) if !is_sse => {
                // A JSON answer is small and complete: rewrite it whole.
                match tokio::time::timeout(self.settings.decode_timeout, response.bytes()).await {
                    Ok(Ok(bytes)) => Body::from(usage::rewrite_json(bytes, n)),
                    _ => {
                        return SidecarError::DecodeTimeout(
                            humantime::format_duration(self.settings.decode_timeout).to_string(),
                        )
                        .into_response()
                    }
                }
            }
            Some(n) => stream_body(response, self.settings.decode_timeout, Some(SseRewriter::new(n))),
            None => stream_body(response, self.settings.decode_timeout, None),
        };
        let mut out = Response::new(body);
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        out
    }
}

fn invalid(e: serde_json::Error) -> SidecarError {
    SidecarError::InvalidRequest(e.to_string())
}

fn prefill_timeout(pod: String, after: Duration) -> SidecarError {
    SidecarError::PrefillTimeout { pod, after: humantime::format_duration(after).to_string() }
}

/// Streams `response` chunk by chunk; a gap longer than `gap` or an upstream error ends the body with an
/// error, which aborts the client's stream.
fn stream_body(response: reqwest::Response, gap: Duration, rewriter: Option<SseRewriter>) -> Body {
    let stream = futures::stream::unfold(Some((response, rewriter)), move |state| async move {
        let (mut response, mut rewriter) = state?;
        match tokio::time::timeout(gap, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                let out = match rewriter.as_mut() {
                    Some(r) => r.push(&chunk),
                    None => chunk,
                };
                Some((Ok(out), Some((response, rewriter))))
            }
            Ok(Ok(None)) => {
                let tail = rewriter.as_mut().map(SseRewriter::finish).filter(|b| !b.is_empty())?;
                Some((Ok(tail), None))
            }
            Ok(Err(e)) => Some((Err(std::io::Error::other(e.without_url())), None)),
            Err(_) => Some((Err(std::io::Error::other("the engine's stream stalled")), None)),
        }
    });
    Body::from_stream(stream)
}

async fn metrics(State(sidecar): State<Arc<Sidecar>>) -> impl IntoResponse {
    (
        [("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        sidecar.metrics.encode(),
    )
}

/// Every request but the sidecar's own paths.
async fn handle(State(sidecar): State<Arc<Sidecar>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let path_and_query = parts.uri.path_and_query().map_or(path.clone(), |p| p.as_str().to_string());
    let api = (parts.method == Method::POST).then(|| Api::of(&path)).flatten();
    let route = match (api, parts.headers.contains_key(HeaderName::from_static(prefiller::PREFILLER_HEADER)))
    {
        (Some(_), true) => Route::Disaggregated,
        (Some(_), false) => Route::Local,
        (None, _) => Route::Passthrough,
    };
    let limit = sidecar.settings.max_body_bytes;
    let result = async {
        let body = axum::body::to_bytes(body, limit).await.map_err(|_| SidecarError::BodyTooLarge(limit))?;
        let named = if api.is_some() { prefiller::named(&parts.headers)? } else { None };
        match (api, named) {
            (Some(api), Some(pod)) => sidecar.disaggregated(&path, &parts.headers, &body, pod, api).await,
            _ => {
                let headers = Sidecar::upstream_headers(&parts.headers);
                let response = sidecar.local(parts.method.clone(), &path_and_query, headers, body).await?;
                Ok(sidecar.relay(response, None).await)
            }
        }
    }
    .await;
    match result {
        Ok(response) => {
            let outcome = if response.status() == StatusCode::OK { "ok" } else { "engine_error" };
            sidecar.metrics.request(route, outcome);
            response
        }
        Err(e) => {
            sidecar.metrics.request(route, e.code());
            tracing::warn!(path = %path, code = e.code(), error = %e, "request failed");
            e.into_response()
        }
    }
}
