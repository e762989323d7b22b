//! `prefix-cache-affinity-filter` (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/filter/
//! prefixcacheaffinity/plugin.go): keeps only the endpoints that hold most of the request's prefix
//! ("sticky"), unless staying would cost too much — a load gate on TTFT (predicted, or estimated from the
//! prefill work in flight) breaks affinity when the best sticky endpoint is more than `maxTTFTPenaltyMs`
//! slower than the best other one.
//!
//! Defaults are llm-d-router's current ones (`explorationProbability` 0, `maxTTFTPenaltyMs` 18000,
//! `ttftSource` `prefillThroughput`); the guides set `latencyPredictor` and 5000 explicitly.
//! `maxTokensInFlightPenalty` (newer llm-d guides; not in llm-d-router at ebab6879) is read as the same
//! gate on in-flight prefill tokens: off at 0, the default. Exploration draws from the request id, so the
//! filter stays pure (see `request_hash`).

use std::sync::Arc;

use serde::Deserialize;

use super::param_checks::{non_negative, positive, unit_fraction, InvalidParameter};
use super::request_hash::uniform;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, Filter, PluginError, SchedulingRequest,
};

pub(crate) const TYPE_NAME: &str = "prefix-cache-affinity-filter";

/// Where the load gate's per-endpoint TTFT comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum TtftSource {
    /// In-flight prefill tokens over the peak prefill throughput.
    PrefillThroughput,
    /// The predicted TTFT (`predicted-latency-producer`).
    LatencyPredictor,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    affinity_threshold: Option<f64>,
    exploration_probability: Option<f64>,
    #[serde(rename = "maxTTFTPenaltyMs")]
    max_ttft_penalty_ms: Option<f64>,
    ttft_source: Option<TtftSource>,
    peak_prefill_throughput: Option<f64>,
    max_tokens_in_flight_penalty: Option<f64>,
}

/// The filter's validated settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AffinitySettings {
    pub affinity_threshold: f64,
    pub exploration_probability: f64,
    pub max_ttft_penalty_ms: f64,
    pub ttft_source: TtftSource,
    /// Tokens per second.
    pub peak_prefill_throughput: f64,
    pub max_tokens_in_flight_penalty: f64,
}

impl Default for AffinitySettings {
    fn default() -> Self {
        AffinitySettings {
            affinity_threshold: 0.80,
            exploration_probability: 0.0,
            max_ttft_penalty_ms: 18_000.0,
            ttft_source: TtftSource::PrefillThroughput,
            peak_prefill_throughput: 15_928.0,
            max_tokens_in_flight_penalty: 0.0,
        }
    }
}

#[derive(Debug)]
pub(crate) struct PrefixCacheAffinityFilter {
    name: String,
    settings: AffinitySettings,
}

impl PrefixCacheAffinityFilter {
    pub(crate) fn new(name: &str, settings: AffinitySettings) -> Self {
        Self { name: name.to_string(), settings }
    }

    fn ttft_ms(&self, c: &Candidate) -> f64 {
        match self.settings.ttft_source {
            TtftSource::PrefillThroughput => {
                c.attrs.inflight.tokens.max(0) as f64 / self.settings.peak_prefill_throughput * 1000.0
            }
            TtftSource::LatencyPredictor => c.attrs.latency.map_or(f64::MAX, |l| l.ttft_ms),
        }
    }

    fn sticky(&self, c: &Candidate) -> bool {
        // `filter` returns early for a threshold ≤ 0, so a prompt with no blocks (ratio 0) is never sticky.
        c.attrs.prefix_ratio() >= self.settings.affinity_threshold
    }
}

/// The smallest `value` over the kept candidates on each side of `sticky`.
fn minima(
    kept: &[usize],
    candidates: &[Candidate],
    sticky: &[bool],
    value: impl Fn(&Candidate) -> f64,
) -> (f64, f64) {
    let (mut on, mut off) = (f64::INFINITY, f64::INFINITY);
    for (&i, &s) in kept.iter().zip(sticky) {
        let v = value(&candidates[i]);
        if s {
            on = on.min(v);
        } else {
            off = off.min(v);
        }
    }
    (on, off)
}

impl Filter for PrefixCacheAffinityFilter {
    fn filter(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        let s = &self.settings;
        if kept.len() <= 1 || s.affinity_threshold <= 0.0 {
            return;
        }
        if s.exploration_probability > 0.0 && uniform(req.request_id, &self.name) < s.exploration_probability
        {
            return;
        }
        // At most a few hundred candidates: a small vector per request, not per endpoint.
        let sticky: Vec<bool> = kept.iter().map(|&i| self.sticky(&candidates[i])).collect();
        let stickies = sticky.iter().filter(|&&x| x).count();
        if stickies == 0 {
            return;
        }
        let has_others = stickies < kept.len();
        if has_others && s.max_ttft_penalty_ms > 0.0 {
            let (on, off) = minima(kept, candidates, &sticky, |c| self.ttft_ms(c));
            if on - off > s.max_ttft_penalty_ms {
                return;
            }
        }
        if has_others && s.max_tokens_in_flight_penalty > 0.0 {
            let (on, off) = minima(kept, candidates, &sticky, |c| c.attrs.inflight.tokens.max(0) as f64);
            if on - off > s.max_tokens_in_flight_penalty {
                return;
            }
        }
        let mut flags = sticky.into_iter();
        kept.retain(|_| flags.next().unwrap_or(false));
    }
}

impl AffinitySettings {
    fn from_params(p: Params) -> Result<Self, InvalidParameter> {
        let d = Self::default();
        Ok(AffinitySettings {
            affinity_threshold: unit_fraction(
                "affinityThreshold",
                p.affinity_threshold,
                d.affinity_threshold,
            )?,
            exploration_probability: unit_fraction(
                "explorationProbability",
                p.exploration_probability,
                d.exploration_probability,
            )?,
            max_ttft_penalty_ms: non_negative(
                "maxTTFTPenaltyMs",
                p.max_ttft_penalty_ms,
                d.max_ttft_penalty_ms,
            )?,
            ttft_source: p.ttft_source.unwrap_or(d.ttft_source),
            peak_prefill_throughput: positive(
                "peakPrefillThroughput",
                p.peak_prefill_throughput,
                d.peak_prefill_throughput,
            )?,
            max_tokens_in_flight_penalty: non_negative(
                "maxTokensInFlightPenalty",
                p.max_tokens_in_flight_penalty,
                d.max_tokens_in_flight_penalty,
            )?,
        })
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let settings = AffinitySettings::from_params(p).map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    let mut consumes = vec![DataKey::PrefixCacheMatch, DataKey::InFlightLoad];
    if settings.ttft_source == TtftSource::LatencyPredictor {
        consumes.push(DataKey::LatencyPrediction);
    }
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .filter(Arc::new(PrefixCacheAffinityFilter::new(name, settings)))
        .consumes(&consumes))
}
