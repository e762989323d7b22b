//! One ext_proc stream = one HTTP request. This is the state machine that turns Envoy's messages into
//! director calls and answers, keeping the headers → body → trailers order Envoy requires.
//!
//! FULL_DUPLEX_STREAMED: the request-headers answer is deferred until the body is complete (end of stream
//! or trailers), then the routing headers and the body follow. BUFFERED: headers are answered at once
//! and the routing rides on the body answer. Response messages are passed straight through, chunk by
//! chunk, never buffered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request as Msg, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tonic::Status;
use tracing::Instrument;

use super::budget::BodyReservation;
use super::envoy_msg::{body_mode, headers_from, served_endpoint, subset_hint, BodyModes};
use super::metrics::OverheadMetrics;
use super::protocol::{self, Phase};
use super::responses;
use crate::director::{Director, IncomingRequest, Routed};
use crate::error::{DropReason, RequestError};
use crate::scheduling::CompletionKind;
use crate::wire::REQUEST_ID_HEADER;

/// Limits that protect epp from hostile or broken peers (the response side bounds its own buffers:
/// `request::ResponseReader`).
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// Largest request body epp accepts.
    pub max_request_body: usize,
    /// Most request-body bytes all streams may buffer at once (see `BodyBudget`).
    pub max_buffered_request_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self { max_request_body: 64 << 20, max_buffered_request_bytes: 1 << 30 }
    }
}

/// The response-side state of a routed request.
struct RoutedState {
    routed: Routed,
    response_headers_seen: bool,
}

type Tx = mpsc::Sender<Result<ProcessingResponse, Status>>;

/// Handles one ext_proc stream.
pub struct StreamHandler {
    director: Arc<Director>,
    overhead: Arc<OverheadMetrics>,
    /// This stream's share of the global buffered-body budget.
    reservation: BodyReservation,
    limits: StreamLimits,
    tx: Tx,
    modes: BodyModes,
    modes_known: bool,
    phase: Phase,
    req: IncomingRequest,
    state: Option<RoutedState>,
    /// Time spent inside epp on the request path (excludes waiting for Envoy's next chunk).
    request_work: Duration,
    /// Time spent inside epp on the response's messages, recorded once when the stream ends.
    response_work: Duration,
    /// How the request ended, for its trace: the status epp answered or the upstream sent, and why epp
    /// refused it.
    outcome: (Option<u16>, Option<String>),
    /// The log span every line about this request is written in (its `request_id`), from its headers on.
    log_span: tracing::Span,
}

/// The stream has ended (Envoy went away or an answer could not be sent).
struct Closed;

impl StreamHandler {
    pub fn new(
        director: Arc<Director>,
        overhead: Arc<OverheadMetrics>,
        limits: StreamLimits,
        reservation: BodyReservation,
        tx: Tx,
    ) -> Self {
        Self {
            director,
            overhead,
            reservation,
            limits,
            tx,
            modes: BodyModes::default(),
            modes_known: false,
            phase: Phase::AwaitingHeaders,
            req: IncomingRequest::default(),
            state: None,
            request_work: Duration::ZERO,
            response_work: Duration::ZERO,
            outcome: (None, None),
            log_span: tracing::Span::none(),
        }
    }

