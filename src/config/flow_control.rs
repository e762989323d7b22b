//! The `flowControl` block and the flow-control policy plugins, resolved into typed settings with the
//! defaults of upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/flowcontrol/registry/config.go applied, so the
//! flow-control layer never sees names or quantities.
//!
//! Policy references (`orderingPolicyRef`, `fairnessPolicyRef`, `usageLimitPolicyPluginRef`) name declared
//! plugins; the three default policies (`fcfs-ordering-policy`, `global-strict-fairness-policy`,
//! `static-usage-limit-policy`) are always available, as the Go loader always registers them.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::datalayer::wrong_ref;
use super::local::{LocalPlugin, RefTarget};
use super::schema::{RawFlowControl, RawPriorityBand};
use super::ConfigError;
use crate::flowcontrol::settings::{
    FairnessPolicy, FlowControlConfig, OrderingPolicy, PriorityBand, UsageLimitPolicy,
};
use crate::scheduling::{parse_params, PluginError};

pub(crate) const FCFS: &str = "fcfs-ordering-policy";
pub(crate) const EDF: &str = "edf-ordering-policy";
pub(crate) const SLO_DEADLINE: &str = "slo-deadline-ordering-policy";
pub(crate) const GLOBAL_STRICT: &str = "global-strict-fairness-policy";
pub(crate) const ROUND_ROBIN: &str = "round-robin-fairness-policy";
pub(crate) const STATIC_USAGE_LIMIT: &str = "static-usage-limit-policy";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StaticUsageLimitParams {
    threshold: Option<f64>,
}

/// Builds a flow-control policy plugin; `None` when `type_name` is not one.
pub(crate) fn build_policy(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Option<Result<LocalPlugin, ConfigError>> {
    let simple = |plugin: LocalPlugin| {
        parse_params::<NoParams>(name, type_name, params).map(|_| plugin).map_err(ConfigError::from)
    };
    let built = match type_name {
        FCFS => simple(LocalPlugin::Ordering(OrderingPolicy::Fcfs)),
        EDF => simple(LocalPlugin::Ordering(OrderingPolicy::Edf)),
        SLO_DEADLINE => simple(LocalPlugin::Ordering(OrderingPolicy::SloDeadline)),
        GLOBAL_STRICT => simple(LocalPlugin::Fairness(FairnessPolicy::GlobalStrict)),
        ROUND_ROBIN => simple(LocalPlugin::Fairness(FairnessPolicy::RoundRobin)),
        STATIC_USAGE_LIMIT => parse_params::<StaticUsageLimitParams>(name, type_name, params)
            .map_err(ConfigError::from)
            .and_then(|p| match p.threshold {
                None => Ok(UsageLimitPolicy::default()),
                Some(t) if t.is_finite() && t >= 0.0 => Ok(UsageLimitPolicy { threshold: t }),
                Some(t) => Err(PluginError::new(
                    name,
                    type_name,
                    format!("parameter `threshold`: {t} must be a finite number ≥ 0"),
                )
                .into()),
            })
            .map(LocalPlugin::UsageLimit),
        _ => return None,
    };
    Some(built)
}

/// Resolves the `flowControl` block (`None`: all defaults).
pub(crate) fn resolve<'a>(
    raw: Option<&RawFlowControl>,
    lookup: &dyn Fn(&str) -> RefTarget<'a>,
) -> Result<FlowControlConfig, ConfigError> {
    let default_raw = RawFlowControl::default();
    let raw = raw.unwrap_or(&default_raw);
    let default_priority_band = match &raw.default_priority_band {
        Some(band) => resolve_band(band, "flowControl.defaultPriorityBand", lookup)?,
        None => PriorityBand::default(),
    };
    let mut priority_bands = BTreeMap::new();
    for (i, band) in raw.priority_bands.iter().enumerate() {
        let field = format!("flowControl.priorityBands[{i}]");
        let Some(priority) = band.priority else {
            return Err(ConfigError::invalid(format!("{field}.priority"), "is required"));
        };
        if priority_bands.insert(priority, resolve_band(band, &field, lookup)?).is_some() {
            return Err(ConfigError::invalid(
                format!("{field}.priority"),
                format!("priority {priority} is configured twice"),
            ));
        }
    }
    let usage_limit = match raw.usage_limit_policy_plugin_ref.as_deref() {
        None | Some("") => UsageLimitPolicy::default(),
        Some(name) => match lookup(name) {
            RefTarget::Local(LocalPlugin::UsageLimit(p)) => *p,
            RefTarget::Missing if name == STATIC_USAGE_LIMIT => UsageLimitPolicy::default(),
            other => {
                return Err(wrong_ref(
                    "flowControl.usageLimitPolicyPluginRef",
                    name,
                    other,
                    "a usage-limit policy",
                ))
            }
        },
    };
    Ok(FlowControlConfig {
        max_bytes: raw.max_bytes.map_or(0, |q| q.0),
        max_requests: raw.max_requests.map_or(0, |q| q.0),
        default_request_ttl: raw.default_request_ttl.map(|d| d.0).filter(|d| !d.is_zero()),
        default_priority_band,
        priority_bands,
        usage_limit,
    })
}

fn resolve_band<'a>(
    raw: &RawPriorityBand,
    field: &str,
    lookup: &dyn Fn(&str) -> RefTarget<'a>,
) -> Result<PriorityBand, ConfigError> {
    let defaults = PriorityBand::default();
    let ordering = match raw.ordering_policy_ref.as_deref() {
        None | Some("") => defaults.ordering,
        Some(name) => match lookup(name) {
            RefTarget::Local(LocalPlugin::Ordering(p)) => *p,
            RefTarget::Missing if name == FCFS => OrderingPolicy::Fcfs,
            other => {
                return Err(wrong_ref(
                    &format!("{field}.orderingPolicyRef"),
                    name,
                    other,
                    "an ordering policy",
                ))
            }
        },
    };
    let fairness = match raw.fairness_policy_ref.as_deref() {
        None | Some("") => defaults.fairness,
        Some(name) => match lookup(name) {
            RefTarget::Local(LocalPlugin::Fairness(p)) => *p,
            RefTarget::Missing if name == GLOBAL_STRICT => FairnessPolicy::GlobalStrict,
            other => {
                return Err(wrong_ref(
                    &format!("{field}.fairnessPolicyRef"),
                    name,
                    other,
                    "a fairness policy",
                ))
            }
        },
    };
    Ok(PriorityBand {
        // An explicit 0 keeps Go's meaning for a zero band size: fall back to the default.
        max_bytes: raw.max_bytes.map(|q| q.0).filter(|&b| b > 0).unwrap_or(defaults.max_bytes),
        max_requests: raw.max_requests.map_or(defaults.max_requests, |q| q.0),
        ordering,
        fairness,
    })
}
