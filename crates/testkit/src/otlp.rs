//! An OTLP trace receiver, as a collector is one: the real OTLP protobufs (the `opentelemetry-proto`
//! crate, generated from open-telemetry/opentelemetry-proto) served over gRPC (`TraceService/Export`) and
//! HTTP (`POST /v1/traces`, `application/x-protobuf`), keeping every span it is sent.
//!
//! What a real collector would add: batching, retries towards a backend, and the rejection of malformed
//! data a real backend applies; the wire format and both transports are the ones it speaks.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use tokio::sync::oneshot;

/// One received span, flattened for assertions (ids in lower-case hex, attribute values as text).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// OTLP's `SpanKind` number (2 = server, 1 = internal).
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// The resource's `service.name`.
    pub service_name: String,
    /// Which transport carried it: "grpc" or "http".
    pub transport: &'static str,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
}

type Received = Arc<Mutex<Vec<ReceivedSpan>>>;

/// A running receiver on loopback; stopped on drop.
pub struct OtlpReceiver {
    /// `http://127.0.0.1:<port>`: the gRPC endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` with protocol grpc).
    pub grpc_endpoint: String,
    /// `http://127.0.0.1:<port>`: the HTTP endpoint's base (the exporter appends `/v1/traces`).
    pub http_endpoint: String,
    received: Received,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    pub fn start() -> Self {
        let bind = || StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind the OTLP receiver");
        let (grpc, http) = (bind(), bind());
        let address = |l: &StdTcpListener| -> SocketAddr { l.local_addr().expect("receiver address") };
        let (grpc_endpoint, http_endpoint) =
            (format!("http://{}", address(&grpc)), format!("http://{}", address(&http)));
        let received = Received::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let (for_grpc, for_http) = (received.clone(), received.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("OTLP receiver runtime");
            runtime.spawn(async move {
                grpc.set_nonblocking(true).expect("non-blocking listener");
                let listener = tokio::net::TcpListener::from_std(grpc).expect("tokio listener");
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                let service = TraceServiceServer::new(GrpcReceiver(for_grpc));
                let _ = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await;
            });
            runtime.spawn(async move {
                http.set_nonblocking(true).expect("non-blocking listener");
                let listener = tokio::net::TcpListener::from_std(http).expect("tokio listener");
                let app = Router::new().route("/v1/traces", post(http_export)).with_state(for_http);
                let _ = axum::serve(listener, app).await;
            });
            let _ = runtime.block_on(stopped);
            runtime.shutdown_background();
        });
        Self { grpc_endpoint, http_endpoint, received, stop: Some(stop), thread: Some(thread) }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().map(|spans| spans.clone()).unwrap_or_default()
    }

    /// Waits (up to `deadline`) until the spans received satisfy `done`, and returns them; panics with
    /// what did arrive otherwise.
    pub fn wait_for(&self, deadline: Duration, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if start.elapsed() > deadline {
                let names: Vec<_> = spans.iter().map(|s| s.name.as_str()).collect();
                panic!(
                    "the OTLP receiver did not get the expected spans within {deadline:?}; it has {names:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct GrpcReceiver(Received);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn http_export(State(received): State<Received>, body: Bytes) -> impl IntoResponse {
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            keep(&received, request, "http");
            let answer = ExportTraceServiceResponse::default().encode_to_vec();
            (StatusCode::OK, [(header::CONTENT_TYPE, "application/x-protobuf")], answer).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

fn keep(received: &Received, request: ExportTraceServiceRequest, transport: &'static str) {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
        let service_name = resource.get("service.name").cloned().unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            out.push(ReceivedSpan {
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                kind: span.kind,
                attributes: attributes(&span.attributes),
                service_name: service_name.clone(),
                transport,
                start_unix_nanos: span.start_time_unix_nano,
                end_unix_nanos: span.end_time_unix_nano,
            });
        }
    }
    if let Ok(mut spans) = received.lock() {
        spans.extend(out);
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