    /// Runs until Envoy ends the stream. Whatever was dispatched is completed when this returns.
    ///
    /// `inbound` is tonic's `Streaming` in the server; any stream of decoded messages will do, which is how
    /// the fuzzer (`crates/fuzz`) drives this handler with arbitrary message sequences without a socket.
    pub async fn run<S>(mut self, mut inbound: S)
    where
        S: Stream<Item = Result<ProcessingRequest, Status>> + Unpin,
    {
        // One `closed` future for the whole stream, not one per message: each new one registers with the
        // channel and deregisters when dropped, a cost paid on every message of every request.
        let tx = self.tx.clone();
        let closed = tx.closed();
        tokio::pin!(closed);
        loop {
            let msg = tokio::select! {
                // Messages first: a closed channel is noticed at the next wait.
                biased;
                m = inbound.next() => m,
                // Envoy gave up on the stream: stop reading.
                () = &mut closed => break,
            };
            match msg {
                Some(Ok(m)) => {
                    let span = self.log_span.clone();
                    if self.handle(m).instrument(span).await.is_err() {
                        break;
                    }
                }
                None => break,
                Some(Err(status)) => {
                    // tonic reports a message it cannot decode as Internal ("failed to decode ..."); an Envoy
                    // reset (RST_STREAM) is Internal too, and is no violation.
                    if status.code() == tonic::Code::Internal && status.message().contains("decode") {
                        let reason = format!("undecodable ext_proc message: {}", status.message());
                        let span = self.log_span.clone();
                        let _ = self.fail_stream(reason).instrument(span).await;
                    } else if status.code() != tonic::Code::Cancelled {
                        self.log_span.in_scope(|| tracing::debug!(%status, "ext_proc stream error"));
                    }
                    break;
                }
            }
        }
        self.finish();
        // Once per request that reached its response, summed over its messages, whether the stream ended
        // normally or not: llm-d-router's definition (llm-d/llm-d-router:pkg/epp/handlers/server.go,
        // `responseProcessingDuration`), and one observation instead of one per streamed chunk.
        if !self.response_work.is_zero() {
            self.overhead.observe_response_processing(self.response_work);
        }
        if let Some(trace) = self.req.trace.take() {
            let (status, error) = &self.outcome;
            trace.end(*status, error.as_deref());
        }
    }

    /// Completes a dispatched request at stream end: normally when Envoy sends no response body (BUFFERED
    /// configs with `response_body_mode: NONE`), as aborted otherwise (cancel, reset).
    fn finish(&mut self) {
        if let Some(mut st) = self.state.take() {
            let kind = if st.response_headers_seen && self.modes.response == BodySendMode::None {
                CompletionKind::Finished
            } else {
                CompletionKind::Aborted
            };
            st.routed.active.complete(kind);
        }
    }

    /// Ends the stream with `INVALID_ARGUMENT` (the peer broke the protocol); nothing more is read.
    async fn fail_stream(&mut self, reason: String) -> Result<(), Closed> {
        tracing::warn!(%reason, "ext_proc protocol violation; ending the stream");
        self.phase = Phase::Finished;
        let _ = self.tx.send(Err(Status::invalid_argument(reason))).await;
        Err(Closed)
    }

    async fn send(&self, r: ProcessingResponse) -> Result<(), Closed> {
        self.tx.send(Ok(r)).await.map_err(|_| Closed)
    }

    async fn send_all(&self, rs: Vec<ProcessingResponse>) -> Result<(), Closed> {
        for r in rs {
            self.send(r).await?;
        }
        Ok(())
    }

    async fn handle(&mut self, m: ProcessingRequest) -> Result<(), Closed> {
        if !self.modes_known {
            if let Some(pc) = m.protocol_config {
                self.modes = BodyModes {
                    request: body_mode(pc.request_body_mode),
                    response: body_mode(pc.response_body_mode),
                };
                if self.modes.response == BodySendMode::None {
                    self.director.warn_once_if_answers_matter();
                }
            }
            self.modes_known = true;
        }
        let Some(request) = m.request else { return Ok(()) };
        if self.phase == Phase::Finished {
            return Ok(());
        }
        if let Err(violation) = protocol::check(self.phase, &request) {
            return self.fail_stream(violation.to_string()).await;
        }
        let started = Instant::now();
        let md = m.metadata_context.as_ref();
        let result = match request {
            Msg::RequestHeaders(mut h) => {
                self.take_subset_hint(md);
                let span = self.take_request_headers(&mut h);
                self.on_request_headers(h).instrument(span).await
            }
            Msg::RequestBody(b) => {
                self.take_subset_hint(md);
                self.on_request_body(b).await
            }
            Msg::RequestTrailers(_) => self.on_request_trailers().await,
            Msg::ResponseHeaders(h) => {
                let served = served_endpoint(md);
                let r = self.on_response_headers(h, served).await;
                self.response_work += started.elapsed();
                return r;
            }
            Msg::ResponseBody(b) => {
                let r = self.on_response_body(b).await;
                self.response_work += started.elapsed();
                return r;
            }
            Msg::ResponseTrailers(_) => {
                if let Some(st) = self.state.as_mut() {
                    st.routed.active.complete(CompletionKind::Finished);
                }
                return self.send(responses::trailers(false)).await;
            }
        };
        self.request_work += started.elapsed();
        result
    }

