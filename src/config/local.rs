//! Plugin types the loader handles itself rather than through the scheduling [`Registry`]: the data layer
//! (metrics source and extractor), the request parser, and the flow-control policies. None of them takes part
//! in a scheduling cycle, so they are turned into typed settings in [`super::LoadedConfig`] instead of
//! `BuiltPlugin`s.
//!
//! [`Registry`]: crate::scheduling::Registry

use super::datalayer::{self, DataSourceConfig, ParserKind};
use super::flow_control;
use super::ConfigError;
use crate::flowcontrol::{FairnessPolicy, OrderingPolicy, UsageLimitPolicy};

/// A declared plugin the loader handles itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LocalPlugin {
    DataSource(DataSourceConfig),
    /// `core-metrics-extractor`; its parameters are validated by the telemetry module.
    Extractor(Option<serde_json::Value>),
    Parser(ParserKind),
    Ordering(OrderingPolicy),
    Fairness(FairnessPolicy),
    UsageLimit(UsageLimitPolicy),
}

impl LocalPlugin {
    /// What the plugin is, with its article, for error messages.
    pub(crate) fn role(&self) -> &'static str {
        match self {
            LocalPlugin::DataSource(_) => "a data source",
            LocalPlugin::Extractor(_) => "a metrics extractor",
            LocalPlugin::Parser(_) => "a parser",
            LocalPlugin::Ordering(_) => "an ordering policy",
            LocalPlugin::Fairness(_) => "a fairness policy",
            LocalPlugin::UsageLimit(_) => "a usage-limit policy",
        }
    }
}

/// What a `pluginRef` names.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RefTarget<'a> {
    Local(&'a LocalPlugin),
    /// A plugin built by the registry.
    Scheduling {
        type_name: &'a str,
    },
    Missing,
}

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
