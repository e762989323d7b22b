//! The per-request families, which the director records as requests are routed, answered and end:
//! counts, errors, durations, sizes, tokens, TTFT, running requests and model rewrites, under the GIE names
//! (`inference_objective_*`) and the llm-d names (`llm_d_epp_request_*`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::error::{DropReason, ErrorCode};
use crate::metrics::{
    CappedFamily, CappedHistograms, FlowErrorLabels, FlowLabels, FlowStreamingLabels, MetricsRegistry,
    ModelErrorLabels, ModelLabels, ModelNameLabels, ModelPriorityLabels, RequestLabels, RewriteLabels,
    SharedLabels,
};
use crate::request::Usage;

use super::series::{RequestSeries, SeriesCache};

/// The per-request families under their GIE names (`inference_objective_*`). Their labels come from
/// requests, so each is capped (see `metrics::CappedFamily`).
#[derive(Debug)]
pub(super) struct GieRequestFamilies {
    pub requests: CappedFamily<ModelPriorityLabels, Counter>,
    pub errors: CappedFamily<ModelErrorLabels, Counter>,
    pub duration: CappedHistograms<ModelLabels>,
    pub request_sizes: CappedHistograms<ModelLabels>,
    pub response_sizes: CappedHistograms<ModelLabels>,
    pub input_tokens: CappedHistograms<ModelLabels>,
    pub output_tokens: CappedHistograms<ModelLabels>,
    pub cached_tokens: CappedHistograms<ModelLabels>,
    pub running: CappedFamily<ModelNameLabels, Gauge>,
    pub ntpot: CappedHistograms<ModelLabels>,
    pub ttft: CappedHistograms<ModelLabels>,
}

/// The per-request families under their llm-d names (`llm_d_epp_request_*`), capped likewise.
#[derive(Debug)]
pub(super) struct LlmdRequestFamilies {
    pub requests: CappedFamily<FlowLabels, Counter>,
    pub errors: CappedFamily<FlowErrorLabels, Counter>,
    pub duration: CappedHistograms<FlowLabels>,
    pub request_sizes: CappedHistograms<FlowLabels>,
    pub response_sizes: CappedHistograms<FlowLabels>,
    pub input_tokens: CappedHistograms<FlowLabels>,
    pub output_tokens: CappedHistograms<FlowLabels>,
    pub cached_tokens: CappedHistograms<FlowLabels>,
    pub running: CappedFamily<FlowLabels, Gauge>,
    pub ntpot: CappedHistograms<FlowLabels>,
    pub ttft: CappedHistograms<FlowStreamingLabels>,
}

/// `{reason}` of `epp_requests_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(super) struct DroppedLabels {
    reason: &'static str,
}

/// The director's families.
#[derive(Debug)]
pub struct RequestMetrics {
    labels: Arc<SharedLabels>,
    pub(super) gie: GieRequestFamilies,
    pub(super) llmd: LlmdRequestFamilies,
    pub(super) gie_rewrites: Family<RewriteLabels, Counter>,
    pub(super) llmd_rewrites: Family<RewriteLabels, Counter>,
    /// `epp_requests_dropped_total{reason}`: refusals by llm-d's drop reason.
    pub(super) dropped: Family<DroppedLabels, Counter>,
    /// The sum of `llm_d_epp_request_running` over all series, kept beside the families so it can be read.
    running_total: AtomicI64,
    /// Each flow's series, kept between requests.
    series: SeriesCache,
}

