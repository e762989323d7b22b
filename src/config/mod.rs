//! The EndpointPickerConfig loader.
//!
//! epp reads the Go EPP's YAML unchanged (both `inference.networking.x-k8s.io/v1alpha1` and
//! `llm-d.ai/v1alpha1`) and applies the same defaulting rules (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/config/loader/defaults.go), with one deliberate
//! difference: plugin parameters are decoded strictly, so a misspelt or ill-typed parameter stops startup
//! with an error naming the plugin and the field instead of being silently ignored.
//!
//! The result, [`LoadedConfig`], holds the scheduling [`Pipeline`] and typed settings for the other
//! layers (flow control, data layer, parser), so nothing downstream looks at YAML or plugin names again.
//!
//! epp extensions (not in the Go schema, for running without Kubernetes CRDs): `endpoints` (static model
//! servers), `objectives` (InferenceObjective priorities by name), `modelRewrites` (weighted model
//! rewrites), `tokenEstimator` (the token estimator's constants) and `endpointHealth` (staleness and the
//! circuit breaker's thresholds).

mod assemble;
mod datalayer;
mod detector;
mod error;
mod extensions;
mod flow_control;
mod health;
mod instances;
mod loader;
mod local;
mod local_factory;
mod producers;
mod schema;
mod values;

use std::collections::HashMap;

pub use crate::flowcontrol::{
    FairnessPolicy, FlowControlConfig, OrderingPolicy, PriorityBand, UsageLimitPolicy, DEFAULT_BAND_MAX_BYTES,
};
pub use assemble::DEFAULT_SCORER_WEIGHT;
pub use error::ConfigError;
pub use extensions::{ModelRewrite, RewriteTarget, StaticEndpoint, TokenEstimatorConfig};
pub use loader::{load, load_default, load_file, API_VERSIONS, DEFAULT_CONFIG_YAML, KIND};
pub use local::{DataSourceConfig, MetricsScheme, ParserKind};
pub use producers::default_producer;
pub use values::{parse_duration, parse_quantity};

use crate::scheduling::Pipeline;

/// The feature gates the config turned on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `flowControl`: queue requests in the flow-control layer instead of legacy admission.
    pub flow_control: bool,
    /// `dataLayer`: accepted for compatibility; the data layer is always on.
    pub data_layer: bool,
    /// `enableLegacyMetrics`: accepted; selects the legacy scrape path in the Go EPP.
    pub enable_legacy_metrics: bool,
}

/// A fully resolved configuration.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The scheduling pipeline, defaults added (handler, pickers, producers).
    pub pipeline: Pipeline,
    pub feature_gates: FeatureGates,
    /// `Some` exactly when the `flowControl` gate is on (the block's settings, or all defaults).
    pub flow_control: Option<FlowControlConfig>,
    /// The saturation detector for admission and flow control: the name of a plugin with a
    /// saturation-detector role, `pipeline.plugin(name).and_then(|p| p.saturation_detector.clone())`.
    /// Always `Some` after loading: `saturationDetector.pluginRef` when configured, else the name of the
    /// `utilization-detector` the loader added with default parameters (in no profile, so it gates
    /// admission but filters nothing).
    pub saturation_detector: Option<String>,
    /// epp extension: static endpoints.
    pub endpoints: Vec<StaticEndpoint>,
    /// epp extension: InferenceObjective name → priority.
    pub objectives: HashMap<String, i32>,
    /// epp extension: weighted model rewrites, at most one per matched model.
    pub model_rewrites: Vec<ModelRewrite>,
    /// epp extension: token estimator constants (defaults 4.0 and 1.5).
    pub token_estimator: TokenEstimatorConfig,
    /// epp extension: endpoint health (on, with defaults, when the block is absent).
    pub endpoint_health: crate::health::HealthSettings,
    /// Whether `endpointHealth.stalenessThreshold` was written. When it was not, the app applies
    /// `--metrics-staleness-threshold` instead, so one setting says what stale telemetry is.
    pub endpoint_health_staleness_set: bool,
    /// The metrics scrape settings (`metrics-data-source`; defaults when none is declared).
    pub data_source: DataSourceConfig,
    /// The `core-metrics-extractor` parameters, unvalidated (`None`: none given, use the defaults).
    pub extractor_params: Option<serde_json::Value>,
    pub parser: ParserKind,
}

#[cfg(test)]
mod tests;

/// The keys of the config's epp extensions and top level, as the schema's own deserialisers name them
/// (serde's "expected one of" for an unknown key): `(where, keys)`. The knob tests check that docs/
/// documents each one.
#[cfg(test)]
pub(crate) fn schema_keys() -> Vec<(&'static str, Vec<String>)> {
    fn keys<T: serde::de::DeserializeOwned>() -> Vec<String> {
        let message = match serde_json::from_str::<T>(r#"{"epp-knob-probe": 0}"#) {
            Ok(_) => return Vec::new(),
            Err(error) => error.to_string(),
        };
        let expected = message.split_once("expected").map(|(_, rest)| rest).unwrap_or_default();
        expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
    }
    vec![
        ("the top level", keys::<schema::RawConfig>()),
        ("endpoints[]", keys::<schema::RawEndpoint>()),
        ("objectives[]", keys::<schema::RawObjective>()),
        ("modelRewrites[]", keys::<schema::RawModelRewrite>()),
        ("modelRewrites[].targets[]", keys::<schema::RawRewriteTarget>()),
        ("tokenEstimator", keys::<schema::RawTokenEstimator>()),
        ("endpointHealth", keys::<health::RawEndpointHealth>()),
    ]
}
