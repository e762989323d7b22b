//! Per-request samples for studying the latency predictor (`epp-lab --samples DIR`): for every routed
//! request, what the predictor saw of the chosen endpoint at dispatch, what the engine really held then,
//! what a copy of that engine played forward says the request will see (the
//! [`super::oracle::look_ahead`] of the chosen replica alone), and what it did see.
//!
//! Why: the issue asks where the predictor's error comes from before it is fixed. The look-ahead is
//! the best any predictor could do from the engine's exact state (its only error is the arrivals after
//! dispatch), so the gap between it and the model separates what the features miss from what cannot be
//! known. `scripts/predictor-study.py` reads these files.

use std::fmt::Write as _;
use std::path::Path;

use epp::predictor::features::Observation;
use epp_sim::{Backlog, EngineStats};

use super::oracle::Lookahead;
use super::report::{Outcome, Record};

/// What was known about one request at dispatch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dispatched {
    /// The predictor's view of the chosen endpoint (`None` for configs without a latency producer).
    pub observation: Option<Observation>,
    /// The prediction the scheduler used, ms.
    pub predicted_ttft_ms: f64,
    pub predicted_tpot_ms: f64,
    /// The engine's own counts at dispatch (before the request joined).
    pub waiting: u32,
    pub running: u32,
    pub kv_usage: f64,
    pub backlog: Backlog,
    /// How long the engine's step in progress still runs, seconds (0 when idle).
    pub busy_for: f64,
    /// Seconds since the replica's last step ended, and that step's duration (NaN before the first):
    /// what epp can see of the step in progress from the chunks it streams.
    pub since_step: f64,
    pub last_step: f64,
    /// The chosen engine played forward with the request and no later arrivals, seconds.
    pub lookahead_ttft: f64,
    pub lookahead_tpot: f64,
    /// A fresh engine holding only what epp knew of the replica's work, played forward the same way
    /// (the simulation's `shadow` module), seconds; 0 without an observation.
    pub shadow_ttft: f64,
}

impl Dispatched {
    pub fn new(stats: &EngineStats, backlog: Backlog, busy_for: f64, lookahead: &Lookahead) -> Self {
        Dispatched {
            backlog,
            busy_for,
            waiting: stats.waiting as u32,
            running: stats.running as u32,
            kv_usage: stats.kv_usage,
            lookahead_ttft: lookahead.ttft,
            lookahead_tpot: lookahead.tpot,
            ..Dispatched::default()
        }
    }
}

const HEADER: &str = "arrival_s,replica,profile,prompt_tokens,cached_tokens,output_tokens,ttft_ms,tpot_ms,\
predicted_ttft_ms,predicted_tpot_ms,lookahead_ttft_ms,lookahead_tpot_ms,engine_waiting,engine_running,\
engine_kv,engine_prefill_tokens,engine_prefilling,engine_decoding,busy_for_ms,since_step_ms,last_step_ms,has_observation,obs_kv,obs_input_tokens,obs_waiting,obs_running,obs_prefix_score,\
obs_prefill_tokens_in_flight,obs_decode_tokens_in_flight,obs_accelerator_class,obs_ms_since_last_token,obs_last_step_ms,\
shadow_ttft_ms";

/// Writes one CSV row per completed request to `path`.
pub fn write(
    path: &Path,
    records: &[Record],
    dispatched: &[Dispatched],
    profiles: &[String],
) -> std::io::Result<()> {
    let mut out = String::with_capacity(records.len() * 160);
    out.push_str(HEADER);
    out.push('\n');
    for (record, d) in records.iter().zip(dispatched) {
        if record.outcome != Outcome::Completed {
            continue;
        }
        let ttft_ms = (record.first_token - record.arrival) * 1e3;
        let tpot_ms = if record.output_tokens >= 2 {
            (record.finish - record.first_token) * 1e3 / f64::from(record.output_tokens - 1)
        } else {
            f64::NAN
        };
        let profile = profiles.get(record.replica as usize).map_or("", String::as_str);
        let _ = write!(
            out,
            "{:.4},{},{},{},{},{},{:.3},{:.4},{:.3},{:.4},{:.3},{:.4},{},{},{:.4},{},{},{},{:.3},{:.3},{:.3},",
            record.arrival,
            record.replica,
            profile,
            record.prompt_tokens,
            record.cached_tokens,
            record.output_tokens,
            ttft_ms,
            tpot_ms,
            d.predicted_ttft_ms,
            d.predicted_tpot_ms,
            d.lookahead_ttft * 1e3,
            d.lookahead_tpot * 1e3,
            d.waiting,
            d.running,
            d.kv_usage,
            d.backlog.prefill_tokens,
            d.backlog.prefilling,
            d.backlog.decoding,
            d.busy_for * 1e3,
            d.since_step * 1e3,
            d.last_step * 1e3,
        );
        let o = d.observation.unwrap_or_default();
        let _ = writeln!(
            out,
            "{},{:.4},{},{},{},{:.4},{},{},{},{:.3},{:.3},{:.3}",
            u8::from(d.observation.is_some()),
            o.kv_cache_percentage,
            o.input_tokens,
            o.waiting,
            o.running,
            o.prefix_cache_score,
            o.prefill_tokens_in_flight,
            o.decode_tokens_in_flight,
            o.accelerator_class,
            o.ms_since_last_token,
            o.last_step_ms,
            d.shadow_ttft * 1e3,
        );
    }
    std::fs::write(path, out)
}