impl RequestMetrics {
    /// Creates the families and registers them in `registry` (names and help texts: `metrics_names.rs`).
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let m = Self {
            labels: registry.labels().clone(),
            gie: GieRequestFamilies::register(registry),
            llmd: LlmdRequestFamilies::register(registry),
            gie_rewrites: Family::default(),
            llmd_rewrites: Family::default(),
            dropped: Family::default(),
            running_total: AtomicI64::new(0),
            series: SeriesCache::default(),
        };
        m.register_rewrites(registry);
        registry.register(
            "epp_requests_dropped",
            "Requests refused before reaching a model server, by the x-llm-d-request-dropped-reason they got",
            m.dropped.clone(),
        );
        // Every reason from the start, so a rate over them is defined before the first refusal.
        for reason in DropReason::ALL {
            let _ = m.dropped.get_or_create(&DroppedLabels { reason: reason.as_str() });
        }
        Arc::new(m)
    }

    /// The series of `l`'s flow, kept between requests (see `series.rs`): a request finds it once and
    /// records everything else through it.
    pub fn series(&self, l: RequestLabels<'_>) -> Arc<RequestSeries> {
        self.series.get(l, &self.labels)
    }

    /// How many flows keep their series.
    pub fn kept_flows(&self) -> usize {
        self.series.len()
    }

    /// A request was scheduled and forwarded (`inference_objective_request_total`, `llm_d_epp_request_total`).
    pub fn record_request(&self, s: &RequestSeries, request_bytes: usize) {
        let (g, d) = (&self.gie, &self.llmd);
        s.observe(&s.request_sizes, (&g.request_sizes, &d.request_sizes), request_bytes as f64);
        s.requests.llmd.with(
            &d.requests,
            || s.flow.clone(),
            |c| {
                c.inc();
            },
        );
        s.requests.gie.with(
            &g.requests,
            || s.model.clone().with_priority(s.flow.priority),
            |c| {
                c.inc();
            },
        );
    }

    /// A request was refused, for `reason`.
    pub fn record_dropped(&self, reason: DropReason) {
        self.dropped.get_or_create(&DroppedLabels { reason: reason.as_str() }).inc();
    }

    /// A request ended with an error (`*_request_error_total{error_code}`).
    pub fn record_error(&self, l: RequestLabels<'_>, code: ErrorCode) {
        let (model, flow) = self.labels.flow_labels(&l);
        let error_code = code.as_str();
        self.llmd.errors.get_or_create(&flow.with_error(error_code)).inc();
        self.gie.errors.get_or_create(&model.with_error(error_code)).inc();
    }

    /// A request finished: total duration, response bytes, token usage.
    pub fn record_response(
        &self,
        s: &RequestSeries,
        duration: Duration,
        response_bytes: usize,
        usage: Option<Usage>,
    ) {
        let (g, d) = (&self.gie, &self.llmd);
        let secs = duration.as_secs_f64();
        s.observe(&s.duration, (&g.duration, &d.duration), secs);
        s.observe(&s.response_sizes, (&g.response_sizes, &d.response_sizes), response_bytes as f64);
        let Some(usage) = usage else { return };
        // As in Go: token histograms skip zero counts, except cached tokens (zero hits are informative).
        if usage.prompt_tokens > 0 {
            s.observe(&s.input_tokens, (&g.input_tokens, &d.input_tokens), usage.prompt_tokens as f64);
        }
        if usage.completion_tokens > 0 {
            let v = usage.completion_tokens as f64;
            s.observe(&s.output_tokens, (&g.output_tokens, &d.output_tokens), v);
            if secs > 0.0 {
                s.observe(&s.ntpot, (&g.ntpot, &d.ntpot), secs / v);
            }
        }
        s.observe(&s.cached_tokens, (&g.cached_tokens, &d.cached_tokens), usage.cached_tokens as f64);
    }

    /// Time to first response byte, as seen by epp.
    pub fn record_ttft(&self, s: &RequestSeries, ttft: Duration, streaming: bool) {
        let secs = ttft.as_secs_f64();
        s.gie_ttft.with(&self.gie.ttft, || s.model.clone(), |h| h.observe(secs));
        s.llmd_ttft[usize::from(streaming)].with(
            &self.llmd.ttft,
            || s.flow.clone().with_streaming(streaming),
            |h| h.observe(secs),
        );
    }

    /// A request started running on a model server. Requests without a model name are not counted
    /// (as in Go).
    pub fn running_inc(&self, s: &RequestSeries) {
        if s.labels().model_name.is_empty() {
            return;
        }
        s.running.0.with(
            &self.gie.running,
            || s.model_name_labels(),
            |g| {
                g.inc();
            },
        );
        s.running.1.with(
            &self.llmd.running,
            || s.flow.clone(),
            |g| {
                g.inc();
            },
        );
        self.running_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests currently running on model servers as this EPP counts them (the sum of
    /// `llm_d_epp_request_running`; requests without a model name are not counted).
    pub fn running_requests(&self) -> i64 {
        self.running_total.load(Ordering::Relaxed)
    }

    /// A running request ended. Never takes a gauge below zero: an unmatched decrement is a caller bug,
    /// logged, and must not publish a negative count.
    pub fn running_dec(&self, s: &RequestSeries) {
        let l = s.labels();
        if l.model_name.is_empty() {
            return;
        }
        let decrement = |gauge: &Gauge| {
            gauge
                .inner()
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| (v > 0).then(|| v - 1))
                .is_ok()
        };
        let mut decremented = [false; 2];
        s.running.0.with(&self.gie.running, || s.model_name_labels(), |g| decremented[0] = decrement(g));
        s.running.1.with(&self.llmd.running, || s.flow.clone(), |g| decremented[1] = decrement(g));
        if decremented[1] {
            self.running_total.fetch_sub(1, Ordering::Relaxed);
        }
        if decremented.contains(&false) {
            tracing::warn!(
                model = l.model_name,
                target = l.target_model_name,
                "running_dec without a matching running_inc; gauge kept at zero"
            );
        }
    }

    /// A model rewrite rule `rewrite_name` rewrote `model` to `target`.
    pub fn record_model_rewrite(&self, rewrite_name: &str, model: &str, target: &str) {
        let labels = RewriteLabels {
            model_rewrite_name: self.labels.config_names.get(rewrite_name),
            model_name: self.labels.models.get(model),
            target_model: self.labels.models.get(target),
        };
        self.llmd_rewrites.get_or_create(&labels).inc();
        self.gie_rewrites.get_or_create(&labels).inc();
    }
}
