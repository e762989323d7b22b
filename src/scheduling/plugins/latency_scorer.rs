//! `latency-scorer` (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/scorer/latency/plugin.go):
//! scores endpoints by their predicted headroom against the request's objectives.
//!
//! 1. No prediction on any endpoint (warm-up, or training-only mode): the composite fallback,
//!    `wkv·(1 − kv) + wq·(maxQ − q)/maxQ + wprefix·prefix`, rounded to hundredths.
//! 2. Some endpoints meet both objectives (or have no prediction): only they are scored, with
//!    `headroomSelectionStrategy` — `least` packs requests where they just fit, `most` spreads them.
//! 3. None do (always the case without SLO headers): idle endpoints (nothing dispatched) are scored alone;
//!    otherwise the first non-empty deficit bucket — TPOT-only miss, then TTFT-only, then both — scored
//!    with `least`, i.e. the smallest predicted miss. Without SLOs the miss is the prediction itself, so
//!    the lowest predicted latency wins.
//!
//! Bucket scores normalise |headroom| over the bucket and blend TTFT and TPOT with the normalised
//! `(ttftWeight, tpotWeight)`; a target whose values are all equal gives its weight to the other. Scores run
//! 0.01 … 1.01 as upstream (the framework clamps to 1).
//!
//! **`sloMissPenalty`** (an epp extension; absent = llm-d's tiers above): scores every request as steps 1
//! and 3 score one without objectives — the idle endpoints alone if any, else all endpoints on their
//! predicted TTFT and TPOT, lowest first — and then, when the request carries objectives, multiplies the
//! score of each endpoint predicted to miss one of them by `1 − sloMissPenalty`. Why: with llm-d's tiers a
//! request with SLO headers is routed on a hard cut of noisy predictions (an endpoint predicted 1 ms over
//! the bound scores 0, one 1 ms under scores fully) and, with `least`, packed onto the endpoint predicted
//! to have the least headroom, so in the lab the same traffic met its SLO far less often with headers
//! than without (BENCHMARKS.md, the scenario suite). Here the objectives only ever add a preference for
//! endpoints predicted to meet them, on top of the ordering the request gets without them; at 0 the
//! headers change nothing.
//!
//! **`decodeStallWeight`** (an epp extension of the graded mode; 0 by default): a third axis beside TTFT and
//! TPOT, normalised and blended the same way, on `decode_stall_ms` — the decode time the request's prefill
//! would take from the requests already decoding on the endpoint (its predicted TTFT there were the endpoint
//! idle × the requests epp has decoding there; the producer predicts it with `predictDecodeStall`). Why:
//! vLLM runs a prefill's chunks in the same steps as every running decode, so a long prompt sent to a
//! replica with a large decode batch slows every stream in it. The request's own TTFT and TPOT do not show
//! that cost, and it is what the lab's oracle weighs and the plain scorer missed: on the scenario suite's
//! tuning half a profile without it sent long retrieval prompts to the fast replicas' busy batches and lost
//! to the default profile (BENCHMARKS.md §7).

use std::cell::RefCell;
use std::sync::Arc;

use serde::Deserialize;

use super::param_checks::{non_negative, unit_fraction, InvalidParameter};

use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, PluginError, SchedulingRequest, Scorer,
    ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "latency-scorer";

/// How a tier with headroom is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Strategy {
    /// Least headroom first: pack.
    Least,
    /// Most headroom first: spread.
    Most,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    ttft_weight: Option<f64>,
    tpot_weight: Option<f64>,
    headroom_selection_strategy: Option<Strategy>,
    slo_miss_penalty: Option<f64>,
    decode_stall_weight: Option<f64>,
    #[serde(rename = "compositeKVWeight")]
    composite_kv_weight: Option<f64>,
    composite_queue_weight: Option<f64>,
    composite_prefix_weight: Option<f64>,
}

/// The scorer's validated weights.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatencyScorer {
    pub ttft_weight: f64,
    pub tpot_weight: f64,
    pub strategy: Strategy,
    pub composite: [f64; 3],
    /// `Some`: the graded SLO mode (module docs); `None`: llm-d's tiers.
    pub slo_miss_penalty: Option<f64>,
    /// The graded mode's third axis beside TTFT and TPOT: the decode time the request's prefill would
    /// take from the requests already decoding on the endpoint (module docs).
    pub decode_stall_weight: f64,
}

impl Default for LatencyScorer {
    fn default() -> Self {
        LatencyScorer {
            ttft_weight: 0.8,
            tpot_weight: 0.2,
            strategy: Strategy::Least,
            composite: [1.0; 3],
            slo_miss_penalty: None,
            decode_stall_weight: 0.0,
        }
    }
}

