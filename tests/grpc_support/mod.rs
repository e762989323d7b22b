//! Drives epp's ext_proc stream from tests the way Envoy does, over a real loopback gRPC connection,
//! with real fake model servers serving vLLM `/metrics` pages.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, processing_request::Request as Msg, processing_response::Response as Resp,
    HttpBody, HttpHeaders, HttpTrailers, ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use epp::app::Server;
use epp::cli::Cli;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// A fake model server: serves a vLLM-format `/metrics` page (rendered by `epp_sim::VllmPage`, the
/// workspace's one renderer) whose queue and KV values tests set.
#[derive(Clone)]
pub(crate) struct FakeModelServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<(u64, f64)>>,
}

impl FakeModelServer {
    pub(crate) async fn start(waiting: u64, kv: f64) -> Self {
        use axum::{routing::get, Router};
        let state = Arc::new(Mutex::new((waiting, kv)));
        let s = state.clone();
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let (w, kv) = *s.lock().unwrap();
                async move {
                    let mut page = epp_sim::VllmPage::new("m");
                    (page.waiting, page.running, page.kv_usage) = (w as f64, 1.0, kv);
                    page.cache = Some(epp_sim::CacheInfo {
                        block_size: 16,
                        num_gpu_blocks: 1000,
                        enable_prefix_caching: true,
                    });
                    page.render()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state }
    }

    pub(crate) fn set(&self, waiting: u64, kv: f64) {
        *self.state.lock().unwrap() = (waiting, kv);
    }
}

/// Starts epp on loopback ports with `extra` flags and the given endpoints, and waits until every
/// endpoint's telemetry has been scraped once.
pub(crate) async fn start_epp(endpoints: &[SocketAddr], extra: &[&str]) -> Server {
    let eps: Vec<String> = endpoints.iter().map(std::string::ToString::to_string).collect();
    let mut args = vec![
        "epp".to_string(),
        "--bind-address=127.0.0.1".into(),
        "--grpc-port=0".into(),
        "--grpc-health-port=0".into(),
        "--metrics-port=0".into(),
        "--secure-serving=false".into(),
        "--refresh-metrics-interval=20ms".into(),
        "--refresh-prometheus-metrics-interval=50ms".into(),
        "--shutdown-grace-period=200ms".into(),
    ];
    // A flag in `extra` replaces the default above.
    args.retain(|a| {
        a.split_once('=').is_none_or(|(flag, _)| !extra.iter().any(|e| e.starts_with(&format!("{flag}="))))
    });
    if !eps.is_empty() {
        args.push(format!("--endpoints={}", eps.join(",")));
    }
    args.extend(extra.iter().map(std::string::ToString::to_string));
    let server = Server::start(Cli::parse_from(args)).await.expect("epp starts");
    wait_until(|| server.datastore.endpoints().iter().all(|e| e.telemetry().update_time.is_some())).await;
    server
}

/// Polls `cond` until it holds (generous deadline: these machines are noisy; no timing is asserted).
pub(crate) async fn wait_until(mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached within 10s");
}

/// One ext_proc stream, driven message by message.
pub(crate) struct Stream {
    pub tx: mpsc::Sender<ProcessingRequest>,
    pub rx: Streaming<ProcessingResponse>,
}

impl Stream {
    pub(crate) async fn open(server: &Server) -> Self {
        let mut client =
            ExternalProcessorClient::connect(format!("http://{}", server.grpc_addr)).await.expect("connect");
        let (tx, rx) = mpsc::channel(64);
        let rx = client.process(ReceiverStream::new(rx)).await.expect("process").into_inner();
        Self { tx, rx }
    }

    pub(crate) async fn send(&self, m: ProcessingRequest) {
        self.tx.send(m).await.expect("send");
    }

    pub(crate) async fn recv(&mut self) -> Resp {
        let m = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response within 10s")
            .expect("stream ok")
            .expect("a message");
        m.response.expect("response set")
    }

    pub(crate) async fn recv_full(&mut self) -> ProcessingResponse {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message()).await.unwrap().unwrap().unwrap()
    }
}

pub(crate) fn header_map(headers: &[(&str, &str)]) -> HeaderMap {
    HeaderMap {
        headers: headers
            .iter()
            .map(|(k, v)| HeaderValue {
                key: k.to_string(),
                value: String::new(),
                raw_value: v.as_bytes().to_vec(),
            })
            .collect(),
    }
}

