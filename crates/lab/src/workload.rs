//! The workload file: what traffic the lab sends, for how long, and what counts as meeting the SLO.
//!
//! Every choice that makes routing matter is a knob here: the arrival process (steady Poisson, a fixed
//! rate, or periodic bursts), long-tailed prompt and output lengths, system prompts shared by many
//! requests (what prefix-aware routing exploits), multi-turn sessions that resend their growing
//! conversation, a LoRA adapter mix, priorities, and latency SLOs. Decoding is strict (unknown keys and
//! wrong types are errors naming the field) and the values are checked before anything runs.
//!
//! ```yaml
//! seed: 7
//! duration: 5m                     # virtual time during which requests arrive
//! model: meta-llama/Llama-3.1-8B-Instruct
//! arrival: {poisson: {rate: 40}}   # or {constant: {rate: 40}}, or
//!                                  # {bursts: {base_rate: 10, burst_rate: 80, burst_duration: 5s, period: 60s}},
//!                                  # or {diurnal: {min_rate: 5, max_rate: 40, period: 10m}} (a smooth ramp)
//! prompt_tokens: {lognormal: {mean: 400, stddev: 300, max: 4000}}   # new user text per request
//! output_tokens: {uniform: {min: 50, max: 300}}
//! shared_prefixes: {fraction: 0.6, groups: 20, prefix_tokens: {constant: 1500}}
//! sessions: {fraction: 0.2, turns: {uniform: {min: 2, max: 5}}, think_time: 10s}
//! loras: {base_weight: 2, adapters: [{name: sql-lora, weight: 1}]}
//! priorities: [{priority: 0, weight: 3}, {priority: -1, weight: 1}]
//! slo: {ttft_ms: 1000, tpot_ms: 50}
//! send_slo_headers: false          # true: every request carries `slo` as its objectives (the
//!                                  # x-llm-d-slo-*-ms headers), for SLO-aware pipelines
//! ```
//!
//! Sessions are open-loop: a session's next turn arrives `think_time` (exponentially distributed) after
//! the previous turn *arrived*, whatever the routing did, so every config sees exactly the same requests.

use std::path::Path;

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::values::{no_more_keys, single_key, LengthDist, Seconds};
use super::LabError;

/// The model name requests carry when no LoRA adapter is chosen.
pub const DEFAULT_MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// A workload, as written and validated.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    #[serde(default)]
    pub seed: u64,
    /// Virtual time during which new requests arrive (the run continues until all have finished).
    pub duration: Seconds,
    #[serde(default = "default_model")]
    pub model: String,
    pub arrival: Arrival,
    /// Tokens of new user text in each request (each turn, for sessions).
    pub prompt_tokens: LengthDist,
    /// Tokens each request generates.
    pub output_tokens: LengthDist,
    #[serde(default)]
    pub shared_prefixes: Option<SharedPrefixes>,
    #[serde(default)]
    pub sessions: Option<Sessions>,
    #[serde(default)]
    pub loras: Option<Loras>,
    #[serde(default)]
    pub priorities: Vec<PriorityShare>,
    #[serde(default)]
    pub slo: Option<Slo>,
    /// Send `slo` as each request's objectives (what the `x-llm-d-slo-ttft-ms` / `-tpot-ms` headers carry),
    /// so SLO-aware pipelines see them; off by default, as clients that send no headers.
    #[serde(default)]
    pub send_slo_headers: bool,
}

fn default_model() -> String {
    DEFAULT_MODEL.to_string()
}

/// When requests (or sessions' first turns) arrive; written as a one-key map like [`LengthDist`].
#[derive(Debug, Clone, PartialEq)]
pub enum Arrival {
    /// Exponential gaps with this mean rate (per second): `{poisson: {rate: 20}}`.
    Poisson { rate: f64 },
    /// Exactly `rate` per second, evenly spaced: `{constant: {rate: 20}}`.
    Constant { rate: f64 },
    /// Poisson at `burst_rate` for `burst_duration` at the start of every `period`, `base_rate` otherwise:
    /// `{bursts: {base_rate: 5, burst_rate: 50, burst_duration: 5s, period: 60s}}`.
    Bursts { base_rate: f64, burst_rate: f64, burst_duration: Seconds, period: Seconds },
    /// Poisson whose rate follows a cosine from `min_rate` (at the start) up to `max_rate` (half a period
    /// in) and back, once every `period`: a day's ramp compressed, `{diurnal: {min_rate: 5, max_rate: 40,
    /// period: 10m}}`.
    Diurnal { min_rate: f64, max_rate: f64, period: Seconds },
}

