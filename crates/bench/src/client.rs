//! Sends one request and measures it: end-to-end latency always; for streams also TTFT, TPOT and every
//! inter-token gap; the backend that answered; and, when it failed, *how* it failed.
//!
//! Why failures are classified instead of timed: a 503 that returns in 1 ms or a connection refused at
//! once would drag latency percentiles down and hide overload. So each request ends as either a success
//! (its timings go into the latency statistics) or one of the [`ErrorKind`]s (counted, never averaged).

use std::time::{Duration, Instant};

use http::header::CONTENT_TYPE;
use http::HeaderName;
use serde::{Deserialize, Serialize, Serializer};

use super::body::PlannedRequest;
use super::sse::{time_per_output_token, SseScanner};

/// Most bytes of an error body kept for the error detail.
const ERROR_DETAIL_BYTES: usize = 200;
/// Most bytes read from a non-streamed response (to find `usage`).
const MAX_JSON_BODY: usize = 64 << 20;

/// Headers that name the serving backend, tried when the configured one is absent: epp-test-backend's
/// and the simulator's.
pub const KNOWN_BACKEND_HEADERS: [&str; 2] = ["x-backend-id", "x-sim-replica"];

/// How a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The server answered with a non-2xx status.
    Http(u16),
    /// No complete response within the request timeout.
    Timeout,
    /// No response at all: refused, reset or closed before the response headers.
    Connection,
    /// The response started but its body broke off: no `[DONE]`, a reset, an error event.
    BrokenStream,
    /// A complete response that is not what the API promises (e.g. a JSON body that does not parse).
    BadResponse,
}

impl ErrorKind {
    /// Stable name for reports: `http_503`, `timeout`, `connection`, `broken_stream`, `bad_response`.
    pub fn label(&self) -> String {
        match self {
            ErrorKind::Http(status) => format!("http_{status}"),
            ErrorKind::Timeout => "timeout".into(),
            ErrorKind::Connection => "connection".into(),
            ErrorKind::BrokenStream => "broken_stream".into(),
            ErrorKind::BadResponse => "bad_response".into(),
        }
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.label())
    }
}

/// The measurements of one request. Times in milliseconds; `start_s` in seconds since the run began.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub index: u64,
    pub start_s: f64,
    pub e2e_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub itl_ms: Vec<f64>,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub request_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objective: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<String>,
}

impl Sample {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    fn fail(&mut self, kind: ErrorKind, detail: impl Into<String>) {
        self.error = Some(kind);
        self.error_detail = Some(detail.into());
        // A failed request's partial timings must not leak into the latency statistics.
        self.ttft_ms = None;
        self.tpot_ms = None;
        self.itl_ms.clear();
    }
}

/// Where and how requests are sent.
#[derive(Debug, Clone)]
pub struct Target {
    pub client: reqwest::Client,
    pub url: reqwest::Url,
    pub backend_header: HeaderName,
    pub timeout: Duration,
}

pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

type Failure = (ErrorKind, String);

/// The kind of a transport error raised before any response arrived.
pub fn classify_send_error(error: &reqwest::Error) -> ErrorKind {
    if error.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Connection
    }
}

/// The kind of a transport error raised while reading a response body.
pub fn classify_body_error(error: &reqwest::Error) -> ErrorKind {
    if error.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::BrokenStream
    }
}

/// Full description of a transport error with its chain of causes ("error sending request: … refused").
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let shown = cause.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        source = cause.source();
    }
    text
}

fn truncate(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(&text[..text.len().min(ERROR_DETAIL_BYTES)]);
    text.trim().to_string()
}

#[derive(Deserialize)]
struct JsonCompletion {
    usage: Option<JsonUsage>,
}

#[derive(Deserialize)]
struct JsonUsage {
    completion_tokens: Option<u64>,
}