pub(crate) fn request_headers(
    headers: &[(&str, &str)],
    eos: bool,
    mode: Option<BodySendMode>,
) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Msg::RequestHeaders(HttpHeaders {
            headers: Some(header_map(headers)),
            end_of_stream: eos,
            ..Default::default()
        })),
        protocol_config: mode.map(|m| ProtocolConfiguration {
            request_body_mode: m as i32,
            response_body_mode: m as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn post_headers(path: &str) -> Vec<(&'static str, String)> {
    vec![(":method", "POST".into()), (":path", path.to_string()), ("content-type", "application/json".into())]
}

pub(crate) fn body(bytes: &[u8], eos: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Msg::RequestBody(HttpBody {
            body: bytes.to_vec(),
            end_of_stream: eos,
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub(crate) fn response_headers(headers: &[(&str, &str)], eos: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Msg::ResponseHeaders(HttpHeaders {
            headers: Some(header_map(headers)),
            end_of_stream: eos,
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub(crate) fn response_body(bytes: &[u8], eos: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Msg::ResponseBody(HttpBody {
            body: bytes.to_vec(),
            end_of_stream: eos,
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub(crate) fn request_trailers() -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Msg::RequestTrailers(HttpTrailers { trailers: Some(HeaderMap::default()) })),
        ..Default::default()
    }
}

/// Adds the gateway's subset hint to a message.
pub(crate) fn with_subset(mut m: ProcessingRequest, subset: &[&str]) -> ProcessingRequest {
    let list = Value {
        kind: Some(Kind::ListValue(ListValue {
            values: subset.iter().map(|s| Value { kind: Some(Kind::StringValue(s.to_string())) }).collect(),
        })),
    };
    m.metadata_context = Some(Metadata {
        filter_metadata: HashMap::from([(
            "envoy.lb.subset_hint".to_string(),
            Struct { fields: HashMap::from([("x-gateway-destination-endpoint-subset".to_string(), list)]) },
        )]),
        ..Default::default()
    });
    m
}

/// What a routing answer said.
#[derive(Debug, Default)]
pub(crate) struct Routing {
    pub set: HashMap<String, String>,
    pub removed: Vec<String>,
    pub metadata_destination: Option<String>,
    pub clear_route_cache: bool,
    pub body: Option<Vec<u8>>,
}

pub(crate) fn routing_of(r: &ProcessingResponse) -> Routing {
    let common = match &r.response {
        Some(Resp::RequestHeaders(h)) => h.response.clone(),
        Some(Resp::RequestBody(b)) => b.response.clone(),
        other => panic!("not a routing answer: {other:?}"),
    }
    .unwrap_or_default();
    let mut out = Routing { clear_route_cache: common.clear_route_cache, ..Default::default() };
    if let Some(m) = common.header_mutation {
        for h in m.set_headers.into_iter().filter_map(|h| h.header) {
            out.set.insert(h.key, String::from_utf8_lossy(&h.raw_value).into_owned());
        }
        out.removed = m.remove_headers;
    }
    if let Some(Mutation::Body(b)) = common.body_mutation.and_then(|b| b.mutation) {
        out.body = Some(b);
    }
    out.metadata_destination = r.dynamic_metadata.as_ref().and_then(|md| {
        let Some(Kind::StructValue(lb)) = &md.fields.get("envoy.lb")?.kind else { return None };
        match &lb.fields.get("x-gateway-destination-endpoint")?.kind {
            Some(Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        }
    });
    out
}

/// The bytes and end-of-stream flag of a streamed body answer.
pub(crate) fn streamed_of(r: &Resp) -> (Vec<u8>, bool) {
    let common = match r {
        Resp::RequestBody(b) | Resp::ResponseBody(b) => b.response.clone().unwrap_or_default(),
        other => panic!("not a body answer: {other:?}"),
    };
    match common.body_mutation.and_then(|b| b.mutation) {
        Some(Mutation::StreamedResponse(s)) => (s.body, s.end_of_stream),
        other => panic!("not a streamed body: {other:?}"),
    }
}

/// Status and body of an immediate response.
pub(crate) fn immediate_of(r: &Resp) -> (i32, String) {
    match r {
        Resp::ImmediateResponse(i) => {
            (i.status.as_ref().map_or(0, |s| s.code), String::from_utf8_lossy(&i.body).into_owned())
        }
        other => panic!("not an immediate response: {other:?}"),
    }
}
