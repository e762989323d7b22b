//! The EndpointPickerConfig document as written, decoded strictly: every struct denies unknown fields,
//! like the Go loader's `serializer.EnableStrict` for the typed schema. Only plugin `parameters` stay raw
//! JSON, for each plugin's factory to decode (strictly, unlike Go).
//!
//! Fields marked "epp extension" are not in the Go schema; a Go EPP would reject them, so configs shared
//! between the two must leave them out.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::values::{null_as_default, GoDuration, Quantity};

/// The whole document.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConfig {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub feature_gates: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub plugins: Vec<RawPlugin>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub scheduling_profiles: Vec<RawProfile>,
    #[serde(default)]
    pub saturation_detector: Option<RawPluginRef>,
    #[serde(default)]
    pub data_layer: Option<RawDataLayer>,
    #[serde(default)]
    pub flow_control: Option<RawFlowControl>,
    #[serde(default)]
    pub parser: Option<RawPluginRef>,
    /// epp extension: static endpoints (standalone mode without discovery).
    #[serde(default, deserialize_with = "null_as_default")]
    pub endpoints: Vec<RawEndpoint>,
    /// epp extension: InferenceObjective priorities by name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub objectives: Vec<RawObjective>,
    /// epp extension: weighted model rewrites (InferenceModelRewrite without CRDs).
    #[serde(default, deserialize_with = "null_as_default")]
    pub model_rewrites: Vec<RawModelRewrite>,
    /// epp extension: the token estimator's constants.
    #[serde(default)]
    pub token_estimator: Option<RawTokenEstimator>,
    /// epp extension: endpoint health (staleness and the circuit breaker).
    #[serde(default)]
    pub endpoint_health: Option<super::health::RawEndpointHealth>,
}

/// `plugins[]`: one plugin instance.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlugin {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub type_name: String,
    #[serde(default)]
    pub parameters: Option<serde_json::Value>,
}

/// `schedulingProfiles[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub plugins: Vec<RawProfilePlugin>,
}

/// `schedulingProfiles[].plugins[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawProfilePlugin {
    pub plugin_ref: String,
    #[serde(default)]
    pub weight: Option<f64>,
}

/// `{pluginRef: name}` (saturationDetector, parser, dataLayer extractors).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPluginRef {
    pub plugin_ref: String,
}

/// `dataLayer`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDataLayer {
    #[serde(default, deserialize_with = "null_as_default")]
    pub sources: Vec<RawDataSource>,
}

/// `dataLayer.sources[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDataSource {
    pub plugin_ref: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub extractors: Vec<RawPluginRef>,
}

/// `flowControl`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawFlowControl {
    #[serde(default)]
    pub max_bytes: Option<Quantity>,
    #[serde(default)]
    pub max_requests: Option<Quantity>,
    #[serde(default, rename = "defaultRequestTTL")]
    pub default_request_ttl: Option<GoDuration>,
    #[serde(default)]
    pub default_priority_band: Option<RawPriorityBand>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub priority_bands: Vec<RawPriorityBand>,
    #[serde(default)]
    pub usage_limit_policy_plugin_ref: Option<String>,
}

/// `flowControl.defaultPriorityBand` and `flowControl.priorityBands[]` (one Go type, so `priority` is
/// accepted, and ignored, in the default band too).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPriorityBand {
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub max_bytes: Option<Quantity>,
    #[serde(default)]
    pub max_requests: Option<Quantity>,
    #[serde(default)]
    pub ordering_policy_ref: Option<String>,
    #[serde(default)]
    pub fairness_policy_ref: Option<String>,
}

/// `endpoints[]` (epp extension).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    pub address: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub labels: BTreeMap<String, String>,
}

/// `objectives[]` (epp extension).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawObjective {
    pub name: String,
    pub priority: i32,
}

/// `modelRewrites[]` (epp extension).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawModelRewrite {
    pub name: String,
    pub match_model: String,
    pub targets: Vec<RawRewriteTarget>,
}

/// `modelRewrites[].targets[]` (epp extension). A missing weight counts as 1.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRewriteTarget {
    pub model: String,
    #[serde(default)]
    pub weight: Option<f64>,
}

/// `tokenEstimator` (epp extension).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawTokenEstimator {
    #[serde(default)]
    pub characters_per_token: Option<f64>,
    #[serde(default)]
    pub output_ratio: Option<f64>,
}

/// Decodes the document, reporting the path of the offending value.
pub(super) fn parse_document(text: &str) -> Result<RawConfig, super::ConfigError> {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let message = e.into_inner().to_string();
        let message = strip_duplicate_path(&field, message);
        super::ConfigError::Parse { field, message }
    })
}

/// serde_yaml_ng prefixes some messages with its own path (the value's, or its parent's); the error
/// already carries the full path, so drop the prefix rather than print the location twice.
fn strip_duplicate_path(field: &str, message: String) -> String {
    if let Some((prefix, rest)) = message.split_once(": ") {
        let is_path = !prefix.is_empty() && !prefix.contains(' ');
        if is_path && field.starts_with(prefix) {
            return rest.to_string();
        }
    }
    message
}
