//! The request path of the ext_proc stream, driven over loopback gRPC like Envoy drives it: both body
//! modes, header-only requests, the subset hint, split and large bodies, trailers, rewrites, errors.

use crate::grpc_support::*;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;

const COMPLETION: &[u8] = br#"{"model":"m","prompt":"hello world","max_tokens":10}"#;

async fn two_servers() -> (FakeModelServer, FakeModelServer) {
    // `idle` has an empty queue and cache: the default profile must prefer it.
    let idle = FakeModelServer::start(0, 0.1).await;
    let busy = FakeModelServer::start(8, 0.9).await;
    (idle, busy)
}

fn hdrs(path: &str, extra: &[(&'static str, &str)]) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> =
        post_headers(path).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    h.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    h
}

fn as_refs(h: &[(String, String)]) -> Vec<(&str, &str)> {
    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[tokio::test]
async fn full_duplex_routes_to_the_idle_endpoint_and_forwards_the_body_unchanged() {
    let (idle, busy) = two_servers().await;
    let epp = start_epp(&[busy.addr, idle.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    let h = hdrs("/v1/completions", &[("x-request-id", "req-1")]);
    s.send(request_headers(&as_refs(&h), false, Some(BodySendMode::FullDuplexStreamed))).await;
    s.send(body(COMPLETION, true)).await;
    let r = routing_of(&s.recv_full().await);
    let dest = idle.addr.to_string();
    assert_eq!(r.set.get("x-gateway-destination-endpoint"), Some(&dest));
    assert_eq!(r.metadata_destination.as_ref(), Some(&dest));
    assert_eq!(r.set.get("content-length"), Some(&COMPLETION.len().to_string()));
    assert!(r.clear_route_cache);
    assert!(!r.set.contains_key("x-request-id"), "an existing request id is not re-set");
    let (bytes, eos) = streamed_of(&s.recv().await);
    assert_eq!(bytes, COMPLETION, "unchanged body is forwarded byte for byte");
    assert!(eos);
    epp.shutdown().await;
}

#[tokio::test]
async fn without_protocol_config_full_duplex_is_assumed_and_a_request_id_is_generated() {
    let (idle, _busy) = two_servers().await;
    let epp = start_epp(&[idle.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&as_refs(&hdrs("/v1/completions", &[])), false, None)).await;
    s.send(body(COMPLETION, true)).await;
    let r = routing_of(&s.recv_full().await);
    let id = r.set.get("x-request-id").expect("generated x-request-id");
    assert_eq!(id.len(), 36);
    let (_, eos) = streamed_of(&s.recv().await);
    assert!(eos);
    epp.shutdown().await;
}

#[tokio::test]
async fn buffered_mode_continues_headers_and_routes_on_the_body() {
    let (idle, busy) = two_servers().await;
    let epp = start_epp(&[busy.addr, idle.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&as_refs(&hdrs("/v1/completions", &[])), false, Some(BodySendMode::Buffered)))
        .await;
    match s.recv().await {
        Resp::RequestHeaders(h) => assert!(h.response.unwrap_or_default().header_mutation.is_none()),
        other => panic!("expected CONTINUE, got {other:?}"),
    }
    s.send(body(COMPLETION, true)).await;
    let answer = s.recv_full().await;
    assert!(matches!(answer.response, Some(Resp::RequestBody(_))));
    let r = routing_of(&answer);
    assert_eq!(r.set.get("x-gateway-destination-endpoint"), Some(&idle.addr.to_string()));
    assert_eq!(r.set.get("content-length"), Some(&COMPLETION.len().to_string()));
    assert!(r.body.is_none(), "an unchanged body is not replaced");
    epp.shutdown().await;
}

#[tokio::test]
async fn header_only_request_is_routed_by_load() {
    let (idle, busy) = two_servers().await;
    let epp = start_epp(&[busy.addr, idle.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    let h = [(":method", "GET"), (":path", "/v1/models")];
    s.send(request_headers(&h, true, Some(BodySendMode::FullDuplexStreamed))).await;
    let r = routing_of(&s.recv_full().await);
    assert_eq!(r.set.get("x-gateway-destination-endpoint"), Some(&idle.addr.to_string()));
    epp.shutdown().await;
}

#[tokio::test]
async fn subset_hint_restricts_candidates_an_empty_subset_is_503_and_a_malformed_one_400() {
    let (idle, busy) = two_servers().await;
    let epp = start_epp(&[busy.addr, idle.addr], &[]).await;

    let mut s = Stream::open(&epp).await;
    let hs = hdrs("/v1/completions", &[]);
    let busy_addr = busy.addr.to_string();
    s.send(with_subset(request_headers(&as_refs(&hs), false, None), &[&busy_addr])).await;
    s.send(body(COMPLETION, true)).await;
    let r = routing_of(&s.recv_full().await);
    assert_eq!(r.set.get("x-gateway-destination-endpoint"), Some(&busy_addr), "the subset wins over load");

    let mut s = Stream::open(&epp).await;
    s.send(with_subset(request_headers(&as_refs(&hs), false, None), &[])).await;
    s.send(body(COMPLETION, true)).await;
    let (status, text) = immediate_of(&s.recv().await);
    assert_eq!(status, 503);
    assert_eq!(
        text,
        "inference error: ServiceUnavailable - failed to find endpoint candidates for serving the request"
    );

    // A malformed entry is the gateway's mistake, named in a 400 (not silently dropped into a 503).
    let mut s = Stream::open(&epp).await;
    s.send(with_subset(request_headers(&as_refs(&hs), false, None), &[&busy_addr, "pod-a"])).await;
    s.send(body(COMPLETION, true)).await;
    let (status, text) = immediate_of(&s.recv().await);
    assert_eq!(status, 400);
    assert!(text.contains("invalid endpoint subset entry \"pod-a\""), "{text}");
    epp.shutdown().await;
}

#[tokio::test]
async fn bad_inputs_get_clear_errors() {
    let (idle, _busy) = two_servers().await;
    let epp = start_epp(&[idle.addr], &[]).await;
    let cases: [(&str, &[u8], i32, &str); 4] = [
        ("/v1/completions", b"{not json", 400, "inference error: BadRequest - "),
        (
            "/v1/completions",
            br#"{"prompt":"hi"}"#,
            400,
            "inference error: BadRequest - model not found in request body",
        ),
        ("/v1/chat/completions", br#"{"model":"m","messages":[]}"#, 400, "inference error: BadRequest - "),
        ("/v1/completions", br#"{"model":"m"}"#, 400, "inference error: BadRequest - "),
    ];
    for (path, payload, want_status, want_prefix) in cases {
        let mut s = Stream::open(&epp).await;
        s.send(request_headers(&as_refs(&hdrs(path, &[])), false, None)).await;
        s.send(body(payload, true)).await;
        let (status, text) = immediate_of(&s.recv().await);
        assert_eq!(status, want_status, "{path} {}", String::from_utf8_lossy(payload));
        assert!(text.starts_with(want_prefix), "{text}");
    }
    epp.shutdown().await;
}

#[tokio::test]
async fn no_endpoints_is_503() {
    let epp = start_epp(&[], &[]).await;
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&as_refs(&hdrs("/v1/completions", &[])), false, None)).await;
    s.send(body(COMPLETION, true)).await;
    let (status, _) = immediate_of(&s.recv().await);
    assert_eq!(status, 503);
    epp.shutdown().await;
}

#[tokio::test]
async fn split_and_large_bodies_are_reassembled_and_rechunked() {
    let (idle, _busy) = two_servers().await;
    let epp = start_epp(&[idle.addr], &[]).await;
    let prompt = "x".repeat(220_000);
    let payload = format!(r#"{{"model":"m","prompt":"{prompt}"}}"#).into_bytes();
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&as_refs(&hdrs("/v1/completions", &[])), false, None)).await;
    for (i, chunk) in payload.chunks(30_000).enumerate() {
        let last = (i + 1) * 30_000 >= payload.len();
        s.send(body(chunk, last)).await;
    }
    let r = routing_of(&s.recv_full().await);
    assert_eq!(r.set.get("content-length"), Some(&payload.len().to_string()));
    let mut forwarded = Vec::new();
    loop {
        let (bytes, eos) = streamed_of(&s.recv().await);
        assert!(bytes.len() <= 62_000);
        forwarded.extend(bytes);
        if eos {
            break;
        }
    }
    assert_eq!(forwarded, payload);
    epp.shutdown().await;
}

#[tokio::test]
async fn trailers_end_the_body() {
    let (idle, _busy) = two_servers().await;
    let epp = start_epp(&[idle.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    s.send(request_headers(&as_refs(&hdrs("/v1/completions", &[])), false, None)).await;
    s.send(body(COMPLETION, false)).await;
    s.send(request_trailers()).await;
    let r = routing_of(&s.recv_full().await);
    assert!(r.set.contains_key("x-gateway-destination-endpoint"));
    let (bytes, eos) = streamed_of(&s.recv().await);
    assert_eq!(bytes, COMPLETION);
    assert!(!eos, "trailers follow, so the body does not end the stream");
    assert!(matches!(s.recv().await, Resp::RequestTrailers(_)));
    epp.shutdown().await;
}

#[tokio::test]
async fn model_rewrite_splices_the_body_and_client_control_headers_are_removed() {
    let (idle, _busy) = two_servers().await;
    let epp = start_epp(&[idle.addr], &[]).await;
    let mut s = Stream::open(&epp).await;
    let h = hdrs(
        "/v1/completions",
        &[
            ("x-gateway-model-name-rewrite", "other-model"),
            ("x-gateway-destination-endpoint", "6.6.6.6:80"),
            ("x-gateway-destination-endpoint-subset", "6.6.6.6:80"),
        ],
    );
    s.send(request_headers(&as_refs(&h), false, None)).await;
    let original = br#"{ "model" : "m", "prompt":"hi", "n": 12345678901234567890 }"#;
    s.send(body(original, true)).await;
    let r = routing_of(&s.recv_full().await);
    assert_eq!(
        r.set.get("x-gateway-destination-endpoint"),
        Some(&idle.addr.to_string()),
        "client value overwritten"
    );
    assert!(r.removed.contains(&"x-gateway-destination-endpoint-subset".to_string()));
    let expected = br#"{ "model" : "other-model", "prompt":"hi", "n": 12345678901234567890 }"#;
    assert_eq!(r.set.get("content-length"), Some(&expected.len().to_string()));
    let (bytes, _) = streamed_of(&s.recv().await);
    assert_eq!(bytes, expected, "only the model literal changes; whitespace and big integers survive");
    epp.shutdown().await;
}