    /// Records the gateway's subset hint from a request message's metadata, parsed once here.
    fn take_subset_hint(&mut self, md: Option<&Metadata>) {
        match subset_hint(md) {
            Some(Ok(hint)) => {
                self.req.subset = hint;
                self.req.invalid_subset = None;
            }
            Some(Err(invalid)) => self.req.invalid_subset = Some(invalid),
            None => {}
        }
    }

    /// Takes the request's headers and id (the client's `x-request-id`, else a new one), starts its trace,
    /// and returns the log span the rest of the stream runs in.
    fn take_request_headers(&mut self, h: &mut HttpHeaders) -> tracing::Span {
        let headers = headers_from(h.headers.take());
        self.req.path = headers.get(":path").unwrap_or("/v1/completions").to_string();
        match headers.get(REQUEST_ID_HEADER).filter(|v| !v.is_empty()) {
            Some(id) => self.req.request_id = id.to_string(),
            None => {
                self.req.request_id = uuid::Uuid::new_v4().to_string();
                self.req.generated_id = true;
            }
        }
        // The buffer grows with the data that arrives: a client's Content-Length is a claim, not bytes,
        // and reserving it up front let idle clients pin the per-stream limit each.
        self.req.body = Vec::new();
        self.req.headers = headers;
        self.req.received_at = Some(Instant::now());
        self.req.trace = self.director.tracing().start_request(&self.req.headers, &self.req.request_id);
        self.log_span = tracing::info_span!("request", request_id = %self.req.request_id);
        self.log_span.clone()
    }

    async fn on_request_headers(&mut self, h: HttpHeaders) -> Result<(), Closed> {
        // No body will come (GET, or Envoy sends no body): route on headers alone.
        if h.end_of_stream || self.modes.request == BodySendMode::None {
            self.req.header_only = true;
            self.req.no_body = h.end_of_stream;
            return self.route_and_answer(false).await;
        }
        match self.modes.request {
            BodySendMode::Buffered | BodySendMode::BufferedPartial => {
                self.phase = Phase::ReceivingBody;
                self.send(responses::continue_request_headers()).await
            }
            BodySendMode::FullDuplexStreamed => {
                self.phase = Phase::ReceivingBody;
                Ok(())
            }
            other => {
                self.reject(RequestError::internal(format!(
                    "unsupported request_body_mode {}: configure FULL_DUPLEX_STREAMED or BUFFERED",
                    other.as_str_name()
                )))
                .await
            }
        }
    }

    async fn on_request_body(&mut self, b: HttpBody) -> Result<(), Closed> {
        if self.req.body.len() + b.body.len() > self.limits.max_request_body {
            let limit = self.limits.max_request_body;
            return self
                .reject(RequestError::bad_request(format!("request body exceeds {limit} bytes")))
                .await;
        }
        if !self.reservation.grow(b.body.len()) {
            let limit = self.limits.max_buffered_request_bytes;
            return self
                .reject(
                    RequestError::unavailable(format!(
                        "epp is buffering its limit of {limit} request-body bytes across streams; retry later"
                    ))
                    .dropped(DropReason::Saturated),
                )
                .await;
        }
        if self.req.body.is_empty() {
            // The first chunk: take ownership instead of copying.
            self.req.body = b.body;
        } else {
            self.req.body.extend_from_slice(&b.body);
        }
        if b.end_of_stream {
            return self.route_and_answer(false).await;
        }
        Ok(())
    }

