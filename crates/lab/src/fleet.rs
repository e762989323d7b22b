//! The fleet file: which simulated model servers the lab routes to.
//!
//! A fleet is a list of replica groups, each an accelerator profile (`h100-8b`, `l4-8b`) times a count,
//! with optional overrides of the engine settings that matter for routing (batch size, KV room, LoRA
//! slots) and pod labels. Decoding is strict: an unknown key or a wrong type is an error naming the
//! field, and an unknown profile lists the known ones.
//!
//! ```yaml
//! scrape_interval: 50ms      # how often epp's telemetry of each replica is refreshed (default 50ms)
//! noise: 0.05                # relative std-dev of each engine step's duration (default 0.05)
//! kv_transfer_gbps: 25       # P/D: link bandwidth for a prefilled prompt's KV, GB/s (default 25)
//! kv_bytes_per_token: 131072 # P/D: KV bytes per token (default: Llama-3.1-8B in bf16)
//! replicas:
//!   - profile: h100-8b
//!     count: 4
//!     labels: {tier: fast}
//!   - profile: l4-8b
//!     count: 4
//!     num_gpu_blocks: 2000
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::values::Seconds;
use super::LabError;
use epp_sim::{AcceleratorProfile, EngineConfig};

/// Scrape interval when the fleet file gives none: epp's `--refresh-metrics-interval` default.
pub const DEFAULT_SCRAPE_INTERVAL: f64 = 0.050;
/// Step-time noise when the fleet file gives none: the engine's default.
pub const DEFAULT_NOISE: f64 = 0.05;

/// A fleet file as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    #[serde(default)]
    pub scrape_interval: Option<Seconds>,
    #[serde(default)]
    pub noise: Option<f64>,
    #[serde(default)]
    pub kv_transfer_gbps: Option<f64>,
    #[serde(default)]
    pub kv_bytes_per_token: Option<u64>,
    pub replicas: Vec<ReplicaGroup>,
}

/// One group of identical replicas.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaGroup {
    pub profile: String,
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default)]
    pub max_num_seqs: Option<usize>,
    #[serde(default)]
    pub num_gpu_blocks: Option<usize>,
    #[serde(default)]
    pub max_num_batched_tokens: Option<usize>,
    #[serde(default)]
    pub max_loras: Option<usize>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

fn one() -> usize {
    1
}

/// One simulated replica, resolved: its name, engine settings (seed not yet set) and labels.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSpec {
    pub name: String,
    pub engine: EngineConfig,
    pub labels: BTreeMap<String, String>,
}

/// A validated fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub replicas: Vec<ReplicaSpec>,
    /// Seconds of virtual time between telemetry refreshes.
    pub scrape_interval: f64,
    /// P/D (replicas labelled `llm-d.ai/role`): seconds per prompt token to move its KV from the prefill
    /// replica to the decode replica (bytes per token over the link bandwidth).
    pub kv_transfer_seconds_per_token: f64,
}

impl Fleet {
    /// Parses and validates fleet YAML.
    pub fn from_yaml(text: &str) -> Result<Self, LabError> {
        let file: FleetFile = super::parse_yaml(text)?;
        Self::from_file(file)
    }