/// Sends request `index` and measures it. `run_start` anchors `start_s`.
pub async fn send(target: &Target, index: u64, request: PlannedRequest, run_start: Instant) -> Sample {
    let sent = Instant::now();
    let mut sample = Sample {
        index,
        start_s: sent.saturating_duration_since(run_start).as_secs_f64(),
        e2e_ms: 0.0,
        ttft_ms: None,
        tpot_ms: None,
        itl_ms: Vec::new(),
        prompt_tokens: request.prompt_tokens,
        output_tokens: 0,
        request_bytes: request.body.len(),
        backend: None,
        objective: request.objective.clone(),
        error: None,
        error_detail: None,
    };
    let outcome = tokio::time::timeout(target.timeout, exchange(target, request, sent, &mut sample)).await;
    let e2e = sent.elapsed();
    sample.e2e_ms = millis(e2e);
    match outcome {
        Err(_) => {
            sample.fail(ErrorKind::Timeout, format!("no complete response within {:?}", target.timeout));
        }
        Ok(Err((kind, detail))) => sample.fail(kind, detail),
        Ok(Ok(())) => {
            if let Some(ttft) = sample.ttft_ms {
                let ttft = Duration::from_secs_f64(ttft / 1000.0);
                sample.tpot_ms = time_per_output_token(e2e, ttft, sample.output_tokens).map(millis);
            }
        }
    }
    sample
}

async fn exchange(
    target: &Target,
    request: PlannedRequest,
    sent: Instant,
    sample: &mut Sample,
) -> Result<(), Failure> {
    let mut builder =
        target.client.post(target.url.clone()).header(CONTENT_TYPE, "application/json").body(request.body);
    for (name, value) in request.headers {
        builder = builder.header(name, value);
    }
    let mut response = builder.send().await.map_err(|e| (classify_send_error(&e), describe(&e)))?;
    sample.backend = [target.backend_header.as_str()]
        .into_iter()
        .chain(KNOWN_BACKEND_HEADERS)
        .find_map(|name| response.headers().get(name))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let status = response.status();
    let is_sse = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !status.is_success() {
        // Read (a bounded part of) the body so the connection goes back to the pool.
        let mut detail = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            if detail.len() < ERROR_DETAIL_BYTES {
                detail.extend_from_slice(&chunk);
            }
        }
        return Err((ErrorKind::Http(status.as_u16()), truncate(&detail)));
    }
    if is_sse {
        let mut scanner = SseScanner::default();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => scanner.feed(&chunk, sent.elapsed()),
                Ok(None) => break,
                Err(e) => return Err((classify_body_error(&e), describe(&e))),
            }
        }
        if let Some(error) = scanner.error.take() {
            return Err((ErrorKind::BrokenStream, error));
        }
        if !scanner.done {
            return Err((ErrorKind::BrokenStream, "stream ended without data: [DONE]".into()));
        }
        sample.output_tokens = scanner.output_tokens();
        sample.ttft_ms = scanner.first_content.map(millis);
        sample.itl_ms = scanner.inter_token_gaps.iter().copied().map(millis).collect();
        return Ok(());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_JSON_BODY => body.extend_from_slice(&chunk),
            Ok(Some(_)) => return Err((ErrorKind::BadResponse, format!("body above {MAX_JSON_BODY} bytes"))),
            Ok(None) => break,
            Err(e) => return Err((classify_body_error(&e), describe(&e))),
        }
    }
    let parsed: JsonCompletion = serde_json::from_slice(&body)
        .map_err(|e| (ErrorKind::BadResponse, format!("response is not JSON ({e}): {}", truncate(&body))))?;
    sample.output_tokens = parsed.usage.and_then(|u| u.completion_tokens).unwrap_or(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_labels_are_stable() {
        assert_eq!(ErrorKind::Http(503).label(), "http_503");
        assert_eq!(ErrorKind::BrokenStream.label(), "broken_stream");
        assert_eq!(serde_json::to_string(&ErrorKind::Timeout).unwrap(), "\"timeout\"");
        let mut kinds = vec![ErrorKind::Timeout, ErrorKind::Http(500), ErrorKind::Http(429)];
        kinds.sort();
        assert_eq!(kinds, vec![ErrorKind::Http(429), ErrorKind::Http(500), ErrorKind::Timeout]);
    }

    #[test]
    fn a_failure_drops_partial_timings() {
        let mut s = Sample {
            index: 0,
            start_s: 0.0,
            e2e_ms: 5.0,
            ttft_ms: Some(1.0),
            tpot_ms: Some(1.0),
            itl_ms: vec![1.0],
            prompt_tokens: 1,
            output_tokens: 2,
            request_bytes: 10,
            backend: None,
            objective: None,
            error: None,
            error_detail: None,
        };
        s.fail(ErrorKind::BrokenStream, "cut");
        assert!(!s.ok());
        assert_eq!((s.ttft_ms, s.tpot_ms, s.itl_ms.len()), (None, None, 0));
    }

    #[test]
    fn describe_walks_the_cause_chain() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let outer = std::io::Error::other(inner);
        assert!(describe(&outer).contains("connection refused"));
    }
}
