//! `utilization-detector`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go):
//! the default saturation detector, reading the telemetry the model servers report (waiting-queue depth and
//! KV-cache usage). It fills two roles.
//!
//! **Gatekeeper** ([`SaturationDetector`], for legacy admission and flow control): a roofline score per
//! endpoint, the most constrained of its two resources, averaged over the candidates:
//!
//! ```text
//! score(e)   = max(queue(e) / queueDepthThreshold, kv(e) / kvCacheUtilThreshold)
//!            = 1.0 when e's metrics are missing or older than metricsStalenessThreshold
//! saturation = mean of score(e) over the candidates;  1.0 for no candidates (fail closed)
//! ```
//!
//! Not clamped: 2.0 means "twice the ideal load". The mean is unweighted, so a small endpoint weighs as
//! much as a large one (the concurrency detector weighs by capacity instead). Missing or stale telemetry
//! counts as saturated, so an unobservable pool stops flow control rather than flooding it.
//!
//! **Traffic shaper** ([`Filter`], only when the plugin is also listed in a scheduling profile): keeps an
//! endpoint iff its metrics are fresh and it is under both burst limits,
//!
//! ```text
//! queue(e) < queueDepthThreshold · (1 + headroom)
//! kv(e)    < min(1.0, kvCacheUtilThreshold · (1 + headroom))
//! ```
//!
//! and fails open: if that would remove every endpoint, the list is left as it was, so the scorers pick the
//! least bad one. The KV limit is clamped to 1.0 as the upstream README states; GIE's code does not clamp
//! it, which with a large headroom would keep an endpoint whose KV cache is completely full (`kv = 1.0`).
//! The comparisons are strict as in GIE's code.
//!
//! The clock is the caller's (`now` / `SchedulingRequest::now`), so the detector is pure and testable in
//! virtual time.
//!
//! Parameters (all optional; unknown keys are errors, unlike upstream): `queueDepthThreshold` (int > 0,
//! default 5), `kvCacheUtilThreshold` (in (0, 1], default 0.8), `metricsStalenessThreshold` (duration
//! string > 0, default "200ms"), `headroom` (≥ 0, default 0.0; above 1.0 accepted with a warning).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::param_checks::{check_headroom, positive_int, InvalidParameter};
use crate::datastore::EndpointTelemetry;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, FactoryContext, Filter, PendingLoad, PluginError,
    SaturationDetector, SchedulingRequest,
};

pub(crate) const TYPE_NAME: &str = "utilization-detector";

pub(crate) const DEFAULT_QUEUE_DEPTH_THRESHOLD: u64 = 5;
pub(crate) const DEFAULT_KV_CACHE_UTIL_THRESHOLD: f64 = 0.8;
pub(crate) const DEFAULT_METRICS_STALENESS_THRESHOLD: Duration = Duration::from_millis(200);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    queue_depth_threshold: Option<i64>,
    kv_cache_util_threshold: Option<f64>,
    metrics_staleness_threshold: Option<String>,
    headroom: Option<f64>,
}

/// The detector's validated settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtilizationConfig {
    /// The ideal waiting-queue depth of one endpoint (> 0).
    pub queue_depth_threshold: u64,
    /// The ideal KV-cache usage fraction, in (0, 1].
    pub kv_cache_util_threshold: f64,
    /// Telemetry older than this counts as saturated (> 0).
    pub metrics_staleness_threshold: Duration,
    /// Burst allowance of the filter above the ideal thresholds, as a fraction (≥ 0).
    pub headroom: f64,
}

impl Default for UtilizationConfig {
    fn default() -> Self {
        Self {
            queue_depth_threshold: DEFAULT_QUEUE_DEPTH_THRESHOLD,
            kv_cache_util_threshold: DEFAULT_KV_CACHE_UTIL_THRESHOLD,
            metrics_staleness_threshold: DEFAULT_METRICS_STALENESS_THRESHOLD,
            headroom: 0.0,
        }
    }
}

