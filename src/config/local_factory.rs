//! Building the plugin types the loader handles itself ([`LocalPlugin`]): each section's module decodes
//! its own types; this one dispatches by type name and rejects the upstream types epp does not implement.

use super::local::LocalPlugin;
use super::{datalayer, flow_control, ConfigError};

/// Types handled here, listed among the known types in "unknown type" errors.
pub(crate) const LOCAL_TYPES: &[&str] = &[
    datalayer::METRICS_DATA_SOURCE,
    datalayer::CORE_METRICS_EXTRACTOR,
    datalayer::OPENAI_PARSER,
    datalayer::PASSTHROUGH_PARSER,
    flow_control::FCFS,
    flow_control::EDF,
    flow_control::SLO_DEADLINE,
    flow_control::GLOBAL_STRICT,
    flow_control::ROUND_ROBIN,
    flow_control::STATIC_USAGE_LIMIT,
];

/// Upstream types epp recognises but does not implement: a clear error beats "unknown type".
const UNSUPPORTED_TYPES: &[(&str, &str)] = &[
    ("vllmgrpc-parser", "epp serves the OpenAI HTTP protocol only; use openai-parser"),
    ("k8s-notification-source", "epp's data layer has only the metrics-data-source"),
    ("endpoint-notification-source", "epp's data layer has only the metrics-data-source"),
];

/// Builds `type_name` if the loader handles it; `None` means "ask the registry".
pub(crate) fn build_local(
    index: usize,
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Option<Result<LocalPlugin, ConfigError>> {
    if let Some((_, why)) = UNSUPPORTED_TYPES.iter().find(|(t, _)| *t == type_name) {
        return Some(Err(ConfigError::invalid(
            format!("plugins[{index}].type"),
            format!("plugin {name:?}: type {type_name:?} is not supported by epp ({why})"),
        )));
    }
    if let Some(built) = datalayer::build(name, type_name, params) {
        return Some(built);
    }
    flow_control::build_policy(name, type_name, params)
}
