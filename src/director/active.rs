//! A request that has been dispatched to an endpoint. Whatever way the request ends — response done,
//! backend error, client cancel, Envoy reset, epp shutdown — dropping this value completes it exactly once,
//! so the in-flight counters and running gauges plugins and metrics keep can never leak.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::flowcontrol::DispatchWaker;
use crate::metrics::{EppMetrics, RequestLabels};
use crate::scheduling::{Completion, CompletionKind, DispatchInfo, Observer, Pipeline, Usage};

/// Owned copies of the labels a request's metrics carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedLabels {
    pub model_name: String,
    pub target_model_name: String,
    pub priority: i32,
    pub fairness_id: String,
}

impl OwnedLabels {
    pub fn as_labels(&self) -> RequestLabels<'_> {
        RequestLabels {
            model_name: &self.model_name,
            target_model_name: &self.target_model_name,
            priority: self.priority,
            fairness_id: &self.fairness_id,
        }
    }
}

/// A dispatched request's lifecycle handle.
pub struct ActiveRequest {
    pipeline: Arc<Pipeline>,
    metrics: Arc<EppMetrics>,
    observer: Arc<dyn Observer>,
    pub info: DispatchInfo,
    pub labels: OwnedLabels,
    received_at: Instant,
    first_chunk_at: Option<Instant>,
    response_bytes: usize,
    status: Option<u16>,
    streaming: bool,
    completed: bool,
    /// Wakes the flow controller's dispatcher when the request completes (capacity may have freed).
    dispatch_waker: Option<DispatchWaker>,
}

impl std::fmt::Debug for ActiveRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveRequest").field("info", &self.info).field("completed", &self.completed).finish()
    }
}

impl ActiveRequest {
    /// Registers the dispatch: counts the request as running. Called after `pre_request` ran.
    pub(crate) fn start(
        pipeline: Arc<Pipeline>,
        metrics: Arc<EppMetrics>,
        observer: Arc<dyn Observer>,
        info: DispatchInfo,
        labels: OwnedLabels,
        received_at: Instant,
        dispatch_waker: Option<DispatchWaker>,
    ) -> Self {
        metrics.running_inc(labels.as_labels());
        Self {
            pipeline,
            metrics,
            observer,
            info,
            labels,
            received_at,
            first_chunk_at: None,
            response_bytes: 0,
            status: None,
            streaming: false,
            completed: false,
            dispatch_waker,
        }
    }

    /// Response headers arrived; returns the headers response hooks want set on the response.
    pub fn on_response_headers(
        &mut self,
        status: Option<u16>,
        streaming: bool,
        served: Option<&str>,
    ) -> Vec<(String, String)> {
        self.status = status;
        self.streaming = streaming;
        let mut set = Vec::new();
        self.pipeline.on_response_headers(&self.info, status, served, &mut set, self.observer.as_ref());
        set
    }

    /// A response body chunk passed through.
    pub fn on_response_chunk(&mut self, chunk: &[u8], now: Instant) {
        let first = self.first_chunk_at.is_none();
        if first {
            self.first_chunk_at = Some(now);
            self.metrics.record_ttft(
                self.labels.as_labels(),
                now.saturating_duration_since(self.received_at),
                self.streaming,
            );
        }
        self.response_bytes += chunk.len();
        self.pipeline.on_response_chunk(&self.info, chunk, first, now, self.observer.as_ref());
    }

    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Completes the request once; later calls (and the drop) do nothing.
    pub fn complete(&mut self, kind: CompletionKind, usage: Option<Usage>) {
        if self.completed {
            return;
        }
        self.completed = true;
        let now = Instant::now();
        let completion = Completion { kind, status: self.status, usage, now };
        self.pipeline.on_complete(&self.info, &completion);
        self.metrics.running_dec(self.labels.as_labels());
        if let Some(waker) = &self.dispatch_waker {
            waker.wake();
        }
        if kind == CompletionKind::Finished {
            let duration: Duration = now.saturating_duration_since(self.received_at);
            self.metrics.record_response(self.labels.as_labels(), duration, self.response_bytes, usage);
        }
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.complete(CompletionKind::Aborted, None);
    }
}
