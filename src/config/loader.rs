//! Reading an EndpointPickerConfig: decode strictly, build every declared plugin (through the registry or,
//! for data-layer, parser and flow-control types, here), apply the Go loader's defaults, and resolve every
//! reference, so that all configuration mistakes surface at startup.

use std::collections::HashSet;
use std::path::Path;

use super::assemble::{build_pipeline, Declared, DeclaredKind};
use super::extensions::{build_endpoints, build_model_rewrites, build_objectives, build_token_estimator};
use super::local::RefTarget;
use super::local_factory::{build_local, LOCAL_TYPES};
use super::schema::{parse_document, RawConfig};
use super::{datalayer, flow_control, ConfigError, FeatureGates, LoadedConfig};
use crate::scheduling::{FactoryContext, Registry};

/// The configuration used when none is given (upstream
/// kubernetes-sigs/gateway-api-inference-extension:pkg/epp/config/loader/defaults.go).
pub const DEFAULT_CONFIG_YAML: &str = include_str!("default.yaml");

/// The apiVersions accepted: GIE's and llm-d-router's.
pub const API_VERSIONS: &[&str] =
    &["inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1", "llm-d.ai/v1"];
pub const KIND: &str = "EndpointPickerConfig";
/// The deprecated environment variable that also turns the `flowControl` gate on (upstream
/// kubernetes-sigs/gateway-api-inference-extension:cmd/epp/runner/runner.go), read with Go's
/// `strconv.ParseBool` rules, as the Go EPP's runner does.
pub(super) const FLOW_CONTROL_ENV: &str = "ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER";

/// Loads a config from YAML text. An empty document (nothing but whitespace and comments) means "no
/// configuration" and yields the default one.
pub fn load(text: &str, registry: &Registry, ctx: &FactoryContext) -> Result<LoadedConfig, ConfigError> {
    if matches!(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text), Ok(serde_yaml_ng::Value::Null)) {
        tracing::info!("config: empty EndpointPickerConfig; using the default configuration");
        return load_default(registry, ctx);
    }
    load_document(text, registry, ctx)
}

/// Loads the built-in default configuration.
pub fn load_default(registry: &Registry, ctx: &FactoryContext) -> Result<LoadedConfig, ConfigError> {
    load_document(DEFAULT_CONFIG_YAML, registry, ctx)
}

/// Loads a config file; errors name the file.
pub fn load_file(
    path: impl AsRef<Path>,
    registry: &Registry,
    ctx: &FactoryContext,
) -> Result<LoadedConfig, ConfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
    load(&text, registry, ctx)
        .map_err(|e| ConfigError::InFile { path: path.to_path_buf(), source: Box::new(e) })
}

fn load_document(text: &str, registry: &Registry, ctx: &FactoryContext) -> Result<LoadedConfig, ConfigError> {
    let raw = parse_document(text)?;
    check_type_meta(&raw)?;
    let mut feature_gates = feature_gates(&raw.feature_gates)?;
    let env_value = std::env::var(FLOW_CONTROL_ENV).ok();
    if env_enables_flow_control(env_value.as_deref()) && !feature_gates.flow_control {
        tracing::warn!("config: {FLOW_CONTROL_ENV} is deprecated; use `featureGates: [flowControl]`");
        feature_gates.flow_control = true;
    }
    let declared = build_declared(&raw, registry, ctx)?;
    let lookup = |name: &str| -> RefTarget<'_> {
        match declared.iter().find(|d| d.name == name).map(|d| &d.kind) {
            Some(DeclaredKind::Local(p)) => RefTarget::Local(p),
            Some(DeclaredKind::Scheduling(p)) => RefTarget::Scheduling { type_name: p.id.type_name },
            None => RefTarget::Missing,
        }
    };

    let (pipeline, saturation_detector) =
        build_pipeline(&raw.scheduling_profiles, raw.saturation_detector.as_ref(), &declared, registry, ctx)?;
    let local: Vec<(&str, &_)> = declared
        .iter()
        .filter_map(|d| match &d.kind {
            DeclaredKind::Local(p) => Some((d.name.as_str(), p)),
            DeclaredKind::Scheduling(_) => None,
        })
        .collect();
    let (data_source, extractor_params) =
        datalayer::resolve_data_layer(raw.data_layer.as_ref(), &local, &lookup)?;
    let parser = datalayer::resolve_parser(raw.parser.as_ref(), &lookup)?;

    // Resolved even when the gate is off, so a broken block fails at startup rather than when enabled.
    let flow_control_settings = flow_control::resolve(raw.flow_control.as_ref(), &lookup)?;
    if raw.flow_control.is_some() && !feature_gates.flow_control {
        tracing::warn!("config: the flowControl block is ignored without `featureGates: [flowControl]`");
    }
    let flow_control = feature_gates.flow_control.then_some(flow_control_settings);

    Ok(LoadedConfig {
        pipeline,
        feature_gates,
        flow_control,
        saturation_detector: Some(saturation_detector),
        endpoints: build_endpoints(&raw.endpoints)?,
        objectives: build_objectives(&raw.objectives)?,
        model_rewrites: build_model_rewrites(&raw.model_rewrites)?,
        token_estimator: build_token_estimator(raw.token_estimator.as_ref())?,
        endpoint_health: super::health::build_endpoint_health(raw.endpoint_health.as_ref())?,
        endpoint_health_staleness_set: raw
            .endpoint_health
            .as_ref()
            .is_some_and(|h| h.staleness_threshold.is_some()),
        data_source,
        extractor_params,
        parser,
    })
}

