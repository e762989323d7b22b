//! Reads the lab's workload file (`epp_lab::Workload`, crates/lab/src/workload.rs) as an epp-bench
//! workload: `epp-bench run --lab-workload crates/lab/inputs/workload-live.yaml`.
//!
//! Why: the live runs (scripts/live-vs-lab.sh, scripts/demo.sh) and the lab must send the same traffic.
//! With one file, read by the lab's own loader and schema, there is nothing to keep in step by hand; the
//! only translation left is here, in code, and crates/bench/tests/live_vs_lab.rs checks it by building
//! both request streams and measuring them in simulator tokens.
//!
//! Units: the lab counts simulator tokens (epp-sim's tokenizer: one token per 4 bytes), epp-bench one
//! vocabulary word plus a space per token ([`crate::body::BYTES_PER_TOKEN`] bytes on average), so prompt
//! and prefix lengths are scaled by 4 / that; output lengths (`max_tokens`) need no scaling.
//!
//! What epp-bench cannot send is refused, naming the key, rather than approximated: bursty arrivals,
//! open-loop sessions, a shared-prefix fraction below 1 or a prefix length that varies, LoRA and
//! priority mixes, and `normal` lengths or capped `lognormal` ones. (epp-bench's own workload YAML,
//! `--workload`, keeps the bench-only keys: url, api, stream, headers, objectives, fairness ids.)

use std::path::Path;
use std::time::Duration;

use epp_lab::values::LengthDist;
use epp_lab::workload::Arrival;

use super::body::{BYTES_PER_TOKEN, PREFIX_HEADER_BYTES};
use super::dist::Distribution;
use super::workload::{Workload, WorkloadError};

/// Bytes per simulator token (epp-sim's tokenizer, which the lab uses too).
const SIM_BYTES_PER_TOKEN: f64 = 4.0;

fn unsupported(field: &'static str, message: impl Into<String>) -> WorkloadError {
    WorkloadError::Unsupported { field, message: message.into() }
}

/// Simulator tokens of prompt text → epp-bench words.
fn words_for(sim_tokens: f64) -> u64 {
    (sim_tokens * SIM_BYTES_PER_TOKEN / BYTES_PER_TOKEN).round().max(1.0) as u64
}

/// A lab length distribution as epp-bench's, `scale`d (prompt text) or not (output tokens).
fn distribution(
    field: &'static str,
    dist: &LengthDist,
    prompt_text: bool,
) -> Result<Distribution, WorkloadError> {
    let convert = |n: u32| if prompt_text { words_for(f64::from(n)) } else { u64::from(n) };
    match *dist {
        LengthDist::Constant(n) => Ok(Distribution::Fixed(convert(n))),
        LengthDist::Uniform { min, max } => {
            Ok(Distribution::Uniform { min: convert(min), max: convert(max) })
        }
        LengthDist::Lognormal { mean, stddev, max: None } => {
            // epp-bench's log-normal takes its arithmetic mean and the σ of ln(x): σ² = ln(1 + cv²).
            let sigma = (1.0 + (stddev / mean).powi(2)).ln().sqrt();
            let mean = if prompt_text { mean * SIM_BYTES_PER_TOKEN / BYTES_PER_TOKEN } else { mean };
            Ok(Distribution::LogNormal { mean, sigma })
        }
        LengthDist::Lognormal { max: Some(_), .. } => {
            Err(unsupported(field, "epp-bench's lognormal has no max; drop it or use uniform"))
        }
        LengthDist::Normal { .. } => Err(unsupported(field, "epp-bench has no normal distribution")),
    }
}