    async fn on_request_trailers(&mut self) -> Result<(), Closed> {
        if self.phase == Phase::ReceivingBody {
            // With trailers, the trailers message (not end_of_stream on a chunk) ends the body.
            self.route_and_answer(true).await?;
            if self.phase == Phase::Finished {
                return Ok(());
            }
        }
        self.send(responses::trailers(true)).await
    }

    /// Routes the fully received request and sends the routing answer in the shape the mode requires.
    async fn route_and_answer(&mut self, trailers_follow: bool) -> Result<(), Closed> {
        // Routing may wait (flow control); if Envoy gives up on the stream meanwhile, stop at once: dropping
        // the routing future takes the request out of any queue.
        let routed = tokio::select! {
            r = self.director.route(&self.req) => r,
            _ = self.tx.closed() => return Err(Closed),
        };
        let routed = match routed {
            Ok(r) => r,
            Err((err, labels)) => {
                self.director.metrics().record_error(labels.as_labels(), err.code);
                return self.reject(err).await;
            }
        };
        self.phase = Phase::Routed;
        let header_only = self.req.header_only;
        let buffered = matches!(self.modes.request, BodySendMode::Buffered | BodySendMode::BufferedPartial);
        let answers = if header_only {
            vec![responses::routed_request_headers(&routed.mutation)]
        } else if buffered {
            vec![responses::routed_request_body(&routed.mutation, routed.new_body.clone())]
        } else {
            let body = routed.new_body.as_deref().unwrap_or(&self.req.body);
            let mut v = vec![responses::routed_request_headers(&routed.mutation)];
            v.extend(responses::streamed_body(body, !trailers_follow, true));
            v
        };
        self.overhead.observe_request_processing(self.request_work);
        self.state = Some(RoutedState { routed, response_headers_seen: false });
        // The request body is no longer needed once forwarded.
        let body = std::mem::take(&mut self.req.body);
        let sent = self.send_all(answers).await;
        drop(body);
        self.reservation.release();
        sent
    }

    async fn reject(&mut self, err: RequestError) -> Result<(), Closed> {
        tracing::debug!(error = %err, "request rejected");
        if let Some(trace) = &self.req.trace {
            if let Some(reason) = err.dropped {
                trace.set_attribute(opentelemetry::KeyValue::new("llm_d.epp.drop_reason", reason.as_str()));
            }
            self.outcome = (Some(err.code.http_status()), Some(err.message.clone()));
        }
        if let Some(reason) = err.dropped {
            self.director.metrics().record_dropped(reason);
        }
        self.phase = Phase::Finished;
        self.req.body = Vec::new();
        self.reservation.release();
        self.send(responses::immediate(&err)).await
    }

    async fn on_response_headers(
        &mut self,
        mut h: HttpHeaders,
        served: Option<String>,
    ) -> Result<(), Closed> {
        let headers = headers_from(h.headers.take());
        let Some(st) = self.state.as_mut() else {
            return self.send(responses::response_headers(&[])).await;
        };
        st.response_headers_seen = true;
        if self.req.trace.is_some() {
            self.outcome.0 = headers.get(":status").and_then(|v| v.parse().ok());
        }
        let set = st.routed.active.on_response_headers(&headers, served.as_deref());
        if h.end_of_stream {
            st.routed.active.complete(CompletionKind::Finished);
        }
        self.send(responses::response_headers(&set)).await
    }

    async fn on_response_body(&mut self, b: HttpBody) -> Result<(), Closed> {
        let duplex = self.modes.response == BodySendMode::FullDuplexStreamed;
        let Some(st) = self.state.as_mut() else {
            let answer = if duplex {
                responses::streamed_body(&b.body, b.end_of_stream, false)
            } else {
                vec![responses::continue_response_body(None)]
            };
            return self.send_all(answer).await;
        };
        let rewritten = st.routed.active.on_response_chunk(&b.body, Instant::now());
        if b.end_of_stream {
            st.routed.active.complete(CompletionKind::Finished);
        }
        if duplex {
            let body = rewritten.as_deref().unwrap_or(&b.body);
            self.send_all(responses::streamed_body(body, b.end_of_stream, false)).await
        } else {
            self.send(responses::continue_response_body(rewritten)).await
        }
    }
}