    /// Reads a fleet file; errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LabError> {
        let path = path.as_ref();
        super::read_file(path).and_then(|t| Self::from_yaml(&t)).map_err(|e| e.in_file(path))
    }

    /// Validates a decoded fleet file and resolves each replica's engine settings.
    pub fn from_file(file: FleetFile) -> Result<Self, LabError> {
        let scrape_interval = file.scrape_interval.map_or(DEFAULT_SCRAPE_INTERVAL, |s| s.0);
        if scrape_interval <= 0.0 {
            return Err(LabError::invalid("scrape_interval", "must be greater than zero"));
        }
        let noise = file.noise.unwrap_or(DEFAULT_NOISE);
        if !(noise.is_finite() && (0.0..=1.0).contains(&noise)) {
            return Err(LabError::invalid("noise", format!("must be a number in [0, 1], got {noise}")));
        }
        let gbps = file.kv_transfer_gbps.unwrap_or(25.0);
        if !(gbps.is_finite() && gbps > 0.0) {
            return Err(LabError::invalid("kv_transfer_gbps", format!("must be > 0, got {gbps}")));
        }
        let kv_bytes_per_token = file.kv_bytes_per_token.unwrap_or(131_072);
        let kv_transfer_seconds_per_token = kv_bytes_per_token as f64 / (gbps * 1e9);
        if file.replicas.is_empty() {
            return Err(LabError::invalid("replicas", "the fleet needs at least one replica group"));
        }
        let mut replicas = Vec::new();
        for (g, group) in file.replicas.iter().enumerate() {
            let field = |name: &str| format!("replicas[{g}].{name}");
            let profile = AcceleratorProfile::by_name(&group.profile).ok_or_else(|| {
                LabError::invalid(
                    field("profile"),
                    format!(
                        "unknown profile {:?}; known profiles: {}",
                        group.profile,
                        AcceleratorProfile::KNOWN.join(", ")
                    ),
                )
            })?;
            if group.count == 0 {
                return Err(LabError::invalid(field("count"), "must be at least 1"));
            }
            let mut engine = EngineConfig::for_profile(profile);
            engine.noise = noise;
            let overrides = [
                ("max_num_seqs", group.max_num_seqs, &mut engine.max_num_seqs),
                ("num_gpu_blocks", group.num_gpu_blocks, &mut engine.num_gpu_blocks),
                ("max_num_batched_tokens", group.max_num_batched_tokens, &mut engine.max_num_batched_tokens),
                ("max_loras", group.max_loras, &mut engine.max_loras),
            ];
            for (name, value, slot) in overrides {
                match value {
                    Some(0) => return Err(LabError::invalid(field(name), "must be at least 1")),
                    Some(v) => *slot = v,
                    None => {}
                }
            }
            engine.validate().map_err(|e| LabError::invalid(format!("replicas[{g}]"), e.to_string()))?;
            for _ in 0..group.count {
                let index = replicas.len();
                replicas.push(ReplicaSpec {
                    name: format!("{}-{index}", engine.profile.name),
                    engine: engine.clone(),
                    labels: group.labels.clone(),
                });
            }
        }
        if replicas.len() > usize::from(u16::MAX) {
            return Err(LabError::invalid("replicas", "at most 65535 replicas are supported"));
        }
        Ok(Self { replicas, scrape_interval, kv_transfer_seconds_per_token })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_groups_and_overrides() {
        let fleet = Fleet::from_yaml(
            "scrape_interval: 100ms\nreplicas:\n- {profile: h100-8b, count: 2, labels: {tier: fast}}\n\
             - {profile: L4_8B, max_num_seqs: 32, num_gpu_blocks: 500, max_loras: 2}\n",
        )
        .unwrap();
        assert_eq!(fleet.scrape_interval, 0.1);
        let names: Vec<_> = fleet.replicas.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["h100-8b-0", "h100-8b-1", "l4-8b-2"]);
        assert_eq!(fleet.replicas[0].labels.get("tier").map(String::as_str), Some("fast"));
        let l4 = &fleet.replicas[2].engine;
        assert_eq!((l4.max_num_seqs, l4.num_gpu_blocks, l4.max_loras), (32, 500, 2));
        assert_eq!(fleet.replicas[0].engine.max_num_seqs, 256);
    }

    #[test]
    fn unknown_profile_lists_the_known_ones() {
        let e = Fleet::from_yaml("replicas: [{profile: a100}]").unwrap_err().to_string();
        assert!(e.contains("replicas[0].profile") && e.contains("h100-8b, l4-8b"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = Fleet::from_yaml("replicas: [{profile: h100-8b, cuont: 2}]").unwrap_err().to_string();
        assert!(e.contains("cuont"), "{e}");
        let e = Fleet::from_yaml("replicas: [{profile: h100-8b, count: many}]").unwrap_err().to_string();
        assert!(e.contains("replicas[0].count"), "{e}");
        let e = Fleet::from_yaml("replicas: [{profile: h100-8b, num_gpu_blocks: 0}]").unwrap_err();
        assert!(e.to_string().contains("replicas[0].num_gpu_blocks"), "{e}");
        let e = Fleet::from_yaml("replicas: []").unwrap_err().to_string();
        assert!(e.contains("replicas"), "{e}");
        let e = Fleet::from_yaml("noise: 2\nreplicas: [{profile: h100-8b}]").unwrap_err().to_string();
        assert!(e.contains("noise"), "{e}");
    }
}
