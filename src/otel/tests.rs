//! The span tree a request makes, checked in memory (the OTLP round trip is `tests/e2e_tracing.rs`).

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

use super::*;
use crate::scheduling::{ExtensionPoint, NoopObserver, Observer, PluginId};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn provider() -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    (provider, exporter)
}

fn headers(traceparent: Option<&str>) -> Headers {
    let mut h = Headers::new();
    h.push(":method", "POST");
    h.push(":path", "/v1/chat/completions");
    if let Some(tp) = traceparent {
        h.push("traceparent", tp);
    }
    h
}

fn span<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name}: {:?}", names(spans)))
}

fn names(spans: &[SpanData]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_ref()).collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

fn plugin(type_name: &'static str, name: &str) -> PluginId {
    PluginId { type_name, name: name.to_string() }
}

#[test]
fn the_request_span_continues_the_callers_trace_and_goes_on_upstream() {
    let (provider, exporter) = provider();
    let tracing = Tracing::new(&provider);
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let trace = tracing.start_request(&headers(Some(&traceparent)), "req-1").expect("tracing is on");
    let upstream = trace.upstream_headers();
    trace.end(Some(200), None);
    let spans = exporter.get_finished_spans().expect("spans");
    let root = span(&spans, "gateway.request");
    assert_eq!(root.span_context.trace_id(), TraceId::from_hex(TRACE_ID).expect("hex"));
    assert_eq!(root.parent_span_id, SpanId::from_hex(PARENT_ID).expect("hex"));
    assert_eq!(root.span_kind, SpanKind::Server);
    assert_eq!(attribute(root, "gen_ai.request.id").as_deref(), Some("req-1"));
    assert_eq!(attribute(root, "http.response.status_code").as_deref(), Some("200"));
    let sent = upstream.iter().find(|(k, _)| k == "traceparent").map(|(_, v)| v.as_str());
    assert_eq!(sent, Some(format!("00-{TRACE_ID}-{}-01", root.span_context.span_id()).as_str()));
}

#[test]
fn a_malformed_or_missing_traceparent_starts_a_new_trace() {
    let (provider, exporter) = provider();
    let tracing = Tracing::new(&provider);
    for traceparent in [None, Some("00-zz-00f067aa0ba902b7-01"), Some("garbage")] {
        let trace = tracing.start_request(&headers(traceparent), "r").expect("on");
        trace.end(Some(503), Some("no endpoints"));
    }
    let spans = exporter.get_finished_spans().expect("spans");
    assert_eq!(spans.len(), 3);
    for s in &spans {
        assert_eq!(s.parent_span_id, SpanId::INVALID, "a root span");
        assert_ne!(s.span_context.trace_id(), TraceId::from_hex(TRACE_ID).expect("hex"));
        assert_eq!(s.status, Status::error("no endpoints"));
    }
}

#[test]
fn disabled_tracing_starts_nothing() {
    assert!(Tracing::disabled().start_request(&headers(None), "r").is_none());
    assert!(!Tracing::default().is_enabled());
}

/// A decision's plugin calls as the scheduler makes them: producers, then a profile's filters, scorers
/// and picker, then the pre-request hooks.
#[test]
fn plugin_calls_nest_under_their_step_and_profile() {
    let (provider, exporter) = provider();
    let trace = Tracing::new(&provider).start_request(&headers(None), "r").expect("on");
    let ran = std::cell::Cell::new(0);
    {
        let observer = TracedObserver::new(&NoopObserver, &trace);
        let mut call = || ran.set(ran.get() + 1);
        observer.time(ExtensionPoint::PrepareData, &plugin("predicted-latency-producer", "p"), &mut call);
        observer.time(ExtensionPoint::ProfilePicker, &plugin("single-profile-handler", "h"), &mut call);
        observer.profile("default", &mut || {
            let mut call = || ran.set(ran.get() + 1);
            observer.time(ExtensionPoint::Filter, &plugin("decode-filter", "f"), &mut call);
            observer.time(ExtensionPoint::Scorer, &plugin("queue-scorer", "q"), &mut call);
            observer.time(ExtensionPoint::Scorer, &plugin("kv-cache-utilization-scorer", "k"), &mut call);
            observer.time(ExtensionPoint::Picker, &plugin("max-score-picker", "m"), &mut call);
        });
        observer.time(ExtensionPoint::PreRequest, &plugin("prefix-cache-scorer", "x"), &mut call);
    }
    trace.end(None, None);
    assert_eq!(ran.get(), 7, "every plugin ran once");
    let spans = exporter.get_finished_spans().expect("spans");
    let id = |name: &str| span(&spans, name).span_context.span_id();
    let parent = |name: &str| span(&spans, name).parent_span_id;
    let root = id("gateway.request");
    assert_eq!(parent("llm_d.epp.prepare_data"), root);
    assert_eq!(parent("llm_d.epp.producer.predicted-latency-producer"), id("llm_d.epp.prepare_data"));
    assert_eq!(parent("llm_d.epp.profile_handler.single-profile-handler"), root);
    assert_eq!(parent("run_scheduler_profile"), root);
    assert_eq!(
        attribute(span(&spans, "run_scheduler_profile"), "llm_d.epp.profile").as_deref(),
        Some("default")
    );
    assert_eq!(parent("filter_endpoints"), id("run_scheduler_profile"));
    assert_eq!(parent("llm_d.epp.filter.decode-filter"), id("filter_endpoints"));
    assert_eq!(parent("llm_d.epp.scoring"), id("run_scheduler_profile"));
    assert_eq!(parent("llm_d.epp.scorer.queue-scorer"), id("llm_d.epp.scoring"));
    assert_eq!(parent("llm_d.epp.scorer.kv-cache-utilization-scorer"), id("llm_d.epp.scoring"));
    assert_eq!(parent("pick_endpoints"), id("run_scheduler_profile"));
    assert_eq!(parent("llm_d.epp.pre_request"), root);
    assert_eq!(parent("llm_d.epp.pre_request.prefix-cache-scorer"), id("llm_d.epp.pre_request"));
    let scorer = span(&spans, "llm_d.epp.scorer.queue-scorer");
    assert_eq!(attribute(scorer, "llm_d.epp.plugin.name").as_deref(), Some("q"));
    assert_eq!(spans.len(), 13, "{:?}", names(&spans));
    assert!(spans
        .iter()
        .all(|s| s.span_context.trace_id() == span(&spans, "gateway.request").span_context.trace_id()));
}