impl UtilizationConfig {
    /// Checks every range; the error names the offending parameter.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        if self.queue_depth_threshold == 0 {
            return Err(InvalidParameter::new("queueDepthThreshold", "must be > 0, got 0"));
        }
        let kv = self.kv_cache_util_threshold;
        let kv_in_range = kv > 0.0 && kv <= 1.0; // false for NaN too
        if !kv_in_range {
            return Err(InvalidParameter::new(
                "kvCacheUtilThreshold",
                format!("must be in (0, 1], got {kv}"),
            ));
        }
        if self.metrics_staleness_threshold.is_zero() {
            return Err(InvalidParameter::new("metricsStalenessThreshold", "must be > 0, got 0s"));
        }
        if !self.headroom.is_finite() || self.headroom < 0.0 {
            return Err(InvalidParameter::new(
                "headroom",
                format!("must be a number >= 0.0, got {}", self.headroom),
            ));
        }
        Ok(())
    }

    fn from_params(plugin: &str, p: Params) -> Result<Self, InvalidParameter> {
        let defaults = Self::default();
        let default_queue = defaults.queue_depth_threshold as i64;
        let queue = positive_int("queueDepthThreshold", p.queue_depth_threshold, default_queue)?;
        let staleness = match p.metrics_staleness_threshold {
            None => defaults.metrics_staleness_threshold,
            Some(text) => humantime::parse_duration(text.trim()).map_err(|e| {
                InvalidParameter::new(
                    "metricsStalenessThreshold",
                    format!("is not a duration such as \"200ms\" or \"1s\": {text:?} ({e})"),
                )
            })?,
        };
        let config = Self {
            queue_depth_threshold: queue.unsigned_abs(),
            kv_cache_util_threshold: p.kv_cache_util_threshold.unwrap_or(defaults.kv_cache_util_threshold),
            metrics_staleness_threshold: staleness,
            headroom: check_headroom(plugin, p.headroom.unwrap_or(defaults.headroom))?,
        };
        config.validate()?;
        Ok(config)
    }
}

/// The utilization detector: a saturation gradient and an endpoint filter from model-server telemetry.
#[derive(Debug, Clone)]
pub struct UtilizationDetector {
    config: UtilizationConfig,
    /// Filter limits, precomputed: `queueDepthThreshold·(1+h)` and `min(1, kvCacheUtilThreshold·(1+h))`.
    queue_limit: f64,
    kv_limit: f64,
}

impl UtilizationDetector {
    pub fn new(config: UtilizationConfig) -> Result<Self, InvalidParameter> {
        config.validate()?;
        let burst = 1.0 + config.headroom;
        Ok(Self {
            queue_limit: config.queue_depth_threshold as f64 * burst,
            // Clamped as the upstream README says; GIE's code leaves it unclamped (see the module doc).
            kv_limit: (config.kv_cache_util_threshold * burst).min(1.0),
            config,
        })
    }

    pub fn config(&self) -> &UtilizationConfig {
        &self.config
    }

    fn is_stale(&self, metrics: &EndpointTelemetry, now: Instant) -> bool {
        metrics.is_stale(now, self.config.metrics_staleness_threshold)
    }

    /// The roofline score of one endpoint: its most constrained resource, 1.0 when its telemetry is stale.
    pub fn endpoint_score(&self, metrics: &EndpointTelemetry, now: Instant) -> f64 {
        if self.is_stale(metrics, now) {
            return 1.0;
        }
        let queue = metrics.waiting_queue_size as f64 / self.config.queue_depth_threshold as f64;
        let kv = metrics.kv_cache_usage / self.config.kv_cache_util_threshold;
        queue.max(kv)
    }

    /// Whether the filter keeps an endpoint: fresh telemetry and strictly under both burst limits.
    fn under_limits(&self, metrics: &EndpointTelemetry, now: Instant) -> bool {
        !self.is_stale(metrics, now)
            && (metrics.waiting_queue_size as f64) < self.queue_limit
            && metrics.kv_cache_usage < self.kv_limit
    }
}

impl SaturationDetector for UtilizationDetector {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64 {
        if candidates.is_empty() {
            return 1.0;
        }
        let total: f64 = candidates.iter().map(|c| self.endpoint_score(&c.telemetry, now)).sum();
        total / candidates.len() as f64
    }

    /// Requests released by flow control but not yet on any endpoint count as queue depth spread over the
    /// candidates, so one dispatch cycle cannot release the whole queue before telemetry catches up.
    fn saturation_with_pending(&self, candidates: &[Candidate], now: Instant, pending: PendingLoad) -> f64 {
        let base = self.saturation(candidates, now);
        if candidates.is_empty() || pending.requests == 0 {
            return base;
        }
        let spread =
            pending.requests as f64 / (self.config.queue_depth_threshold as f64 * candidates.len() as f64);
        base + spread
    }

    fn stale_endpoints(&self, candidates: &[Candidate], now: Instant) -> usize {
        candidates.iter().filter(|c| self.is_stale(&c.telemetry, now)).count()
    }
}

impl Filter for UtilizationDetector {
    fn filter(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        // Checked before removing anything so failing open needs no copy of the original list.
        if !kept.iter().any(|&i| self.under_limits(&candidates[i].telemetry, req.now)) {
            tracing::debug!(
                endpoints = kept.len(),
                "utilization-detector: every endpoint is stale or over its limits; failing open"
            );
            return;
        }
        kept.retain(|&i| self.under_limits(&candidates[i].telemetry, req.now));
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let config = UtilizationConfig::from_params(name, p).map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    let detector = Arc::new(UtilizationDetector::new(config).map_err(|e| e.for_plugin(name, TYPE_NAME))?);
    Ok(BuiltPlugin::new(TYPE_NAME, name).filter(detector.clone()).saturation_detector(detector))
}

#[cfg(test)]
#[path = "utilization_detector_tests.rs"]
mod tests;