/// The epp-bench workload that sends what `lab` describes (no target URL: give `--url`).
pub fn from_lab(lab: &epp_lab::Workload) -> Result<Workload, WorkloadError> {
    let mut w = Workload {
        model: lab.model.clone(),
        seed: lab.seed,
        duration: Some(Duration::from_secs_f64(lab.duration.0)),
        prompt_tokens: distribution("prompt_tokens", &lab.prompt_tokens, true)?,
        output_tokens: distribution("output_tokens", &lab.output_tokens, false)?,
        ..Workload::default()
    };
    match lab.arrival {
        Arrival::Poisson { rate } => w.poisson = Some(rate),
        Arrival::Constant { rate } => w.rate = Some(rate),
        Arrival::Bursts { .. } => return Err(unsupported("arrival", "epp-bench has no bursts arrival")),
        Arrival::Diurnal { .. } => return Err(unsupported("arrival", "epp-bench has no diurnal arrival")),
    }
    if let Some(shared) = &lab.shared_prefixes {
        if shared.fraction != 1.0 {
            return Err(unsupported(
                "shared_prefixes.fraction",
                "epp-bench starts every conversation with a shared prefix: use 1.0",
            ));
        }
        let LengthDist::Constant(tokens) = shared.prefix_tokens else {
            return Err(unsupported("shared_prefixes.prefix_tokens", "epp-bench needs {constant: N}"));
        };
        w.prefix_groups = shared.groups;
        // "System prompt N: " and then the words.
        w.prefix_tokens = words_for(f64::from(tokens) - PREFIX_HEADER_BYTES as f64 / SIM_BYTES_PER_TOKEN);
    }
    if lab.sessions.is_some() {
        return Err(unsupported("sessions", "epp-bench's turns are not open-loop sessions"));
    }
    if lab.loras.is_some() {
        return Err(unsupported("loras", "epp-bench sends one model name"));
    }
    if !lab.priorities.is_empty() {
        return Err(unsupported("priorities", "epp-bench has objectives, not priorities"));
    }
    if let Some(slo) = lab.slo {
        (w.slo_ttft_ms, w.slo_tpot_ms) = (slo.ttft_ms, slo.tpot_ms);
    }
    Ok(w)
}

/// Loads a lab workload file (the lab's loader: strict keys, validated) and converts it.
pub fn load(path: &Path) -> Result<Workload, WorkloadError> {
    let shown = path.display().to_string();
    let lab = epp_lab::Workload::load(path)
        .map_err(|e| WorkloadError::Parse { path: shown.clone(), message: e.to_string() })?;
    from_lab(&lab).map_err(|e| WorkloadError::Parse { path: shown, message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "duration: 10s\narrival: {poisson: {rate: 5}}\n\
                        prompt_tokens: {uniform: {min: 154, max: 463}}\noutput_tokens: {constant: 10}\n";

    fn convert(text: &str) -> Result<Workload, String> {
        from_lab(&epp_lab::Workload::from_yaml(text).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
    }

    #[test]
    fn converts_units_and_keys() {
        let text = format!(
            "{BASE}seed: 4\nshared_prefixes: {{fraction: 1.0, groups: 12, prefix_tokens: {{constant: 1547}}}}\n\
             slo: {{ttft_ms: 500}}\n"
        );
        let w = convert(&text).unwrap();
        assert_eq!(w.poisson, Some(5.0));
        assert_eq!(w.duration, Some(Duration::from_secs(10)));
        assert_eq!(w.prompt_tokens, Distribution::Uniform { min: 100, max: 300 });
        assert_eq!(w.output_tokens, Distribution::Fixed(10));
        assert_eq!((w.prefix_groups, w.prefix_tokens, w.seed), (12, 1000, 4));
        assert_eq!((w.slo_ttft_ms, w.slo_tpot_ms), (Some(500.0), None));
        assert_eq!(w.model, epp_lab::workload::DEFAULT_MODEL);
        let constant = convert(&BASE.replace("poisson", "constant")).unwrap();
        assert_eq!((constant.rate, constant.poisson), (Some(5.0), None));
    }

    #[test]
    fn what_epp_bench_cannot_send_is_refused_by_key() {
        let cases = [
            (
                BASE.replace(
                    "{poisson: {rate: 5}}",
                    "{bursts: {base_rate: 1, burst_rate: 5, burst_duration: 1s, period: 5s}}",
                ),
                "arrival",
            ),
            (
                format!("{BASE}sessions: {{fraction: 0.5, turns: {{constant: 2}}, think_time: 1s}}\n"),
                "sessions",
            ),
            (
                format!(
                    "{BASE}shared_prefixes: {{fraction: 0.5, groups: 2, prefix_tokens: {{constant: 9}}}}\n"
                ),
                "fraction",
            ),
            (BASE.replace("{constant: 10}", "{normal: {mean: 10, stddev: 2}}"), "output_tokens"),
            (format!("{BASE}priorities: [{{priority: 1, weight: 1}}]\n"), "priorities"),
        ];
        for (text, key) in cases {
            let e = convert(&text).unwrap_err();
            assert!(e.contains(key), "expected {key:?} in {e:?}");
        }
    }
}
