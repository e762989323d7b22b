//! The response path and request lifecycle: streamed responses pass through chunk by chunk, the model
//! name is rewritten back, and whatever way a stream ends, what the request held is released.

use crate::grpc_support::*;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;

const COMPLETION: &[u8] = br#"{"model":"m","prompt":"hello world","stream":true}"#;

fn metric_value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn routed_stream(epp: &epp::app::Server, headers: &[(&str, &str)], payload: &[u8]) -> Stream {
    let mut s = Stream::open(epp).await;
    let mut h: Vec<(&str, &str)> = vec![(":method", "POST"), (":path", "/v1/completions")];
    h.extend_from_slice(headers);
    s.send(request_headers(&h, false, None)).await;
    s.send(body(payload, true)).await;
    let _routing = s.recv_full().await;
    let (_, eos) = streamed_of(&s.recv().await);
    assert!(eos);
    s
}

#[tokio::test]
async fn sse_chunks_pass_through_one_by_one() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let mut s = routed_stream(&epp, &[], COMPLETION).await;
    s.send(response_headers(&[(":status", "200"), ("content-type", "text/event-stream")], false)).await;
    assert!(matches!(s.recv().await, Resp::ResponseHeaders(_)));
    let chunks: [&[u8]; 3] = [
        b"data: {\"model\":\"m\",\"choices\":[{\"text\":\"a\"}]}\n\n",
        b"data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n",
        b"data: [DONE]\n\n",
    ];
    for (i, c) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        s.send(response_body(c, last)).await;
        // The echo arrives before the next chunk is sent: nothing is buffered.
        let (bytes, eos) = streamed_of(&s.recv().await);
        assert_eq!(&bytes, c);
        assert_eq!(eos, last);
    }
    wait_until(|| metric_value(&epp.metrics.encode(), "inference_objective_running_requests{") == Some(0.0))
        .await;
    // epp's time on the response is one observation for the request, summed over its four messages (as
    // llm-d-router records it), made when the stream ends.
    drop(s);
    wait_until(|| metric_value(&epp.metrics.encode(), RESPONSE_PROCESSING_COUNT) == Some(1.0)).await;
    epp.shutdown().await;
}

const RESPONSE_PROCESSING_COUNT: &str = "llm_d_epp_response_processing_duration_seconds_count";

#[tokio::test]
async fn response_model_name_is_rewritten_back() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let mut s = routed_stream(&epp, &[("x-gateway-model-name-rewrite", "served-model")], COMPLETION).await;
    s.send(response_headers(&[(":status", "200"), ("content-type", "application/json")], false)).await;
    assert!(matches!(s.recv().await, Resp::ResponseHeaders(_)));
    s.send(response_body(br#"{"id":"x","model":"served-model","choices":[]}"#, true)).await;
    let (bytes, eos) = streamed_of(&s.recv().await);
    assert_eq!(bytes, br#"{"id":"x","model":"m","choices":[]}"#);
    assert!(eos);
    epp.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_stream_releases_what_it_held() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let mut streams = Vec::new();
    for _ in 0..5 {
        streams.push(routed_stream(&epp, &[], COMPLETION).await);
    }
    let running = || metric_value(&epp.metrics.encode(), "inference_objective_running_requests{");
    wait_until(|| running() == Some(5.0)).await;
    // Envoy resets the streams mid-response.
    for s in &mut streams {
        s.send(response_headers(&[(":status", "200")], false)).await;
        assert!(matches!(s.recv().await, Resp::ResponseHeaders(_)));
    }
    drop(streams);
    wait_until(|| running() == Some(0.0)).await;
    // An aborted response still records what epp spent on its headers, once per request.
    wait_until(|| metric_value(&epp.metrics.encode(), RESPONSE_PROCESSING_COUNT) == Some(5.0)).await;
    epp.shutdown().await;
}

#[tokio::test]
async fn served_endpoint_is_echoed_with_the_conformance_config() {
    let server = FakeModelServer::start(0, 0.0).await;
    let config = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n\
                  - type: header-based-testing-filter\n- type: destination-endpoint-served-verifier\n\
                  schedulingProfiles:\n- name: conformance-profile\n  plugins:\n  - pluginRef: header-based-testing-filter\n";
    let config_arg = format!("--config-text={config}");
    let epp = start_epp(&[server.addr], &[&config_arg]).await;
    let addr = server.addr.to_string();
    let mut s = routed_stream(&epp, &[("test-epp-endpoint-selection", &addr)], COMPLETION).await;
    let mut msg = response_headers(&[(":status", "200")], false);
    msg.metadata_context = Some(envoy_types::pb::envoy::config::core::v3::Metadata {
        filter_metadata: std::collections::HashMap::from([(
            "envoy.lb".to_string(),
            envoy_types::pb::google::protobuf::Struct {
                fields: std::collections::HashMap::from([(
                    "x-gateway-destination-endpoint-served".to_string(),
                    envoy_types::pb::google::protobuf::Value {
                        kind: Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(addr.clone())),
                    },
                )]),
            },
        )]),
        ..Default::default()
    });
    s.send(msg).await;
    let Resp::ResponseHeaders(h) = s.recv().await else { panic!("expected response headers answer") };
    let set: Vec<(String, Vec<u8>)> = h
        .response
        .unwrap_or_default()
        .header_mutation
        .unwrap_or_default()
        .set_headers
        .into_iter()
        .filter_map(|h| h.header)
        .map(|h| (h.key, h.raw_value))
        .collect();
    assert!(set.contains(&("x-conformance-test-served-endpoint".to_string(), addr.into_bytes())), "{set:?}");
    epp.shutdown().await;
}
