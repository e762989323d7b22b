//! The objective mix: which `x-gateway-inference-objective` each request carries, drawn by weight
//! (`interactive:0.7,batch:0.3`), so one run can exercise epp's priority handling.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use http::HeaderValue;
use serde::{Deserialize, Serialize};

/// Weighted objective names for `x-gateway-inference-objective`: `interactive:0.7,batch:0.3`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ObjectiveText", into = "String")]
pub struct ObjectiveMix(pub Vec<(String, f64)>);

#[derive(Deserialize)]
#[serde(untagged)]
enum ObjectiveText {
    Text(String),
    Map(BTreeMap<String, f64>),
}

impl TryFrom<ObjectiveText> for ObjectiveMix {
    type Error = String;
    fn try_from(value: ObjectiveText) -> Result<Self, String> {
        match value {
            ObjectiveText::Text(text) => text.parse(),
            ObjectiveText::Map(map) => ObjectiveMix::checked(map.into_iter().collect()),
        }
    }
}

impl From<ObjectiveMix> for String {
    fn from(mix: ObjectiveMix) -> String {
        mix.to_string()
    }
}

impl ObjectiveMix {
    fn checked(entries: Vec<(String, f64)>) -> Result<Self, String> {
        if entries.is_empty() {
            return Err("no objective given".into());
        }
        for (name, weight) in &entries {
            if name.is_empty() || HeaderValue::from_str(name).is_err() {
                return Err(format!("objective name {name:?} is not a valid header value"));
            }
            if !weight.is_finite() || *weight <= 0.0 {
                return Err(format!("weight of objective {name:?} must be a positive number"));
            }
        }
        Ok(ObjectiveMix(entries))
    }

    /// The objective for a uniform draw `u` in `[0, 1)`: each name is picked in proportion to its weight.
    pub fn pick(&self, u: f64) -> &str {
        let total: f64 = self.0.iter().map(|(_, w)| w).sum();
        let mut threshold = u * total;
        for (name, weight) in &self.0 {
            if threshold < *weight {
                return name;
            }
            threshold -= weight;
        }
        self.0.last().map_or("", |(name, _)| name.as_str())
    }
}

impl FromStr for ObjectiveMix {
    type Err = String;
    /// `name` (weight 1) or `name:weight,name:weight`.
    fn from_str(text: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = match part.rsplit_once(':') {
                Some((name, weight)) => {
                    let weight =
                        weight.trim().parse().map_err(|_| format!("weight {weight:?} is not a number"))?;
                    (name.trim().to_string(), weight)
                }
                None => (part.to_string(), 1.0),
            };
            entries.push((name, weight));
        }
        ObjectiveMix::checked(entries)
    }
}

impl fmt::Display for ObjectiveMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(n, w)| format!("{n}:{w}")).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objective_mix_picks_by_weight() {
        let mix: ObjectiveMix = "interactive:0.7,batch:0.3".parse().unwrap();
        assert_eq!(mix.pick(0.0), "interactive");
        assert_eq!(mix.pick(0.69), "interactive");
        assert_eq!(mix.pick(0.71), "batch");
        assert_eq!(mix.pick(0.999), "batch");
        assert_eq!("solo".parse::<ObjectiveMix>().unwrap().pick(0.5), "solo");
        assert!("a:0".parse::<ObjectiveMix>().is_err());
        assert!("".parse::<ObjectiveMix>().is_err());
    }
}
