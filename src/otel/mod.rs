//! OpenTelemetry traces: one `gateway.request` span per ext_proc stream, with a child for each step epp
//! takes (the flow-control wait, the data producers — the latency predictor among them —, admitters, each
//! scheduling profile with its filters, scorers and picker, the pre-request hooks), exported over OTLP.
//! The W3C `traceparent` the request arrives with is the span's parent, and the one epp writes upstream
//! names the span, so the trace goes on in the model server.
//!
//! Span names follow llm-d-router's where the step is the same (`gateway.request`,
//! `run_scheduler_profile`, `filter_endpoints`, `llm_d.epp.scoring`, `llm_d.epp.scorer.<type>`,
//! `pick_endpoints`; `llm-d/llm-d-router:pkg/epp/scheduling/scheduler_profile.go`), and so do the request
//! attributes (`gen_ai.request.id`, `gen_ai.request.model`).
//!
//! Off (the default, `--tracing=false`), nothing here runs: a stream starts no span, the director's
//! observer is the plain one, and no header is touched. The pieces: [`settings`] (the `OTEL_*`
//! variables, validated), [`export`] (the provider and its OTLP exporter), [`observer`] (the spans of the
//! decision, made from the scheduler's plugin timings).

pub mod export;
mod observer;
pub mod settings;

use std::sync::Arc;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub use export::tracer_provider;
pub use observer::TracedObserver;
pub use settings::{TracingConfigError, TracingSettings};

use crate::request::Headers;

/// The instrumentation scope of epp's spans.
const SCOPE: &str = "epp";

/// Starts request traces, or nothing when tracing is off. Cheap to clone.
#[derive(Clone, Default)]
pub struct Tracing {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracing").field("enabled", &self.inner.is_some()).finish()
    }
}

impl Tracing {
    /// Tracing off: [`start_request`](Self::start_request) returns `None`.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Traces through `provider`.
    pub fn new(provider: &SdkTracerProvider) -> Self {
        let tracer = provider.tracer(SCOPE);
        Self { inner: Some(Arc::new(Inner { tracer, propagator: TraceContextPropagator::new() })) }
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Starts the `gateway.request` span of a request whose headers are `headers`, as a child of the
    /// `traceparent` they carry (a malformed one is ignored: the request starts a new trace).
    pub fn start_request(&self, headers: &Headers, request_id: &str) -> Option<RequestTrace> {
        let inner = self.inner.as_ref()?;
        let parent = inner.propagator.extract(&HeaderExtractor(headers));
        let mut attributes = vec![KeyValue::new("gen_ai.request.id", request_id.to_string())];
        if let Some(method) = headers.get(":method") {
            attributes.push(KeyValue::new("http.request.method", method.to_string()));
        }
        if let Some(path) = headers.get(":path") {
            attributes.push(KeyValue::new("url.path", path.to_string()));
        }
        let span = inner
            .tracer
            .span_builder("gateway.request")
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&inner.tracer, &parent);
        Some(RequestTrace { inner: inner.clone(), cx: parent.with_span(span) })
    }
}

/// One request's trace: its `gateway.request` span, which ends when the trace is dropped or
/// [`end`](Self::end)ed.
#[derive(Clone)]
pub struct RequestTrace {
    inner: Arc<Inner>,
    cx: Context,
}

impl std::fmt::Debug for RequestTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestTrace").field("span", &self.cx.span().span_context()).finish()
    }
}

impl RequestTrace {
    /// Sets an attribute on the `gateway.request` span.
    pub fn set_attribute(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Starts a child of the `gateway.request` span, now; it ends when dropped.
    pub fn child(&self, name: &'static str) -> opentelemetry_sdk::trace::Span {
        self.child_of(&self.cx, name.into(), Vec::new())
    }

    fn child_of(
        &self,
        parent: &Context,
        name: std::borrow::Cow<'static, str>,
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        let tracer = &self.inner.tracer;
        tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(tracer, parent)
    }

    /// The `traceparent` (and `tracestate`, when there is one) that makes the model server's spans
    /// children of this request's. Sent whether or not this trace is sampled: the flag tells the server.
    pub fn upstream_headers(&self) -> Vec<(String, String)> {
        let mut headers = HeaderInjector(Vec::with_capacity(2));
        self.inner.propagator.inject_context(&self.cx, &mut headers);
        headers.0
    }

    /// Ends the `gateway.request` span with the response's status: an error status (and the reason)
    /// for a 5xx or a refusal, unset otherwise.
    pub fn end(self, http_status: Option<u16>, error: Option<&str>) {
        let span = self.cx.span();
        if let Some(code) = http_status {
            span.set_attribute(KeyValue::new("http.response.status_code", i64::from(code)));
        }
        if let Some(why) = error {
            span.set_status(Status::error(why.to_string()));
        } else if http_status.is_some_and(|c| c >= 500) {
            span.set_status(Status::error(String::new()));
        }
        span.end();
    }
}

/// Reads `traceparent`/`tracestate` from epp's header list (names are lower case on HTTP/2).
struct HeaderExtractor<'a>(&'a Headers);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k).collect()
    }
}

struct HeaderInjector(Vec<(String, String)>);

impl Injector for HeaderInjector {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_string(), value));
    }
}

#[cfg(test)]
mod tests;