fn check_type_meta(raw: &RawConfig) -> Result<(), ConfigError> {
    if let Some(v) = raw.api_version.as_deref() {
        if !API_VERSIONS.contains(&v) {
            return Err(ConfigError::invalid(
                "apiVersion",
                format!("unsupported apiVersion {v:?}; expected one of {}", API_VERSIONS.join(", ")),
            ));
        }
    }
    match raw.kind.as_deref() {
        None | Some(KIND) => Ok(()),
        Some(other) => Err(ConfigError::invalid("kind", format!("kind {other:?} is not {KIND}"))),
    }
}

/// Whether the deprecated variable's value turns flow control on: Go's `ParseBool` true spellings; an
/// unparsable value is logged and counts as false (Go's `GetEnvBool` falls back to its default).
fn env_enables_flow_control(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => true,
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => false,
        Some(other) => {
            tracing::warn!(value = other, "config: {FLOW_CONTROL_ENV} is not a boolean; ignoring it");
            false
        }
    }
}

fn feature_gates(names: &[String]) -> Result<FeatureGates, ConfigError> {
    let mut gates = FeatureGates::default();
    for (i, name) in names.iter().enumerate() {
        match name.as_str() {
            "flowControl" => gates.flow_control = true,
            "dataLayer" => {
                tracing::info!("config: feature gate dataLayer is always on; the gate has no effect");
                gates.data_layer = true;
            }
            "enableLegacyMetrics" => {
                tracing::info!("config: feature gate enableLegacyMetrics accepted");
                gates.enable_legacy_metrics = true;
            }
            other => {
                return Err(ConfigError::invalid(
                    format!("featureGates[{i}]"),
                    format!(
                        "unknown feature gate {other:?}; known: flowControl, dataLayer, enableLegacyMetrics"
                    ),
                ))
            }
        }
    }
    Ok(gates)
}

fn build_declared(
    raw: &RawConfig,
    registry: &Registry,
    ctx: &FactoryContext,
) -> Result<Vec<Declared>, ConfigError> {
    let mut names = HashSet::new();
    let mut declared = Vec::with_capacity(raw.plugins.len());
    for (i, spec) in raw.plugins.iter().enumerate() {
        let type_name = spec.type_name.trim();
        if type_name.is_empty() {
            return Err(ConfigError::invalid(format!("plugins[{i}].type"), "must not be empty"));
        }
        let name = match spec.name.as_deref() {
            None | Some("") => type_name.to_string(),
            Some(n) => n.to_string(),
        };
        if !names.insert(name.clone()) {
            return Err(ConfigError::invalid(
                format!("plugins[{i}].name"),
                format!("duplicate plugin name {name:?}"),
            ));
        }
        let params = spec.parameters.as_ref();
        let kind = if let Some(local) = build_local(i, &name, type_name, params) {
            DeclaredKind::Local(local?)
        } else if let Some(factory) = registry.get(type_name) {
            DeclaredKind::Scheduling(Box::new(factory(&name, params, ctx)?))
        } else {
            let mut known: Vec<String> =
                registry.type_names().chain(LOCAL_TYPES.iter().copied()).map(str::to_string).collect();
            known.sort();
            return Err(ConfigError::UnknownPluginType {
                index: i,
                name,
                type_name: type_name.to_string(),
                known,
            });
        };
        declared.push(Declared { name, kind });
    }
    Ok(declared)
}

#[cfg(test)]
mod tests {
    use super::env_enables_flow_control;

    #[test]
    fn the_deprecated_env_var_reads_like_go_parse_bool() {
        for on in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(env_enables_flow_control(Some(on)), "{on}");
        }
        for off in ["0", "f", "F", "FALSE", "false", "False", "yes", "", " true"] {
            assert!(!env_enables_flow_control(Some(off)), "{off:?}");
        }
        assert!(!env_enables_flow_control(None));
    }
}
