//! What the route probe answers, as JSON: the request as epp read it, each candidate's features and
//! predicted latency, each profile's filter/scorer/picker steps, the admitters' verdicts and the pick.
//!
//! The profile steps are collected by [`ProfileExplain`], a [`ProfileTrace`] that the real scheduling
//! code calls as it runs (so the explanation cannot drift from the decision). The views are plain copies
//! of the scheduling values: those types stay free of serde, and the JSON field names are this file's
//! contract with users (documented in docs/operations.md, "Route probe").

use serde::Serialize;

use crate::predictor::features::{Observation, PodType};
use crate::scheduling::profile::{clamp_score, ProfileTrace, WeightedScorer};
use crate::scheduling::{Candidate, LatencyPrediction, PluginId, ScoredCandidate};

/// The probe's whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct RouteExplanation {
    pub request_id: String,
    /// The `model` of the body, and the model it is served as after any rewrite.
    pub model: String,
    pub target_model: String,
    pub priority: i32,
    pub fairness_id: String,
    pub input_tokens: u64,
    pub estimated_tokens: u64,
    pub slo: SloView,
    /// Seeds the cycle's random numbers (the model rewrite and the picker): pass it back as `?seed=` to
    /// replay the same decision over the same snapshot.
    pub seed: u64,
    /// `legacy` (sheddable requests are dropped while saturated) or `flow-control` (a real request would
    /// queue first; the probe does not).
    pub admission: &'static str,
    /// Legacy shedding would drop the request.
    pub shed: bool,
    pub admitters: Vec<AdmitterVerdict>,
    /// Endpoints of the pool (after the subset hint) that endpoint health keeps from receiving requests.
    pub excluded_by_health: Vec<String>,
    pub candidates: Vec<CandidateView>,
    pub profiles: Vec<ProfileView>,
    pub primary_profile: Option<String>,
    /// Where the request would go; `None` when it would be refused (then `refusal` says why, and the
    /// profiles still show what scheduling made of it).
    pub pick: Option<PickView>,
    pub refusal: Option<RefusalView>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct SloView {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
}

/// One admitter's verdict (every admitter is asked; the real path stops at the first denial).
#[derive(Debug, Clone, Serialize)]
pub struct AdmitterVerdict {
    pub plugin: String,
    pub admitted: bool,
    pub reason: Option<String>,
}

/// A refusal and the status the client would get.
#[derive(Debug, Clone, Serialize)]
pub struct RefusalView {
    pub status: u16,
    pub reason: String,
}

/// The pick: the primary endpoint, then Envoy's fallbacks in order.
#[derive(Debug, Clone, Serialize)]
pub struct PickView {
    pub endpoint: String,
    pub address: String,
    pub fallbacks: Vec<String>,
}

/// One candidate as the data producers left it.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateView {
    pub endpoint: String,
    pub address: String,
    pub waiting_queue_size: u64,
    pub running_requests: u64,
    pub kv_cache_usage: f64,
    /// Prompt blocks this endpoint is believed to have cached, of the prompt's total.
    pub prefix_match_blocks: Option<usize>,
    pub prefix_total_blocks: Option<usize>,
    pub inflight_requests: i64,
    pub inflight_tokens: i64,
    /// The latency predictor's inputs (`predicted-latency-producer`), `None` without that producer.
    pub observation: Option<ObservationView>,
    /// The predicted latency and headroom, `None` while no model exists.
    pub prediction: Option<PredictionView>,
}

