//! A request that has been dispatched to an endpoint. Whatever way the request ends — response done,
//! backend error, client cancel, Envoy reset, epp shutdown — dropping this value completes it exactly once,
//! so the in-flight counters and running gauges plugins and metrics keep can never leak.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Director;
use super::{OwnedLabels, RequestMetrics, RequestSeries};
use crate::flowcontrol::DispatchWaker;
use crate::health::HealthMonitor;
use crate::request::{Headers, ResponseReader};
use crate::scheduling::{Completion, CompletionKind, DispatchInfo, Observer, Pipeline};

/// A dispatched request's lifecycle handle.
pub struct ActiveRequest {
    pipeline: Arc<Pipeline>,
    metrics: Arc<RequestMetrics>,
    /// The flow's series, found once (`RequestMetrics::series`).
    series: Arc<RequestSeries>,
    observer: Arc<dyn Observer>,
    pub info: DispatchInfo,
    pub labels: OwnedLabels,
    received_at: Instant,
    first_chunk_at: Option<Instant>,
    response_bytes: usize,
    status: Option<u16>,
    /// Usage, SSE detection and the model name rewritten back.
    response: ResponseReader,
    completed: bool,
    /// Wakes the flow controller's dispatcher when the request completes (capacity may have freed).
    dispatch_waker: Option<DispatchWaker>,
    /// Hears the response status, which feeds the endpoint's circuit breaker.
    health: Option<Arc<HealthMonitor>>,
    /// This request is its endpoint's half-open probe: its outcome decides whether the endpoint returns.
    probe: bool,
}

impl std::fmt::Debug for ActiveRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveRequest").field("info", &self.info).field("completed", &self.completed).finish()
    }
}

impl ActiveRequest {
    /// Registers the dispatch: counts the request as running. Called after `pre_request` ran.
    pub(crate) fn start(
        director: &Director,
        info: DispatchInfo,
        labels: OwnedLabels,
        series: Arc<RequestSeries>,
        received_at: Instant,
        response: ResponseReader,
    ) -> Self {
        let metrics = director.metrics.clone();
        let pipeline = director.pipeline.clone();
        let observer = director.observer.clone();
        // Completions wake the flow controller's dispatcher (capacity may have freed).
        let dispatch_waker =
            director.admission.flow_controller().map(crate::flowcontrol::FlowController::waker);
        metrics.running_inc(&series);
        let health = director.health.clone();
        let probe = health.as_ref().is_some_and(|h| h.on_dispatch(&info.endpoint, Instant::now()));
        Self {
            pipeline,
            metrics,
            series,
            observer,
            info,
            labels,
            received_at,
            first_chunk_at: None,
            response_bytes: 0,
            status: None,
            response,
            completed: false,
            dispatch_waker,
            health,
            probe,
        }
    }

    /// Response headers arrived (`served`: the endpoint Envoy reports it used); returns the headers the
    /// response hooks want set on the response.
    pub fn on_response_headers(&mut self, headers: &Headers, served: Option<&str>) -> Vec<(String, String)> {
        let first_headers = self.status.is_none();
        self.status = self.response.on_headers(headers);
        if let (Some(health), Some(status), true) = (&self.health, self.status, first_headers) {
            health.on_response(&self.info.endpoint, status, served, self.probe, Instant::now());
            self.probe = false;
        }
        let mut set = Vec::new();
        self.pipeline.on_response_headers(&self.info, self.status, served, &mut set, self.observer.as_ref());
        set
    }

    /// A response body chunk passes through; returns the chunk to forward instead when the model name
    /// was rewritten back in it.
    pub fn on_response_chunk(&mut self, chunk: &[u8], now: Instant) -> Option<Vec<u8>> {
        let first = self.first_chunk_at.is_none();
        if first {
            self.first_chunk_at = Some(now);
            self.metrics.record_ttft(
                &self.series,
                now.saturating_duration_since(self.received_at),
                self.response.streaming(),
            );
        }
        self.response_bytes += chunk.len();
        self.pipeline.on_response_chunk(&self.info, chunk, first, now, self.observer.as_ref());
        self.response.on_chunk(chunk)
    }

    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Completes the request once, with the usage the response carried when it finished; later calls
    /// (and the drop) do nothing.
    pub fn complete(&mut self, kind: CompletionKind) {
        if self.completed {
            return;
        }
        self.completed = true;
        if self.probe {
            // The probe ended before its response headers (a cancel): it proved nothing either way.
            if let Some(health) = &self.health {
                health.on_probe_abandoned(&self.info.endpoint);
            }
        }
        let usage = match kind {
            CompletionKind::Finished => self.response.usage(),
            CompletionKind::Aborted => None,
        };
        let now = Instant::now();
        let completion = Completion { kind, status: self.status, usage, now };
        self.pipeline.on_complete(&self.info, &completion);
        self.metrics.running_dec(&self.series);
        if let Some(waker) = &self.dispatch_waker {
            waker.wake();
        }
        if kind == CompletionKind::Finished {
            let duration: Duration = now.saturating_duration_since(self.received_at);
            self.metrics.record_response(&self.series, duration, self.response_bytes, usage);
        }
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.complete(CompletionKind::Aborted);
    }
}
