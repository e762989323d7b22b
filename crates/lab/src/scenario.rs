//! A scenario of the suite (`crates/lab/inputs/scenarios/`): a fleet, a workload, the load it runs at and
//! which half of the suite it belongs to, in one file.
//!
//! Why one file: a routing result is only meaningful with the fleet, the traffic and the load it was
//! measured at, and the suite's rule — parameters are chosen on the `tuning` half only, and the
//! `held-out` half reports how they generalise — has to travel with the scenario. `rate_scale`
//! multiplies every rate of the workload's arrival process; `scripts/scenarios.py calibrate` writes the
//! value at which the default profile's mean SLO attainment over the calibration seeds lies in 70–85%.
//!
//! ```yaml
//! description: 3 fast + 1 slow replicas, chat behind shared system prompts
//! split: tuning                  # or held-out
//! rate_scale: 1.0                # written by scripts/scenarios.py calibrate
//! fleet: {replicas: [{profile: h100-8b, count: 3}, {profile: l4-8b, count: 1}]}
//! workload: {duration: 5m, arrival: {poisson: {rate: 10}}, ...}
//! ```

use std::path::Path;

use serde::Deserialize;

use super::fleet::{Fleet, FleetFile};
use super::workload::Workload;
use super::LabError;

/// Which half of the suite a scenario belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    /// The only scenarios any parameter may be chosen on.
    Tuning,
    /// Reported separately; never used to choose a parameter.
    HeldOut,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    description: String,
    split: Split,
    #[serde(default = "unit")]
    rate_scale: f64,
    fleet: FleetFile,
    workload: Workload,
}

fn unit() -> f64 {
    1.0
}

/// A validated scenario: its fleet, and its workload with the arrival rates already scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub description: String,
    pub split: Split,
    pub rate_scale: f64,
    pub fleet: Fleet,
    pub workload: Workload,
}

impl Scenario {
    /// Parses and validates scenario YAML.
    pub fn from_yaml(text: &str) -> Result<Self, LabError> {
        let file: ScenarioFile = super::parse_yaml(text)?;
        if !(file.rate_scale.is_finite() && file.rate_scale > 0.0) {
            return Err(LabError::invalid(
                "rate_scale",
                format!("must be a number > 0, got {}", file.rate_scale),
            ));
        }
        let fleet = Fleet::from_file(file.fleet).map_err(|e| prefixed("fleet", e))?;
        let mut workload = file.workload;
        workload.arrival = workload.arrival.scaled(file.rate_scale);
        workload.validate().map_err(|e| prefixed("workload", e))?;
        Ok(Self {
            description: file.description,
            split: file.split,
            rate_scale: file.rate_scale,
            fleet,
            workload,
        })
    }

    /// Reads a scenario file; errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LabError> {
        let path = path.as_ref();
        super::read_file(path).and_then(|t| Self::from_yaml(&t)).map_err(|e| e.in_file(path))
    }
}

/// Puts a section's name in front of the field an error names.
fn prefixed(section: &str, error: LabError) -> LabError {
    match error {
        LabError::Invalid { field, message } => {
            let field = if field.is_empty() || field == "." {
                section.to_string()
            } else {
                format!("{section}.{field}")
            };
            LabError::Invalid { field, message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Arrival;

    const SCENARIO: &str = "description: two replicas\nsplit: held-out\nrate_scale: 1.5\n\
        fleet: {replicas: [{profile: h100-8b, count: 2}]}\n\
        workload: {duration: 10s, arrival: {poisson: {rate: 4}}, prompt_tokens: {constant: 10}, \
        output_tokens: {constant: 2}}\n";

    #[test]
    fn scales_the_arrival_rate_and_keeps_the_split() {
        let s = Scenario::from_yaml(SCENARIO).unwrap();
        assert_eq!(s.split, Split::HeldOut);
        assert_eq!(s.workload.arrival, Arrival::Poisson { rate: 6.0 });
        assert_eq!(s.fleet.replicas.len(), 2);
    }

    #[test]
    fn errors_name_the_section_and_field() {
        let cases = [
            (SCENARIO.replace("held-out", "training"), "split"),
            (SCENARIO.replace("rate_scale: 1.5", "rate_scale: 0"), "rate_scale"),
            (SCENARIO.replace("count: 2", "count: 0"), "fleet.replicas[0].count"),
            (SCENARIO.replace("rate: 4", "rate: -4"), "workload.arrival.poisson.rate"),
            (SCENARIO.replace("description", "descripton"), "descripton"),
        ];
        for (text, field) in cases {
            let e = Scenario::from_yaml(&text).unwrap_err().to_string();
            assert!(e.contains(field), "expected {field:?} in {e:?}");
        }
    }
}