impl From<&Candidate> for CandidateView {
    fn from(c: &Candidate) -> Self {
        let m = &c.telemetry;
        Self {
            endpoint: c.endpoint.name.clone(),
            address: c.endpoint.host_port.clone(),
            waiting_queue_size: m.waiting_queue_size,
            running_requests: m.running_requests,
            kv_cache_usage: m.kv_cache_usage,
            prefix_match_blocks: c.attrs.prefix.map(|p| p.match_blocks),
            prefix_total_blocks: c.attrs.prefix.map(|p| p.total_blocks),
            inflight_requests: c.attrs.inflight.requests,
            inflight_tokens: c.attrs.inflight.tokens,
            observation: c.attrs.observation.as_ref().map(ObservationView::from),
            prediction: c.attrs.latency.as_ref().map(PredictionView::from),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ObservationView {
    pub kv_cache_percentage: f32,
    pub input_tokens: u32,
    pub waiting: u32,
    pub running: u32,
    pub prefix_cache_score: f32,
    pub prefill_tokens_in_flight: u64,
    pub decode_tokens_in_flight: u64,
    pub tokens_generated: u32,
    /// `both`, `prefill` or `decode`.
    pub pod_type: &'static str,
    pub accelerator_class: u16,
}

impl From<&Observation> for ObservationView {
    fn from(o: &Observation) -> Self {
        Self {
            kv_cache_percentage: o.kv_cache_percentage,
            input_tokens: o.input_tokens,
            waiting: o.waiting,
            running: o.running,
            prefix_cache_score: o.prefix_cache_score,
            prefill_tokens_in_flight: o.prefill_tokens_in_flight,
            decode_tokens_in_flight: o.decode_tokens_in_flight,
            tokens_generated: o.tokens_generated,
            pod_type: match o.pod_type {
                PodType::Both => "both",
                PodType::Prefill => "prefill",
                PodType::Decode => "decode",
            },
            accelerator_class: o.accelerator_class,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PredictionView {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
    pub ttft_headroom_ms: f64,
    pub tpot_headroom_ms: f64,
    pub ttft_valid: bool,
    pub tpot_valid: bool,
    /// Both objectives predicted to be met.
    pub valid: bool,
    pub generation: u64,
    /// The decode time routing here would take from the requests decoding there (`predictDecodeStall`).
    pub decode_stall_ms: f64,
}

impl From<&LatencyPrediction> for PredictionView {
    fn from(p: &LatencyPrediction) -> Self {
        Self {
            ttft_ms: p.ttft_ms,
            tpot_ms: p.tpot_ms,
            ttft_headroom_ms: p.ttft_headroom_ms,
            tpot_headroom_ms: p.tpot_headroom_ms,
            ttft_valid: p.ttft_valid,
            tpot_valid: p.tpot_valid,
            valid: p.is_valid(),
            generation: p.generation,
            decode_stall_ms: p.decode_stall_ms,
        }
    }
}

/// One profile's run.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileView {
    pub name: String,
    /// Every candidate, in candidate order.
    pub candidates: Vec<ProfileCandidate>,
    pub picker: Option<String>,
    /// The picker's choice (addresses, primary first).
    pub picked: Vec<String>,
}

/// A candidate in one profile: which filter removed it, or its scores.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileCandidate {
    pub address: String,
    /// The filter that removed it; `None` while it survives.
    pub removed_by: Option<String>,
    pub scores: Vec<ScoreView>,
    /// The weighted sum the picker saw (survivors only).
    pub total: Option<f64>,
}

/// One scorer's say on one candidate.
#[derive(Debug, Clone, Serialize)]
pub struct ScoreView {
    pub scorer: String,
    pub weight: f64,
    /// As the scorer returned it.
    pub raw: f64,
    /// Clamped to [0, 1] (NaN as 0), then times the weight.
    pub weighted: f64,
}

/// Collects [`ProfileView`]s from traced profile runs.
#[derive(Debug, Default)]
pub(super) struct ProfileExplain {
    pub profiles: Vec<ProfileView>,
    /// Whether each candidate survives the filters so far, and a scratch membership set.
    live: Vec<bool>,
    kept: Vec<bool>,
}

impl ProfileExplain {
    fn current(&mut self) -> Option<&mut ProfileView> {
        self.profiles.last_mut()
    }
}

impl ProfileTrace for ProfileExplain {
    fn started(&mut self, name: &str, candidates: &[Candidate]) {
        self.live.clear();
        self.live.resize(candidates.len(), true);
        let candidates = candidates
            .iter()
            .map(|c| ProfileCandidate {
                address: c.endpoint.host_port.clone(),
                removed_by: None,
                scores: Vec::new(),
                total: None,
            })
            .collect();
        self.profiles.push(ProfileView {
            name: name.to_string(),
            candidates,
            picker: None,
            picked: Vec::new(),
        });
    }

    fn filtered(&mut self, filter: &PluginId, kept: &[usize]) {
        self.kept.clear();
        self.kept.resize(self.live.len(), false);
        for &i in kept {
            if let Some(k) = self.kept.get_mut(i) {
                *k = true;
            }
        }
        let Some(profile) = self.profiles.last_mut() else { return };
        for ((live, &now), c) in self.live.iter_mut().zip(&self.kept).zip(&mut profile.candidates) {
            if *live && !now {
                c.removed_by = Some(filter.name.clone());
            } else if now && !*live {
                // Restored (a filter failing open): no filter removed it after all.
                c.removed_by = None;
            }
            *live = now;
        }
    }

    fn scored(&mut self, scorer: &WeightedScorer, kept: &[usize], raw: &[f64]) {
        let Some(profile) = self.current() else { return };
        for (&i, &r) in kept.iter().zip(raw) {
            if let Some(c) = profile.candidates.get_mut(i) {
                let weighted = scorer.weight * clamp_score(r);
                c.scores.push(ScoreView {
                    scorer: scorer.id.name.clone(),
                    weight: scorer.weight,
                    raw: r,
                    weighted,
                });
            }
        }
    }

    fn picked(&mut self, picker: &PluginId, scored: &[ScoredCandidate], picked: &[usize]) {
        let Some(profile) = self.current() else { return };
        for s in scored {
            if let Some(c) = profile.candidates.get_mut(s.index) {
                c.total = Some(s.score);
            }
        }
        profile.picker = Some(picker.name.clone());
        profile.picked =
            picked.iter().filter_map(|&i| profile.candidates.get(i)).map(|c| c.address.clone()).collect();
    }
}
