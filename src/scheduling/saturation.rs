//! The saturation contract: how full a set of endpoints is. Detectors are plugins (they may also filter
//! endpoints), and the admission stage in `flowcontrol` consumes them, so the contract lives here, below
//! both.

use std::time::Instant;

use super::Candidate;
use crate::datastore::PodRole;

/// Load that flow control has released for dispatch but that has not yet reached an endpoint (scheduling
/// and pre-request hooks have not run for it), so a burst released at once cannot overshoot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingLoad {
    pub requests: u64,
    pub tokens: u64,
}

/// How full a set of endpoints is: 1.0 is the gating set point; values above 1.0 are allowed.
pub trait SaturationDetector: Send + Sync {
    fn saturation(&self, candidates: &[Candidate], now: Instant) -> f64;

    /// Saturation counting `pending` load not yet visible on any endpoint. Detectors that count requests or
    /// tokens add it; telemetry-based detectors may ignore it (the default).
    fn saturation_with_pending(&self, candidates: &[Candidate], now: Instant, pending: PendingLoad) -> f64 {
        let _ = pending;
        self.saturation(candidates, now)
    }

    /// How many of `candidates` this detector treats as stale (for `llm_d_epp_flow_control_stale_endpoints`).
    fn stale_endpoints(&self, candidates: &[Candidate], now: Instant) -> usize {
        let _ = (candidates, now);
        0
    }
}

/// A pool's saturation by P/D stage (llm-d-router release note 2221): the detector run over the pods of
/// each stage (`llm-d.ai/role`; interleaved pods count in both, unlabelled pods are decode pods), and
/// the effective value the gates use, the larger of the two. A pool without role labels is one stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageSaturation {
    /// `None` when no pod prefills for others (an aggregated pool, or one without prefill pods).
    pub prefill: Option<f64>,
    /// 1.0 when no pod decodes: nothing can be served.
    pub decode: f64,
    pub effective: f64,
}

impl StageSaturation {
    /// Runs `detector` per stage; `pending` load counts against both (a released request will load a
    /// decode pod and may load a prefill pod). NaN in either stage makes the effective value NaN, which
    /// the gates read as saturated.
    pub fn of(
        detector: &dyn SaturationDetector,
        candidates: &[Candidate],
        now: Instant,
        pending: PendingLoad,
    ) -> Self {
        if !candidates.iter().any(|c| PodRole::labelled(&c.endpoint)) {
            let s = detector.saturation_with_pending(candidates, now, pending);
            return Self { prefill: None, decode: s, effective: s };
        }
        let stage = |keep: fn(PodRole) -> bool| {
            let members: Vec<Candidate> =
                candidates.iter().filter(|c| keep(PodRole::of(&c.endpoint))).cloned().collect();
            (!members.is_empty()).then(|| detector.saturation_with_pending(&members, now, pending))
        };
        let prefill = stage(|r| r.prefill);
        let decode = stage(|r| r.decode).unwrap_or(1.0);
        let effective = match prefill {
            Some(p) if p.is_nan() || decode.is_nan() => f64::NAN,
            Some(p) => p.max(decode),
            None => decode,
        };
        Self { prefill, decode, effective }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::labelled_endpoint;

    /// Saturation = the share of candidates whose name ends in "busy".
    struct BusyShare;
    impl SaturationDetector for BusyShare {
        fn saturation(&self, c: &[Candidate], _: Instant) -> f64 {
            c.iter().filter(|c| c.endpoint.labels.contains_key("busy")).count() as f64 / c.len() as f64
        }
    }

    fn pod(n: u8, role: Option<&str>, busy: bool) -> Candidate {
        Candidate::new(labelled_endpoint(n, &[("llm-d.ai/role", role), ("busy", busy.then_some("1"))]))
    }

    #[test]
    fn each_stage_is_judged_on_its_own_pods_and_the_fuller_one_gates() {
        let now = Instant::now();
        let pool = [
            pod(1, Some("prefill"), true),
            pod(2, Some("prefill"), true),
            pod(3, Some("decode"), false),
            pod(4, None, false),
        ];
        let s = StageSaturation::of(&BusyShare, &pool, now, PendingLoad::default());
        assert_eq!(s, StageSaturation { prefill: Some(1.0), decode: 0.0, effective: 1.0 });
        let both = [pod(1, Some("prefill-decode"), true), pod(2, Some("decode"), false)];
        let s = StageSaturation::of(&BusyShare, &both, now, PendingLoad::default());
        assert_eq!(s, StageSaturation { prefill: Some(1.0), decode: 0.5, effective: 1.0 });
        let aggregated = [pod(1, None, true), pod(2, None, false)];
        let s = StageSaturation::of(&BusyShare, &aggregated, now, PendingLoad::default());
        assert_eq!(s, StageSaturation { prefill: None, decode: 0.5, effective: 0.5 });
        let no_decode = [pod(1, Some("prefill"), false)];
        assert_eq!(StageSaturation::of(&BusyShare, &no_decode, now, PendingLoad::default()).effective, 1.0);
    }
}
