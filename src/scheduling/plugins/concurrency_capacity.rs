//! Settings of the `concurrency-detector`: its mode, its limits, and how much each endpoint can hold.
//!
//! Upstream gives every endpoint the same `maxConcurrency`, which is wrong for heterogeneous pools (an L4
//! next to an H100). epp lets a capacity be set per endpoint, by precedence for each of the two limits:
//!
//! 1. an `endpointCapacities` entry whose `address` (`ip:port`) is the endpoint's;
//! 2. the endpoint's label `capacityLabel` / `tokenCapacityLabel` (defaults `epp.io/max-concurrency` and
//!    `epp.io/max-token-concurrency`; an empty label name disables the lookup) holding a positive integer;
//!    any other value is logged once (when the endpoint is first dispatched to) and ignored;
//! 3. `maxConcurrency` / `maxTokenConcurrency`.
//!
//! Labels are read once per endpoint instance: the datastore replaces an endpoint whose labels change.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::Deserialize;

use super::param_checks::{check_headroom, positive_int, InvalidParameter};
use crate::datastore::Endpoint;

pub(crate) const DEFAULT_MAX_CONCURRENCY: i64 = 100;
pub(crate) const DEFAULT_MAX_TOKEN_CONCURRENCY: i64 = 1_000_000;
pub(crate) const DEFAULT_CAPACITY_LABEL: &str = "epp.io/max-concurrency";
pub(crate) const DEFAULT_TOKEN_CAPACITY_LABEL: &str = "epp.io/max-token-concurrency";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Params {
    concurrency_mode: Option<String>,
    max_concurrency: Option<i64>,
    max_token_concurrency: Option<i64>,
    headroom: Option<f64>,
    capacity_label: Option<String>,
    token_capacity_label: Option<String>,
    endpoint_capacities: Option<Vec<EndpointCapacityParams>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EndpointCapacityParams {
    address: String,
    max_concurrency: Option<i64>,
    max_token_concurrency: Option<i64>,
}

/// What the detector counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConcurrencyMode {
    /// Requests in flight against `maxConcurrency`.
    #[default]
    Requests,
    /// Estimated tokens in flight against `maxTokenConcurrency`.
    Tokens,
}

impl ConcurrencyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyMode::Requests => "requests",
            ConcurrencyMode::Tokens => "tokens",
        }
    }
}

/// How much one endpoint may hold, in both units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub requests: i64,
    pub tokens: i64,
}

impl Capacity {
    /// The capacity in the unit `mode` counts.
    pub fn of(self, mode: ConcurrencyMode) -> i64 {
        match mode {
            ConcurrencyMode::Requests => self.requests,
            ConcurrencyMode::Tokens => self.tokens,
        }
    }
}

/// An `endpointCapacities` entry: the limits it sets for one address (`None`: not set there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapacityOverride {
    pub max_concurrency: Option<i64>,
    pub max_token_concurrency: Option<i64>,
}

/// The detector's validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyConfig {
    pub mode: ConcurrencyMode,
    /// Default request capacity of an endpoint (> 0).
    pub max_concurrency: i64,
    /// Default token capacity of an endpoint (> 0).
    pub max_token_concurrency: i64,
    /// Burst allowance of the filter above an endpoint's capacity, as a fraction (≥ 0).
    pub headroom: f64,
    /// Endpoint label holding a per-endpoint request capacity; empty: not looked up.
    pub capacity_label: String,
    /// Endpoint label holding a per-endpoint token capacity; empty: not looked up.
    pub token_capacity_label: String,
    /// Per-address capacities, which win over labels.
    pub endpoint_capacities: HashMap<SocketAddr, CapacityOverride>,
}

impl Default for ConcurrencyConfig {
    fn default() -> Self {
        Self {
            mode: ConcurrencyMode::Requests,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            max_token_concurrency: DEFAULT_MAX_TOKEN_CONCURRENCY,
            headroom: 0.0,
            capacity_label: DEFAULT_CAPACITY_LABEL.to_string(),
            token_capacity_label: DEFAULT_TOKEN_CAPACITY_LABEL.to_string(),
            endpoint_capacities: HashMap::new(),
        }
    }
}

