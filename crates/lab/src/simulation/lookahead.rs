//! What the engines would do with a request, played forward on copies: the oracle's pick, and the
//! look-ahead each per-request sample records ([`samples`](crate::samples)).

use super::{oracle, Dispatched, Routed, Run};
use epp_sim::SimRequest;

impl Run<'_> {
    /// What is known of `request` as it is dispatched to `replica` ([`samples`]).
    pub(super) fn sample(&self, replica: usize, routed: &Routed, request: &SimRequest, t: f64) -> Dispatched {
        let r = &self.replicas[replica];
        let busy_for = if r.in_step.is_some() { r.step_end - t } else { 0.0 };
        let lookahead = oracle::look_ahead(&r.engine, busy_for, request.clone());
        let mut sample =
            Dispatched::new(&r.engine.stats(), r.engine.backlog(), busy_for.max(0.0), &lookahead);
        (sample.since_step, sample.last_step) = (t - r.last_step.0, r.last_step.1);
        if let Some(info) = &routed.dispatch {
            sample.observation = info.attrs.observation;
            if let (Some(ledger), Some(o)) = (&self.shadow, &sample.observation) {
                sample.shadow_ttft = ledger.ttft(replica, &r.engine, request, o, t);
            }
            if let Some(p) = &info.attrs.latency {
                (sample.predicted_ttft_ms, sample.predicted_tpot_ms) = (p.ttft_ms, p.tpot_ms);
            }
        }
        sample
    }

    /// The oracle's replica for `request` arriving at `t`: each engine's copy played forward.
    pub(super) fn oracle_pick(&mut self, request: &SimRequest, t: f64) -> usize {
        self.lookaheads.clear();
        for r in &self.replicas {
            let busy_for = if r.in_step.is_some() { r.step_end - t } else { 0.0 };
            self.lookaheads.push(oracle::look_ahead(&r.engine, busy_for, request.clone()));
        }
        oracle::choose(&self.lookaheads, self.oracle_slo, request.max_output_tokens)
    }
}
