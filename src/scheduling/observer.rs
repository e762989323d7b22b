//! How the framework reports plugin and cycle timings without plugins reading the clock themselves.
//! The server hands in a metrics-backed observer; tests and the virtual-time lab use [`NoopObserver`].

use std::time::Instant;

use super::plugin::PluginId;

/// The extension points timed in `plugin_duration_seconds{extension_point}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionPoint {
    ProfilePicker,
    Filter,
    Scorer,
    Picker,
    ProcessProfilesResults,
    PrepareData,
    Admit,
    PreRequest,
    ResponseReceived,
    ResponseStreaming,
}

impl ExtensionPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            ExtensionPoint::ProfilePicker => "ProfilePicker",
            ExtensionPoint::Filter => "Filter",
            ExtensionPoint::Scorer => "Scorer",
            ExtensionPoint::Picker => "Picker",
            ExtensionPoint::ProcessProfilesResults => "ProcessProfilesResults",
            ExtensionPoint::PrepareData => "PrepareData",
            ExtensionPoint::Admit => "Admit",
            ExtensionPoint::PreRequest => "PreRequest",
            ExtensionPoint::ResponseReceived => "ResponseReceived",
            ExtensionPoint::ResponseStreaming => "ResponseStreaming",
        }
    }
}

/// Receives timings of plugin calls.
pub trait Observer: Send + Sync {
    /// Runs `f`, attributing its duration to `id` at `point`.
    fn time(&self, point: ExtensionPoint, id: &PluginId, f: &mut dyn FnMut());

    /// Attributes `seconds` already measured to `id` at `point`: a call the framework awaited (the
    /// token producer's), which `time` cannot wrap.
    fn record(&self, _point: ExtensionPoint, _id: &PluginId, _seconds: f64) {}

    /// Runs `f`, one run of the scheduling profile `name` (its filters, scorers and picker). A tracing
    /// observer opens a span over it; the others just run it.
    fn profile(&self, _name: &str, f: &mut dyn FnMut()) {
        f();
    }
}

/// Runs plugins without timing them.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl Observer for NoopObserver {
    fn time(&self, _point: ExtensionPoint, _id: &PluginId, f: &mut dyn FnMut()) {
        f();
    }
}

/// Times plugin calls and hands each duration to a sink (the metrics registry).
pub(crate) struct TimingObserver<F: Fn(ExtensionPoint, &PluginId, f64) + Send + Sync> {
    sink: F,
}

impl<F: Fn(ExtensionPoint, &PluginId, f64) + Send + Sync> TimingObserver<F> {
    pub(crate) fn new(sink: F) -> Self {
        Self { sink }
    }
}

impl<F: Fn(ExtensionPoint, &PluginId, f64) + Send + Sync> Observer for TimingObserver<F> {
    fn time(&self, point: ExtensionPoint, id: &PluginId, f: &mut dyn FnMut()) {
        let start = Instant::now();
        f();
        (self.sink)(point, id, start.elapsed().as_secs_f64());
    }

    fn record(&self, point: ExtensionPoint, id: &PluginId, seconds: f64) {
        (self.sink)(point, id, seconds);
    }
}