/// Which group an endpoint falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Positive,
    TpotMiss,
    TtftMiss,
    BothMiss,
}

thread_local! {
    static TIERS: RefCell<Vec<Tier>> = const { RefCell::new(Vec::new()) };
}

fn tier(c: &Candidate) -> Tier {
    match c.attrs.latency {
        None => Tier::Positive,
        Some(l) => match (l.ttft_headroom_ms < 0.0, l.tpot_headroom_ms < 0.0) {
            (false, false) => Tier::Positive,
            (false, true) => Tier::TpotMiss,
            (true, false) => Tier::TtftMiss,
            (true, true) => Tier::BothMiss,
        },
    }
}

fn headrooms(c: &Candidate) -> [f64; 3] {
    c.attrs.latency.map_or([0.0; 3], |l| [l.ttft_headroom_ms.abs(), l.tpot_headroom_ms.abs(), 0.0])
}

/// The predictions themselves, what the graded mode ranks on (lowest first).
fn predictions(c: &Candidate) -> [f64; 3] {
    c.attrs.latency.map_or([0.0; 3], |l| [l.ttft_ms, l.tpot_ms, l.decode_stall_ms])
}

impl LatencyScorer {
    fn composite(&self, candidates: &[Candidate], subset: &[usize], scores: &mut [f64]) {
        let sum: f64 = self.composite.iter().sum();
        let [kv, queue, prefix] = if sum > 0.0 { self.composite.map(|w| w / sum) } else { [1.0, 0.0, 0.0] };
        let max_queue = subset.iter().map(|&i| candidates[i].telemetry.waiting_queue_size).max().unwrap_or(0);
        for (score, &i) in scores.iter_mut().zip(subset) {
            let c = &candidates[i];
            let relative_queue = if max_queue == 0 {
                1.0
            } else {
                (max_queue - c.telemetry.waiting_queue_size) as f64 / max_queue as f64
            };
            let prefix_score = c.attrs.prefix_ratio();
            let value = kv * (1.0 - c.telemetry.kv_cache_usage.clamp(0.0, 1.0))
                + queue * relative_queue
                + prefix * prefix_score;
            *score = (100.0 * value).round() / 100.0;
        }
    }

    /// Scores the members of one bucket (`member[k]` says whether `subset[k]` is in it); the rest score 0.
    fn bucket(
        &self,
        candidates: &[Candidate],
        subset: &[usize],
        member: impl Fn(usize) -> bool,
        strategy: Strategy,
        scores: &mut [f64],
    ) {
        let weights = [self.ttft_weight, self.tpot_weight, 0.0];
        self.bucket_on(candidates, subset, member, headrooms, weights, strategy, scores);
    }

    /// [`Self::bucket`] over any per-endpoint values (TTFT-like, TPOT-like, decode stall), each axis
    /// normalised over the bucket and blended by `weights`; an axis whose values are all equal gives its
    /// weight to the others in proportion.
    #[allow(clippy::too_many_arguments)]
    fn bucket_on(
        &self,
        candidates: &[Candidate],
        subset: &[usize],
        member: impl Fn(usize) -> bool,
        values: fn(&Candidate) -> [f64; 3],
        weights: [f64; 3],
        strategy: Strategy,
        scores: &mut [f64],
    ) {
        // All weights 0 (a configuration's choice): the axes count equally.
        let weights = if weights.iter().sum::<f64>() > 0.0 { weights } else { [1.0, 1.0, 0.0] };
        let (mut lo, mut hi) = ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
        for (k, &i) in subset.iter().enumerate() {
            if member(k) {
                let v = values(&candidates[i]);
                for axis in 0..3 {
                    lo[axis] = lo[axis].min(v[axis]);
                    hi[axis] = hi[axis].max(v[axis]);
                }
            }
        }
        let range = [hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]];
        let flat = range.map(|r| r <= 1e-9);
        let varying: f64 = (0..3).filter(|&a| !flat[a]).map(|a| weights[a]).sum();
        let total: f64 = weights.iter().sum();
        let blend: [f64; 3] = if varying > 0.0 {
            // Only the axes that tell endpoints apart carry weight.
            std::array::from_fn(|a| if flat[a] { 0.0 } else { weights[a] / varying })
        } else if flat[0] != flat[1] {
            // As upstream: TTFT or TPOT, weighted 0, takes the weight of the other when that one is flat.
            [f64::from(u8::from(!flat[0])), f64::from(u8::from(!flat[1])), 0.0]
        } else {
            weights.map(|w| w / total)
        };
        let normalise = |v: f64, axis: usize| if flat[axis] { 0.5 } else { (v - lo[axis]) / range[axis] };
        for (k, (score, &i)) in scores.iter_mut().zip(subset).enumerate() {
            if !member(k) {
                *score = 0.0;
                continue;
            }
            let v = values(&candidates[i]);
            let combined: f64 = (0..3).map(|a| blend[a] * normalise(v[a], a)).sum();
            let weight = match strategy {
                Strategy::Least => ((1.0 - combined) * 100.0) as i64 + 1,
                Strategy::Most => (combined * 100.0) as i64 + 1,
            };
            *score = weight as f64 / 100.0;
        }
    }
}