impl ConcurrencyConfig {
    /// Checks every range; the error names the offending parameter.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        positive_int("maxConcurrency", Some(self.max_concurrency), 0)?;
        positive_int("maxTokenConcurrency", Some(self.max_token_concurrency), 0)?;
        if !self.headroom.is_finite() || self.headroom < 0.0 {
            return Err(InvalidParameter::new(
                "headroom",
                format!("must be a number >= 0.0, got {}", self.headroom),
            ));
        }
        for (addr, o) in &self.endpoint_capacities {
            let field = format!("endpointCapacities[{addr}]");
            if let Some(v) = o.max_concurrency {
                positive_int(&format!("{field}.maxConcurrency"), Some(v), 0)?;
            }
            if let Some(v) = o.max_token_concurrency {
                positive_int(&format!("{field}.maxTokenConcurrency"), Some(v), 0)?;
            }
        }
        Ok(())
    }

    pub(super) fn from_params(plugin: &str, p: Params) -> Result<Self, InvalidParameter> {
        let defaults = Self::default();
        let mode = match p.concurrency_mode.as_deref() {
            None | Some("requests") => ConcurrencyMode::Requests,
            Some("tokens") => ConcurrencyMode::Tokens,
            Some(other) => {
                return Err(InvalidParameter::new(
                    "concurrencyMode",
                    format!("must be \"requests\" or \"tokens\", got {other:?}"),
                ))
            }
        };
        let mut endpoint_capacities = HashMap::new();
        for (i, entry) in p.endpoint_capacities.unwrap_or_default().into_iter().enumerate() {
            let field = format!("endpointCapacities[{i}]");
            let addr: SocketAddr = entry.address.trim().parse().map_err(|_| {
                InvalidParameter::new(
                    format!("{field}.address"),
                    format!("must be an ip:port such as \"10.0.0.7:8000\", got {:?}", entry.address),
                )
            })?;
            if entry.max_concurrency.is_none() && entry.max_token_concurrency.is_none() {
                return Err(InvalidParameter::new(
                    field,
                    "sets neither maxConcurrency nor maxTokenConcurrency",
                ));
            }
            let check = |name: &str, v: Option<i64>| match v {
                None => Ok(None),
                Some(v) => positive_int(&format!("{field}.{name}"), Some(v), 0).map(Some),
            };
            let limits = CapacityOverride {
                max_concurrency: check("maxConcurrency", entry.max_concurrency)?,
                max_token_concurrency: check("maxTokenConcurrency", entry.max_token_concurrency)?,
            };
            if endpoint_capacities.insert(addr, limits).is_some() {
                return Err(InvalidParameter::new(
                    format!("{field}.address"),
                    format!("{addr} is listed more than once"),
                ));
            }
        }
        let config = Self {
            mode,
            max_concurrency: positive_int("maxConcurrency", p.max_concurrency, defaults.max_concurrency)?,
            max_token_concurrency: positive_int(
                "maxTokenConcurrency",
                p.max_token_concurrency,
                defaults.max_token_concurrency,
            )?,
            headroom: check_headroom(plugin, p.headroom.unwrap_or(defaults.headroom))?,
            capacity_label: p.capacity_label.unwrap_or(defaults.capacity_label),
            token_capacity_label: p.token_capacity_label.unwrap_or(defaults.token_capacity_label),
            endpoint_capacities,
        };
        config.validate()?;
        Ok(config)
    }

    /// The capacity of `endpoint`, by the precedence in the module doc.
    pub fn capacity_of(&self, endpoint: &Endpoint) -> Capacity {
        self.resolve(endpoint, None)
    }

    /// As [`Self::capacity_of`]; with `warn_as` (the plugin name), invalid label values are logged.
    pub(super) fn resolve(&self, endpoint: &Endpoint, warn_as: Option<&str>) -> Capacity {
        let explicit = self.endpoint_capacities.get(&endpoint.addr).copied().unwrap_or_default();
        Capacity {
            requests: explicit
                .max_concurrency
                .or_else(|| label_value(endpoint, &self.capacity_label, warn_as))
                .unwrap_or(self.max_concurrency),
            tokens: explicit
                .max_token_concurrency
                .or_else(|| label_value(endpoint, &self.token_capacity_label, warn_as))
                .unwrap_or(self.max_token_concurrency),
        }
    }
}

/// The positive integer in `endpoint`'s label `label`, if it has one.
fn label_value(endpoint: &Endpoint, label: &str, warn_as: Option<&str>) -> Option<i64> {
    if label.is_empty() {
        return None;
    }
    let raw = endpoint.labels.get(label)?;
    match raw.trim().parse::<i64>() {
        Ok(v) if v > 0 => Some(v),
        _ => {
            if let Some(plugin) = warn_as {
                tracing::warn!(
                    plugin,
                    endpoint = %endpoint.name,
                    label,
                    value = %raw,
                    "endpoint capacity label is not a positive integer; using the configured default"
                );
            }
            None
        }
    }
}