impl Arrival {
    /// The same process with every rate multiplied by `factor` (the scenario suite's load knob).
    pub fn scaled(&self, factor: f64) -> Arrival {
        match *self {
            Arrival::Poisson { rate } => Arrival::Poisson { rate: rate * factor },
            Arrival::Constant { rate } => Arrival::Constant { rate: rate * factor },
            Arrival::Bursts { base_rate, burst_rate, burst_duration, period } => Arrival::Bursts {
                base_rate: base_rate * factor,
                burst_rate: burst_rate * factor,
                burst_duration,
                period,
            },
            Arrival::Diurnal { min_rate, max_rate, period } => {
                Arrival::Diurnal { min_rate: min_rate * factor, max_rate: max_rate * factor, period }
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateParams {
    rate: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiurnalParams {
    min_rate: f64,
    max_rate: f64,
    period: Seconds,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BurstParams {
    base_rate: f64,
    burst_rate: f64,
    burst_duration: Seconds,
    period: Seconds,
}

impl<'de> Deserialize<'de> for Arrival {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ArrivalVisitor;
        impl<'de> Visitor<'de> for ArrivalVisitor {
            type Value = Arrival;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an arrival process such as {poisson: {rate: 20}}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Arrival, A::Error> {
                const KEYS: &[&str] = &["poisson", "constant", "bursts", "diurnal"];
                let arrival = match single_key(&mut map, KEYS)?.as_str() {
                    "poisson" => Arrival::Poisson { rate: map.next_value::<RateParams>()?.rate },
                    "constant" => Arrival::Constant { rate: map.next_value::<RateParams>()?.rate },
                    "diurnal" => {
                        let p: DiurnalParams = map.next_value()?;
                        Arrival::Diurnal { min_rate: p.min_rate, max_rate: p.max_rate, period: p.period }
                    }
                    _ => {
                        let p: BurstParams = map.next_value()?;
                        Arrival::Bursts {
                            base_rate: p.base_rate,
                            burst_rate: p.burst_rate,
                            burst_duration: p.burst_duration,
                            period: p.period,
                        }
                    }
                };
                no_more_keys(&mut map)?;
                Ok(arrival)
            }
        }
        deserializer.deserialize_map(ArrivalVisitor)
    }
}

/// System prompts shared by groups of requests.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixes {
    /// Share of requests (and sessions) that start with one of the groups' system prompts.
    pub fraction: f64,
    /// Number of distinct system prompts; each request picks one uniformly.
    pub groups: u32,
    /// Length of each group's system prompt (drawn once per group).
    pub prefix_tokens: LengthDist,
}

/// Multi-turn conversations: each turn resends the whole conversation so far.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sessions {
    /// Share of arrivals that start a session instead of a single request.
    pub fraction: f64,
    /// Turns per session.
    pub turns: LengthDist,
    /// Mean gap between a turn's arrival and the next turn's.
    pub think_time: Seconds,
}

/// Which LoRA adapters requests ask for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loras {
    /// Weight of requests for the base model.
    #[serde(default)]
    pub base_weight: f64,
    pub adapters: Vec<Adapter>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adapter {
    pub name: String,
    pub weight: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityShare {
    pub priority: i32,
    pub weight: f64,
}

/// Latency objectives; a request attains the SLO when every given bound holds.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
}

impl Workload {
    /// The objectives each request carries: the workload's `slo` when it opts in to sending it, none
    /// (zeros) otherwise.
    pub fn request_slo(&self) -> epp::request::Slo {
        if self.send_slo_headers {
            self.slo_as_objectives()
        } else {
            epp::request::Slo::default()
        }
    }

    /// The workload's SLO as request objectives whether or not it sends them (a column run with SLO
    /// headers); zeros without an `slo`.
    pub fn slo_as_objectives(&self) -> epp::request::Slo {
        self.slo.map_or_else(epp::request::Slo::default, |slo| epp::request::Slo {
            ttft_ms: slo.ttft_ms.unwrap_or(0.0),
            tpot_ms: slo.tpot_ms.unwrap_or(0.0),
        })
    }

    /// Parses and validates workload YAML.
    pub fn from_yaml(text: &str) -> Result<Self, LabError> {
        let workload: Workload = super::parse_yaml(text)?;
        workload.validate()?;
        Ok(workload)
    }

    /// Reads a workload file; errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LabError> {
        let path = path.as_ref();
        super::read_file(path).and_then(|t| Self::from_yaml(&t)).map_err(|e| e.in_file(path))
    }

    /// Checks every value a run depends on.
    pub fn validate(&self) -> Result<(), LabError> {
        if !self.duration.0.is_finite() || self.duration.0 <= 0.0 {
            return Err(LabError::invalid("duration", "must be greater than zero"));
        }
        if self.model.trim().is_empty() {
            return Err(LabError::invalid("model", "must not be empty"));
        }
        let rate = |field: &str, r: f64| positive(&format!("arrival.{field}"), r);
        match &self.arrival {
            Arrival::Poisson { rate: r } => rate("poisson.rate", *r)?,
            Arrival::Constant { rate: r } => rate("constant.rate", *r)?,
            Arrival::Bursts { base_rate, burst_rate, burst_duration, period } => {
                if !(base_rate.is_finite() && *base_rate >= 0.0) {
                    return Err(LabError::invalid("arrival.bursts.base_rate", "must be a number >= 0"));
                }
                rate("bursts.burst_rate", *burst_rate)?;
                if !period.0.is_finite() || period.0 <= 0.0 {
                    return Err(LabError::invalid("arrival.bursts.period", "must be greater than zero"));
                }
                if burst_duration.0 > period.0 {
                    return Err(LabError::invalid("arrival.bursts.burst_duration", "must not exceed period"));
                }
            }
            Arrival::Diurnal { min_rate, max_rate, period } => {
                if !(min_rate.is_finite() && *min_rate >= 0.0) {
                    return Err(LabError::invalid("arrival.diurnal.min_rate", "must be a number >= 0"));
                }
                rate("diurnal.max_rate", *max_rate)?;
                if max_rate < min_rate {
                    return Err(LabError::invalid("arrival.diurnal.max_rate", "must not be below min_rate"));
                }
                if !period.0.is_finite() || period.0 <= 0.0 {
                    return Err(LabError::invalid("arrival.diurnal.period", "must be greater than zero"));
                }
            }
        }
        self.prompt_tokens.validate("prompt_tokens")?;
        self.output_tokens.validate("output_tokens")?;
        if let Some(p) = &self.shared_prefixes {
            fraction("shared_prefixes.fraction", p.fraction)?;
            if p.groups == 0 {
                return Err(LabError::invalid("shared_prefixes.groups", "must be at least 1"));
            }
            p.prefix_tokens.validate("shared_prefixes.prefix_tokens")?;
        }
        if let Some(s) = &self.sessions {
            fraction("sessions.fraction", s.fraction)?;
            s.turns.validate("sessions.turns")?;
        }
        if let Some(l) = &self.loras {
            non_negative("loras.base_weight", l.base_weight)?;
            for (i, a) in l.adapters.iter().enumerate() {
                if a.name.trim().is_empty() {
                    return Err(LabError::invalid(format!("loras.adapters[{i}].name"), "must not be empty"));
                }
                non_negative(&format!("loras.adapters[{i}].weight"), a.weight)?;
            }
            if l.base_weight + l.adapters.iter().map(|a| a.weight).sum::<f64>() <= 0.0 {
                return Err(LabError::invalid("loras", "at least one weight must be positive"));
            }
        }
        for (i, p) in self.priorities.iter().enumerate() {
            non_negative(&format!("priorities[{i}].weight"), p.weight)?;
        }
        if !self.priorities.is_empty() && self.priorities.iter().all(|p| p.weight == 0.0) {
            return Err(LabError::invalid("priorities", "at least one weight must be positive"));
        }
        if self.send_slo_headers && self.slo.is_none() {
            return Err(LabError::invalid("send_slo_headers", "needs an slo to send"));
        }
        if let Some(slo) = &self.slo {
            for (field, v) in [("slo.ttft_ms", slo.ttft_ms), ("slo.tpot_ms", slo.tpot_ms)] {
                if let Some(v) = v {
                    positive(field, v)?;
                }
            }
        }
        Ok(())
    }
}

fn positive(field: &str, v: f64) -> Result<(), LabError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(LabError::invalid(field, format!("must be a number > 0, got {v}")))
    }
}