impl LatencyScorer {
    /// The graded SLO mode: the ordering a request without objectives gets, then the miss penalty.
    fn graded(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        penalty: f64,
        scores: &mut [f64],
    ) {
        let idle = |k: usize| candidates[subset[k]].attrs.latency.is_some_and(|l| l.dispatched_requests == 0);
        let any_idle = (0..subset.len()).any(idle);
        let member = |k: usize| !any_idle || idle(k);
        let weights = [self.ttft_weight, self.tpot_weight, self.decode_stall_weight];
        self.bucket_on(candidates, subset, member, predictions, weights, Strategy::Least, scores);
        let (ttft_slo, tpot_slo) = (req.slo.ttft_ms > 0.0, req.slo.tpot_ms > 0.0);
        if !(ttft_slo || tpot_slo) {
            return;
        }
        for (score, &i) in scores.iter_mut().zip(subset) {
            let misses = candidates[i]
                .attrs
                .latency
                .is_some_and(|l| (ttft_slo && !l.ttft_valid) || (tpot_slo && !l.tpot_valid));
            if misses {
                *score *= 1.0 - penalty;
            }
        }
    }
}

impl Scorer for LatencyScorer {
    fn category(&self) -> ScorerCategory {
        ScorerCategory::Balance
    }

    fn score(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        scores: &mut [f64],
    ) {
        if !subset.iter().any(|&i| candidates[i].attrs.latency.is_some()) {
            self.composite(candidates, subset, scores);
            return;
        }
        if let Some(penalty) = self.slo_miss_penalty {
            self.graded(req, candidates, subset, penalty, scores);
            return;
        }
        TIERS.with(|tiers| {
            let mut tiers = tiers.borrow_mut();
            tiers.clear();
            tiers.extend(subset.iter().map(|&i| tier(&candidates[i])));
            if tiers.contains(&Tier::Positive) {
                self.bucket(candidates, subset, |k| tiers[k] == Tier::Positive, self.strategy, scores);
                return;
            }
            let idle =
                |k: usize| candidates[subset[k]].attrs.latency.is_some_and(|l| l.dispatched_requests == 0);
            if (0..subset.len()).any(idle) {
                self.bucket(candidates, subset, idle, Strategy::Least, scores);
                return;
            }
            for wanted in [Tier::TpotMiss, Tier::TtftMiss, Tier::BothMiss] {
                if tiers.contains(&wanted) {
                    self.bucket(candidates, subset, |k| tiers[k] == wanted, Strategy::Least, scores);
                    return;
                }
            }
        });
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let d = LatencyScorer::default();
    let build = || -> Result<LatencyScorer, InvalidParameter> {
        Ok(LatencyScorer {
            ttft_weight: non_negative("ttftWeight", p.ttft_weight, d.ttft_weight)?,
            tpot_weight: non_negative("tpotWeight", p.tpot_weight, d.tpot_weight)?,
            strategy: p.headroom_selection_strategy.unwrap_or(d.strategy),
            composite: [
                non_negative("compositeKVWeight", p.composite_kv_weight, 1.0)?,
                non_negative("compositeQueueWeight", p.composite_queue_weight, 1.0)?,
                non_negative("compositePrefixWeight", p.composite_prefix_weight, 1.0)?,
            ],
            slo_miss_penalty: p
                .slo_miss_penalty
                .map(|v| unit_fraction("sloMissPenalty", Some(v), 0.0))
                .transpose()?,
            decode_stall_weight: non_negative("decodeStallWeight", p.decode_stall_weight, 0.0)?,
        })
    };
    let scorer = build().map_err(|e| e.for_plugin(name, TYPE_NAME))?;
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .scorer(Arc::new(scorer))
        .consumes(&[DataKey::LatencyPrediction, DataKey::PrefixCacheMatch]))
}

#[cfg(test)]
#[path = "latency_scorer_tests.rs"]
mod tests;
