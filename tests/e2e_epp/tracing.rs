//! OpenTelemetry traces end to end: epp (`--tracing`) behind Envoy exports its spans over OTLP to a real
//! receiver (crates/testkit/src/otlp.rs: the OTLP protobufs over gRPC and over HTTP), continues the
//! client's trace, and hands it on to the model server in `traceparent`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::*;
use epp_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use epp_testkit::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// Spans are batched; the test shortens the batch delay, and waits this long at most for them.
const SPAN_DEADLINE: Duration = Duration::from_secs(30);

fn chat() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "Trace me."}], "max_tokens": 4})
}

fn otel_env<'a>(endpoint: &'a str, protocol: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_TRACES_SAMPLER", "parentbased_always_on"),
        ("OTEL_SERVICE_NAME", "epp-e2e"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    found[0]
}

/// The upstream `traceparent` split into (trace id, parent span id, flags).
async fn upstream_traceparent(client: &reqwest::Client, port: u16) -> (String, String, String) {
    let upstream = backend_last_request(client, port).await.expect("the backend saw the request");
    let value =
        upstream["headers"]["traceparent"].as_str().unwrap_or_else(|| panic!("no traceparent: {upstream}"));
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {value}");
    (parts[1].to_string(), parts[2].to_string(), parts[3].to_string())
}

/// Every span of the trace chains up to `root` (no orphan, no span of another trace).
fn assert_one_tree(spans: &[ReceivedSpan], root: &ReceivedSpan) {
    let by_id: BTreeMap<&str, &ReceivedSpan> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    for span in spans.iter().filter(|s| s.trace_id == root.trace_id && s.span_id != root.span_id) {
        let mut at = span;
        while at.span_id != root.span_id {
            at = by_id.get(at.parent_span_id.as_str()).unwrap_or_else(|| panic!("{} is orphaned", span.name));
        }
    }
}

#[tokio::test]
async fn spans_reach_an_otlp_grpc_receiver_and_the_trace_goes_upstream() {
    let receiver = OtlpReceiver::start();
    let env = otel_env(&receiver.grpc_endpoint, "grpc");
    let test_name = "spans_reach_an_otlp_grpc_receiver_and_the_trace_goes_upstream";
    let Some(stack) = start_stack_with_epp_env(test_name, FULL_DUPLEX, 1, &["--tracing"], &env) else {
        return;
    };
    let client = http_client();
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let response = post_raw(
        &client,
        &stack.url("/v1/chat/completions"),
        chat().to_string(),
        &[("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(response.status(), 200);
    let (trace_id, parent, flags) = upstream_traceparent(&client, stack.backends.ports[0]).await;
    assert_eq!((trace_id.as_str(), flags.as_str()), (TRACE_ID, "01"), "the client's trace, sampled");

    let spans = receiver.wait_for(SPAN_DEADLINE, |s| s.iter().any(|s| s.name == "gateway.request"));
    let root = one(&spans, "gateway.request");
    assert_eq!((root.trace_id.as_str(), root.parent_span_id.as_str()), (TRACE_ID, CLIENT_SPAN));
    assert_eq!(root.span_id, parent, "the model server's parent is epp's request span");
    assert_eq!((root.kind, root.transport, root.service_name.as_str()), (2, "grpc", "epp-e2e"));
    assert_eq!(root.attributes["gen_ai.request.model"], MODEL);
    assert_eq!(root.attributes["http.response.status_code"], "200");
    assert!(!root.attributes["gen_ai.request.id"].is_empty());
    assert_eq!(root.attributes["llm_d.epp.destination"], format!("127.0.0.1:{}", stack.backends.ports[0]));

    // The default profile: its run, the scoring group with a span per scorer, the picker.
    let profile = one(&spans, "run_scheduler_profile");
    assert_eq!(profile.parent_span_id, root.span_id);
    let scoring = one(&spans, "llm_d.epp.scoring");
    assert_eq!(scoring.parent_span_id, profile.span_id);
    let scorers: Vec<_> = spans.iter().filter(|s| s.name.starts_with("llm_d.epp.scorer.")).collect();
    assert!(scorers.len() >= 2, "a span per scorer: {scorers:?}");
    assert!(scorers.iter().all(|s| s.parent_span_id == scoring.span_id));
    assert_eq!(one(&spans, "pick_endpoints").parent_span_id, profile.span_id);
    assert_one_tree(&spans, root);
}

#[tokio::test]
async fn spans_reach_an_otlp_http_receiver_with_flow_control_and_refusals() {
    let receiver = OtlpReceiver::start();
    let env = otel_env(&receiver.http_endpoint, "http/protobuf");
    let test_name = "spans_reach_an_otlp_http_receiver_with_flow_control_and_refusals";
    let config = manifest_dir().join("config/flow-control.yaml");
    let args = ["--tracing", "--config-file", config.to_str().unwrap_or_default()];
    let Some(stack) = start_stack_with_epp_env(test_name, FULL_DUPLEX, 1, &args, &env) else { return };
    let client = http_client();
    set_backend_load(&client, stack.backends.ports[0], &idle_load()).await;
    wait_for_scraped_queues(&stack.epp, &[(stack.backends.ports[0], 0.0)]).await;

    // No traceparent: epp starts the trace, and the model server continues it.
    let response = post_json(&client, &stack.url("/v1/chat/completions"), &chat()).await;
    assert_eq!(response.status(), 200);
    let (trace_id, parent, _) = upstream_traceparent(&client, stack.backends.ports[0]).await;
    // A body epp refuses (400): its span says why.
    let response = post_raw(&client, &stack.url("/v1/chat/completions"), "{not json", &[]).await;
    assert_eq!(response.status(), 400);

    let spans = receiver.wait_for(SPAN_DEADLINE, |s| named(s, "gateway.request").len() >= 2);
    let roots = named(&spans, "gateway.request");
    let routed = roots.iter().find(|s| s.trace_id == trace_id).expect("the routed request's span");
    assert_eq!((routed.span_id.as_str(), routed.parent_span_id.as_str()), (parent.as_str(), ""));
    assert_eq!(routed.transport, "http");
    let queued = spans.iter().find(|s| s.name == "llm_d.epp.flow_control" && s.trace_id == trace_id);
    assert_eq!(queued.expect("the flow-control span").parent_span_id, routed.span_id);
    let refused = roots.iter().find(|s| s.trace_id != trace_id).expect("the refused request's span");
    assert_eq!(refused.attributes["http.response.status_code"], "400");
    assert_one_tree(&spans, routed);
}

/// A variable the SDK would quietly replace by its default stops epp at start-up, naming it.
#[test]
fn a_bad_otel_variable_stops_epp_at_startup_naming_it() {
    for (name, value) in
        [("OTEL_TRACES_SAMPLER", "jaeger_remote"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]
    {
        let port = |p: u16| p.to_string();
        let mut child = std::process::Command::new(workspace_bin("epp"))
            .args(["--tracing", "--endpoints", "127.0.0.1:1", "--bind-address", "127.0.0.1"])
            .args(["--grpc-port", &port(free_port()), "--grpc-health-port", &port(free_port())])
            .args(["--metrics-port", &port(free_port())])
            .env(name, value)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start epp");
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for epp") {
                break status;
            }
            if started.elapsed() > STARTUP_DEADLINE {
                let _ = child.kill();
                panic!("epp started with {name}={value}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
            .expect("stderr");
        assert!(!status.success(), "{name}={value}");
        assert!(stderr.contains(&format!("{name}=\"{value}\" is not supported")), "{stderr}");
    }
}