fn non_negative(field: &str, v: f64) -> Result<(), LabError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(LabError::invalid(field, format!("must be a number >= 0, got {v}")))
    }
}

fn fraction(field: &str, v: f64) -> Result<(), LabError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(LabError::invalid(field, format!("must be in [0, 1], got {v}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "duration: 10s\narrival: {poisson: {rate: 5}}\n\
                           prompt_tokens: {constant: 100}\noutput_tokens: {constant: 10}\n";

    #[test]
    fn minimal_workload_takes_defaults() {
        let w = Workload::from_yaml(MINIMAL).unwrap();
        assert_eq!(w.duration, Seconds(10.0));
        assert_eq!(w.model, DEFAULT_MODEL);
        assert_eq!(w.seed, 0);
        assert!(w.shared_prefixes.is_none() && w.slo.is_none() && w.priorities.is_empty());
    }

    #[test]
    fn full_workload_parses() {
        let text = format!(
            "{MINIMAL}seed: 3\nshared_prefixes: {{fraction: 0.5, groups: 4, prefix_tokens: {{constant: 64}}}}\n\
             sessions: {{fraction: 0.1, turns: {{uniform: {{min: 2, max: 3}}}}, think_time: 2s}}\n\
             loras: {{base_weight: 1, adapters: [{{name: a, weight: 1}}]}}\n\
             priorities: [{{priority: 1, weight: 1}}]\nslo: {{ttft_ms: 500, tpot_ms: 40}}\n"
        );
        let w = Workload::from_yaml(&text).unwrap();
        assert_eq!(w.sessions.as_ref().unwrap().think_time, Seconds(2.0));
        assert_eq!(w.slo.unwrap().ttft_ms, Some(500.0));
        assert_eq!(w.request_slo(), epp::request::Slo::default(), "objectives are sent only on opt-in");
        let sent = Workload::from_yaml(&format!("{text}send_slo_headers: true\n")).unwrap();
        assert_eq!(sent.request_slo(), epp::request::Slo { ttft_ms: 500.0, tpot_ms: 40.0 });
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (MINIMAL.replace("duration: 10s", "duration: 0"), "duration"),
            (MINIMAL.replace("rate: 5", "rate: -1"), "arrival.poisson.rate"),
            (MINIMAL.replace("rate: 5", "rat: 5"), "rat"),
            (MINIMAL.replace("{constant: 100}", "{uniform: {min: 9, max: 1}}"), "prompt_tokens"),
            (format!("{MINIMAL}slo: {{ttft: 5}}\n"), "ttft"),
            (
                format!("{MINIMAL}sessions: {{fraction: 2, turns: {{constant: 2}}, think_time: 1}}\n"),
                "sessions.fraction",
            ),
            (format!("{MINIMAL}loras: {{adapters: [{{name: a, weight: 0}}]}}\n"), "loras"),
            (
                format!(
                    "{MINIMAL}shared_prefixes: {{fraction: 1, groups: 0, prefix_tokens: {{constant: 1}}}}\n"
                ),
                "shared_prefixes.groups",
            ),
            (format!("{MINIMAL}surprise: 1\n"), "surprise"),
            (format!("{MINIMAL}send_slo_headers: true\n"), "send_slo_headers"),
            (
                MINIMAL.replace("{poisson: {rate: 5}}", "{diurnal: {min_rate: 9, max_rate: 1, period: 1m}}"),
                "arrival.diurnal.max_rate",
            ),
        ];
        for (text, field) in cases {
            let e = Workload::from_yaml(&text).unwrap_err().to_string();
            assert!(e.contains(field), "expected {field:?} in {e:?}");
        }
    }
}
