//! epp-noop-extproc: an ext_proc server that routes like epp and does nothing else — the baseline for
//! "what does epp's pipeline cost beyond the ext_proc protocol itself".
//!
//! In FULL_DUPLEX_STREAMED mode it answers exactly as epp does: it defers the request-headers answer to
//! the end of the body, then sends the destination header, `Content-Length` and the `envoy.lb` metadata,
//! followed by the body echoed back in chunks of at most 62,000 bytes; response headers, body chunks and
//! trailers pass straight through. The answers come from epp's own builders (`epp::extproc::responses`),
//! so the only difference to epp is the missing parse, schedule and bookkeeping. The destination is
//! `--endpoint`, or round robin over `--endpoints`. BUFFERED mode is answered the way epp answers it too.
//! Plaintext only (as epp with `--secure-serving=false`).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request as Msg, ProcessingRequest, ProcessingResponse,
};
use epp::extproc::envoy_msg::{body_mode, headers_from};
use epp::extproc::responses::{self, RoutingMutation};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

#[derive(Parser, Debug)]
#[command(name = "epp-noop-extproc", about = "ext_proc server that routes like epp and does nothing else")]
struct Args {
    /// ext_proc gRPC port (plaintext).
    #[arg(long, default_value_t = 9002)]
    port: u16,
    #[arg(long, default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// The one destination `ip:port`.
    #[arg(long, conflicts_with = "endpoints")]
    endpoint: Option<SocketAddr>,
    /// Destinations `ip:port,ip:port`, used round robin.
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
enum NoopError {
    #[error("no destination: give --endpoint IP:PORT or --endpoints A,B,C")]
    NoEndpoints,
    #[error("ext_proc server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Picks destinations round robin.
#[derive(Debug)]
struct Destinations {
    endpoints: Vec<String>,
    next: AtomicUsize,
}

impl Destinations {
    fn pick(&self) -> String {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len();
        self.endpoints[i].clone()
    }
}

#[derive(Debug, Clone)]
struct NoopService {
    destinations: Arc<Destinations>,
}

type Tx = mpsc::Sender<Result<ProcessingResponse, Status>>;
type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for NoopService {
    type ProcessStream = ResponseStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        // Same channel depth as epp, so back-pressure behaves alike.
        let (tx, rx) = mpsc::channel(32);
        tokio::spawn(handle_stream(request.into_inner(), tx, self.destinations.clone()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The per-request state: the request body until it is routed.
struct StreamState {
    request_mode: BodySendMode,
    response_mode: BodySendMode,
    modes_known: bool,
    body: Vec<u8>,
    routed: bool,
}

/// The stream ended: Envoy went away.
struct Closed;

async fn send(tx: &Tx, responses: impl IntoIterator<Item = ProcessingResponse>) -> Result<(), Closed> {
    for r in responses {
        tx.send(Ok(r)).await.map_err(|_| Closed)?;
    }
    Ok(())
}

async fn route(
    state: &mut StreamState,
    tx: &Tx,
    dest: &Destinations,
    trailers_follow: bool,
) -> Result<(), Closed> {
    state.routed = true;
    let mutation =
        RoutingMutation { destination: dest.pick(), content_length: state.body.len(), ..Default::default() };
    let body = std::mem::take(&mut state.body);
    if matches!(state.request_mode, BodySendMode::Buffered | BodySendMode::BufferedPartial) {
        return send(tx, [responses::routed_request_body(&mutation, None)]).await;
    }
    send(tx, [responses::routed_request_headers(&mutation)]).await?;
    send(tx, responses::streamed_body(&body, !trailers_follow, true)).await
}

async fn on_message(
    state: &mut StreamState,
    m: ProcessingRequest,
    tx: &Tx,
    dest: &Destinations,
) -> Result<(), Closed> {
    if !state.modes_known {
        if let Some(pc) = m.protocol_config {
            state.request_mode = body_mode(pc.request_body_mode);
            state.response_mode = body_mode(pc.response_body_mode);
        }
        state.modes_known = true;
    }
    let Some(request) = m.request else { return Ok(()) };
    match request {
        Msg::RequestHeaders(mut h) => {
            // Pre-size the body buffer as epp does (Content-Length, capped).
            let headers = headers_from(h.headers.take());
            let expected = headers.get("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
            state.body = Vec::with_capacity(expected.min(64 << 20));
            if h.end_of_stream || state.request_mode == BodySendMode::None {
                return route(state, tx, dest, false).await;
            }
            if matches!(state.request_mode, BodySendMode::Buffered | BodySendMode::BufferedPartial) {
                return send(tx, [responses::continue_request_headers()]).await;
            }
            Ok(())
        }
        Msg::RequestBody(b) => {
            if state.routed {
                return Ok(());
            }
            state.body.extend_from_slice(&b.body);
            if b.end_of_stream {
                return route(state, tx, dest, false).await;
            }
            Ok(())
        }
        Msg::RequestTrailers(_) => {
            if !state.routed {
                route(state, tx, dest, true).await?;
            }
            send(tx, [responses::trailers(true)]).await
        }
        Msg::ResponseHeaders(_) => send(tx, [responses::response_headers(&[])]).await,
        Msg::ResponseBody(b) => {
            if state.response_mode == BodySendMode::FullDuplexStreamed {
                send(tx, responses::streamed_body(&b.body, b.end_of_stream, false)).await
            } else {
                send(tx, [responses::continue_response_body(None)]).await
            }
        }
        Msg::ResponseTrailers(_) => send(tx, [responses::trailers(false)]).await,
    }
}

async fn handle_stream(mut inbound: Streaming<ProcessingRequest>, tx: Tx, dest: Arc<Destinations>) {
    let mut state = StreamState {
        // Without a protocol configuration, assume the mode the EPP protocol mandates (as epp does).
        request_mode: BodySendMode::FullDuplexStreamed,
        response_mode: BodySendMode::FullDuplexStreamed,
        modes_known: false,
        body: Vec::new(),
        routed: false,
    };
    while let Ok(Some(m)) = inbound.message().await {
        if on_message(&mut state, m, &tx, &dest).await.is_err() {
            break;
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), NoopError> {
    let args = Args::parse();
    let endpoints: Vec<String> =
        args.endpoint.iter().chain(&args.endpoints).map(ToString::to_string).collect();
    if endpoints.is_empty() {
        return Err(NoopError::NoEndpoints);
    }
    let addr = SocketAddr::new(args.bind, args.port);
    println!("epp-noop-extproc listening on {addr}, destinations {}", endpoints.join(","));
    let service =
        NoopService { destinations: Arc::new(Destinations { endpoints, next: AtomicUsize::new(0) }) };
    // Same server settings as epp's ext_proc server, TCP_NODELAY included (Nagle would hold answers).
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(100_000))
        .add_service(
            ExternalProcessorServer::new(service)
                .max_decoding_message_size(16 << 20)
                .max_encoding_message_size(16 << 20),
        )
        .serve(addr)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_rotate() {
        let d = Destinations { endpoints: vec!["a:1".into(), "b:2".into()], next: AtomicUsize::new(0) };
        assert_eq!([d.pick(), d.pick(), d.pick()], ["a:1".to_string(), "b:2".into(), "a:1".into()]);
    }
}
