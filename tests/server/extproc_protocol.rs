//! A strict stream protocol and bounded buffering: messages out of order and messages that do not decode
//! end the stream with gRPC `INVALID_ARGUMENT` naming the problem, nothing is dispatched for them, and a
//! request already dispatched on the stream is released; buffered bodies share one budget; a POST
//! without a body is epp's 400.

use crate::grpc_support::*;
use bytes::{Buf, BufMut};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

const COMPLETION: &[u8] = br#"{"model":"m","prompt":"hello world"}"#;

/// The status the stream ends with, skipping any answers before it.
async fn final_status(s: &mut Stream) -> Status {
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), s.rx.message()).await {
            Ok(Ok(Some(_answer))) => continue,
            Ok(Ok(None)) => panic!("the stream ended with OK"),
            Ok(Err(status)) => return status,
            Err(_) => panic!("no end of stream within 10s"),
        }
    }
}

fn running(epp: &epp::app::Server) -> i64 {
    epp.request_metrics.running_requests()
}

fn post() -> Vec<(&'static str, &'static str)> {
    vec![(":method", "POST"), (":path", "/v1/completions"), ("content-type", "application/json")]
}

#[tokio::test]
async fn out_of_order_messages_end_the_stream_with_invalid_argument() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let hs = post();

    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&hs, false, None)).await;
    s.send(request_headers(&hs, false, None)).await;
    let status = final_status(&mut s).await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "request headers received twice on one stream");

    let mut s = Stream::open(&epp).await;
    s.send(body(COMPLETION, true)).await;
    let status = final_status(&mut s).await;
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "request body before the request headers")
    );

    // Envoy's own local replies (a 413, a 408) pass the filter before the request is routed: they pass
    // through untouched, and nothing is dispatched.
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&hs, false, None)).await;
    s.send(response_headers(&[(":status", "413")], true)).await;
    assert!(matches!(s.recv().await, Resp::ResponseHeaders(_)));
    assert_eq!(running(&epp), 0, "nothing was dispatched");
    epp.shutdown().await;
}

#[tokio::test]
async fn a_second_request_on_a_routed_stream_is_refused_and_the_first_released() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let hs = post();
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&hs, false, None)).await;
    s.send(body(COMPLETION, true)).await;
    let _routing = s.recv_full().await;
    wait_until(|| running(&epp) == 1).await;
    s.send(request_headers(&hs, false, None)).await;
    let status = final_status(&mut s).await;
    assert_eq!(status.code(), Code::InvalidArgument);
    wait_until(|| running(&epp) == 0).await;
    epp.shutdown().await;
}

/// Sends raw bytes as gRPC messages: what a broken peer puts on the wire.
#[derive(Default)]
struct RawCodec;

struct Raw;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = buf.chunk().to_vec();
        buf.advance(bytes.len());
        Ok(Some(bytes))
    }
}

#[tokio::test]
async fn an_undecodable_message_ends_the_stream_with_invalid_argument() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", epp.grpc_addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static("/envoy.service.ext_proc.v3.ExternalProcessor/Process");
    // An unterminated varint where a field tag should be.
    let garbage = tokio_stream::iter(vec![vec![0xff, 0xff, 0xff]]);
    let status = match grpc.streaming(tonic::Request::new(garbage), path, RawCodec).await {
        Err(status) => status,
        Ok(response) => {
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("the stream ended with OK"),
                    Err(status) => break status,
                }
            }
        }
    };
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with("undecodable ext_proc message"), "{}", status.message());
    assert_eq!(running(&epp), 0);
    epp.shutdown().await;
}

