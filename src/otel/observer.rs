//! The decision's spans, made from the plugin timings the scheduler already reports: a request's
//! [`TracedObserver`] wraps the director's observer (which keeps timing plugins into the metrics) and
//! turns each plugin call into a span, so the pure scheduling core reads no clock and knows nothing of
//! tracing.
//!
//! Consecutive calls at one extension point are grouped under one span, as llm-d-router groups them
//! (`filter_endpoints` over the filters, `llm_d.epp.scoring` over the scorers, `llm_d.epp.prepare_data`
//! over the producers, …), and each profile's calls under its `run_scheduler_profile`.

use std::borrow::Cow;
use std::sync::Mutex;

use opentelemetry::trace::{Span as _, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use super::RequestTrace;
use crate::scheduling::{ExtensionPoint, Observer, PluginId};

/// One request's observer: plugin calls become spans under its `gateway.request` span.
pub struct TracedObserver<'a> {
    inner: &'a dyn Observer,
    trace: &'a RequestTrace,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The open `run_scheduler_profile` spans (innermost last); plugin calls outside one belong to the
    /// request.
    profiles: Vec<Context>,
    /// The open group span and its extension point.
    group: Option<(ExtensionPoint, Context)>,
}

impl<'a> TracedObserver<'a> {
    pub fn new(inner: &'a dyn Observer, trace: &'a RequestTrace) -> Self {
        Self { inner, trace, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic inside a plugin poisons nothing worth refusing: the spans are best effort.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The parent of a plugin call at `point`: its group span, opened now if the previous call was at
    /// another point.
    fn parent_for(&self, point: ExtensionPoint) -> Context {
        let mut state = self.lock();
        if let Some((open, cx)) = &state.group {
            if *open == point {
                return cx.clone();
            }
        }
        close_group(&mut state);
        let outer = state.profiles.last().cloned().unwrap_or_else(|| self.trace.cx.clone());
        let Some(name) = group_name(point) else { return outer };
        let span = self.trace.child_of(&outer, name.into(), Vec::new());
        let cx = outer.with_span(span);
        state.group = Some((point, cx.clone()));
        cx
    }

    /// Ends the open group and every open profile: the observer's spans end with the decision.
    pub fn finish(&self) {
        let mut state = self.lock();
        close_group(&mut state);
        while let Some(cx) = state.profiles.pop() {
            cx.span().end();
        }
    }
}

impl Drop for TracedObserver<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

fn close_group(state: &mut State) {
    if let Some((_, cx)) = state.group.take() {
        cx.span().end();
    }
}

impl Observer for TracedObserver<'_> {
    fn time(&self, point: ExtensionPoint, id: &PluginId, f: &mut dyn FnMut()) {
        let parent = self.parent_for(point);
        let attributes = vec![
            KeyValue::new("llm_d.epp.plugin.type", id.type_name),
            KeyValue::new("llm_d.epp.plugin.name", id.name.clone()),
        ];
        let mut span = self.trace.child_of(&parent, span_name(point, id.type_name), attributes);
        self.inner.time(point, id, f);
        span.end();
    }

    fn record(&self, point: ExtensionPoint, id: &PluginId, seconds: f64) {
        self.inner.record(point, id, seconds);
    }

    fn profile(&self, name: &str, f: &mut dyn FnMut()) {
        {
            let mut state = self.lock();
            close_group(&mut state);
            let outer = state.profiles.last().cloned().unwrap_or_else(|| self.trace.cx.clone());
            let attributes = vec![KeyValue::new("llm_d.epp.profile", name.to_string())];
            let span = self.trace.child_of(&outer, "run_scheduler_profile".into(), attributes);
            state.profiles.push(outer.with_span(span));
        }
        self.inner.profile(name, f);
        let mut state = self.lock();
        close_group(&mut state);
        if let Some(cx) = state.profiles.pop() {
            cx.span().end();
        }
    }
}

/// The span over consecutive calls at `point`, where llm-d-router has one.
fn group_name(point: ExtensionPoint) -> Option<&'static str> {
    match point {
        ExtensionPoint::Filter => Some("filter_endpoints"),
        ExtensionPoint::Scorer => Some("llm_d.epp.scoring"),
        ExtensionPoint::PrepareData => Some("llm_d.epp.prepare_data"),
        ExtensionPoint::Admit => Some("llm_d.epp.admit"),
        ExtensionPoint::PreRequest => Some("llm_d.epp.pre_request"),
        _ => None,
    }
}

/// One plugin call's span: `<kind>.<plugin type>`, or llm-d's name for the picker.
fn span_name(point: ExtensionPoint, type_name: &str) -> Cow<'static, str> {
    let kind = match point {
        ExtensionPoint::Picker => return "pick_endpoints".into(),
        ExtensionPoint::ProfilePicker => "llm_d.epp.profile_handler",
        ExtensionPoint::Filter => "llm_d.epp.filter",
        ExtensionPoint::Scorer => "llm_d.epp.scorer",
        ExtensionPoint::ProcessProfilesResults => "llm_d.epp.process_results",
        ExtensionPoint::PrepareData => "llm_d.epp.producer",
        ExtensionPoint::Admit => "llm_d.epp.admitter",
        ExtensionPoint::PreRequest => "llm_d.epp.pre_request",
        ExtensionPoint::ResponseReceived => "llm_d.epp.response_received",
        ExtensionPoint::ResponseStreaming => "llm_d.epp.response_streaming",
    };
    format!("{kind}.{type_name}").into()
}
