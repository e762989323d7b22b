//! Plugin types the loader handles itself rather than through the scheduling [`Registry`]: the data layer
//! (metrics source and extractor), the request parser, and the flow-control policies. None of them takes part
//! in a scheduling cycle, so they are turned into typed settings in [`super::LoadedConfig`] instead of
//! `BuiltPlugin`s. The settings types they resolve to are defined here, beside them.
//!
//! [`Registry`]: crate::scheduling::Registry

use serde::Deserialize;

use crate::flowcontrol::{FairnessPolicy, OrderingPolicy, UsageLimitPolicy};

/// URL scheme of the model servers' metrics endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsScheme {
    #[default]
    Http,
    Https,
}

/// How endpoints' metrics are scraped (`metrics-data-source` parameters,
/// kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/datalayer/source/metrics/datasource.go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSourceConfig {
    pub scheme: MetricsScheme,
    /// Always starts with `/`.
    pub path: String,
    pub insecure_skip_verify: bool,
    /// Ask for only the families epp reads (`nameFilter`, an epp extension; default true).
    pub name_filter: bool,
}

impl Default for DataSourceConfig {
    fn default() -> Self {
        Self {
            scheme: MetricsScheme::Http,
            path: "/metrics".to_string(),
            insecure_skip_verify: true,
            name_filter: true,
        }
    }
}

/// How request bodies are parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParserKind {
    /// OpenAI-compatible JSON APIs (the default).
    #[default]
    OpenAi,
    /// No body parsing: requests are routed without a model or prompt.
    Passthrough,
}

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
