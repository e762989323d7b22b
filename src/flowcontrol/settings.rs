//! The flow-control layer's typed settings: bands, limits and policies. The config loader builds them
//! from the `flowControl` block (names and quantities resolved there), so this layer never parses.

use std::collections::BTreeMap;
use std::time::Duration;

/// Per-band byte capacity when none is configured (1 GB).
pub const DEFAULT_BAND_MAX_BYTES: u64 = 1_000_000_000;

/// Which item inside a flow goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderingPolicy {
    /// By enqueue time (the default).
    #[default]
    Fcfs,
    /// Earliest deadline (enqueue time + TTL) first.
    Edf,
    /// Deadline = received time + the `x-slo-ttft-ms` header.
    SloDeadline,
}

/// Which flow inside a band goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FairnessPolicy {
    /// One global order across the band's flows (the default).
    #[default]
    GlobalStrict,
    RoundRobin,
}

/// The saturation ceiling per band: a constant threshold (`static-usage-limit-policy`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageLimitPolicy {
    pub threshold: f64,
}

impl Default for UsageLimitPolicy {
    fn default() -> Self {
        Self { threshold: 1.0 }
    }
}

/// One priority band's limits and policies. 0 for a limit means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityBand {
    pub max_bytes: u64,
    pub max_requests: u64,
    pub ordering: OrderingPolicy,
    pub fairness: FairnessPolicy,
}

impl Default for PriorityBand {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_BAND_MAX_BYTES,
            max_requests: 0,
            ordering: OrderingPolicy::default(),
            fairness: FairnessPolicy::default(),
        }
    }
}

/// The flow-control layer's settings. Limits of 0 mean unlimited.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FlowControlConfig {
    pub max_bytes: u64,
    pub max_requests: u64,
    /// `None` (omitted or 0): only the client's context bounds the wait.
    pub default_request_ttl: Option<Duration>,
    /// The template for priorities not listed in `priority_bands`.
    pub default_priority_band: PriorityBand,
    /// Explicit bands by priority. A field a band leaves out takes the system default, not the template's.
    pub priority_bands: BTreeMap<i32, PriorityBand>,
    pub usage_limit: UsageLimitPolicy,
}