#[tokio::test]
async fn buffered_bodies_share_one_budget_and_past_it_a_request_gets_503() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &["--max-buffered-request-bytes=100"]).await;
    let hs = post();
    // A claims 64 MiB but sends 60 bytes: only what arrives counts against the budget.
    let mut claimed = hs.clone();
    claimed.push(("content-length", "67108864"));
    let mut a = Stream::open(&epp).await;
    a.send(request_headers(&claimed, false, None)).await;
    a.send(body(&[b' '; 60], false)).await;
    // B's 50 bytes would take the total past 100 while A still holds its 60.
    let mut b = Stream::open(&epp).await;
    b.send(request_headers(&hs, false, None)).await;
    b.send(body(&[b' '; 50], false)).await;
    let (status, text) = immediate_of(&b.recv().await);
    assert_eq!(status, 503);
    assert!(text.contains("limit of 100 request-body bytes"), "{text}");
    // A's body completes within the budget and is routed; its share comes back, so C fits.
    a.send(body(COMPLETION, true)).await;
    let _routing = a.recv_full().await;
    let mut c = Stream::open(&epp).await;
    c.send(request_headers(&hs, false, None)).await;
    c.send(body(COMPLETION, true)).await;
    let routing = routing_of(&c.recv_full().await);
    assert!(routing.set.contains_key("x-gateway-destination-endpoint"));
    epp.shutdown().await;
}

#[tokio::test]
async fn a_post_without_a_body_gets_epps_400() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&post(), true, None)).await;
    let (status, text) = immediate_of(&s.recv().await);
    assert_eq!(status, 400);
    assert!(text.contains("empty request body"), "{text}");
    assert_eq!(running(&epp), 0);
    epp.shutdown().await;
}

#[tokio::test]
async fn trailers_after_a_headers_only_routing_are_answered() {
    use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    // `request_body_mode: NONE` with trailers sent: epp routes on the headers, then the trailers come.
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&post(), false, Some(BodySendMode::None))).await;
    let routing = routing_of(&s.recv_full().await);
    assert!(routing.set.contains_key("x-gateway-destination-endpoint"));
    s.send(request_trailers()).await;
    assert!(matches!(s.recv().await, Resp::RequestTrailers(_)));
    epp.shutdown().await;
}

fn vm_size_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn streams_claiming_64_mib_bodies_hold_only_the_bytes_they_send() {
    use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as R;
    const STREAMS: usize = 200;
    const SENT: &[u8] = b"{\"model\":";
    let server = FakeModelServer::start(0, 0.0).await;
    // The budget is exactly what the streams send: once it refuses one more byte, every chunk is held.
    let budget = format!("--max-buffered-request-bytes={}", STREAMS * SENT.len());
    let epp = start_epp(&[server.addr], &[&budget]).await;
    let mut claimed = post();
    claimed.push(("content-length", "67108864"));
    let before = vm_size_kib();
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let s = Stream::open(&epp).await;
        s.send(request_headers(&claimed, false, None)).await;
        s.send(body(SENT, false)).await;
        streams.push(s);
    }
    let mut full = false;
    for _ in 0..200 {
        let mut probe = Stream::open(&epp).await;
        probe.send(request_headers(&post(), false, None)).await;
        probe.send(body(b" ", false)).await;
        let answer = tokio::time::timeout(std::time::Duration::from_millis(50), probe.rx.message()).await;
        if let Ok(Ok(Some(r))) = answer {
            if matches!(&r.response, Some(R::ImmediateResponse(i)) if i.status.as_ref().is_some_and(|s| s.code == 503))
            {
                full = true;
                break;
            }
        }
    }
    assert!(full, "the budget never filled: the streams' chunks were not all held");
    let grown_mib = vm_size_kib().saturating_sub(before) / 1024;
    eprintln!(
        "FIGURE {STREAMS} streams claiming 64 MiB bodies, {} bytes sent each: virtual memory grew {grown_mib} MiB",
        SENT.len()
    );
    // Reserving each claim up front took 13.3 GB here; a few arenas and buffers are all that may grow.
    assert!(grown_mib < 1024, "virtual memory grew {grown_mib} MiB");
    drop(streams);
    epp.shutdown().await;
}
