//! What `app` derives from the flags and the loaded configuration before wiring: the configuration
//! itself, the telemetry engines, the static endpoints, the saturation detector. Pure functions, split
//! from `app` so the wiring reads top to bottom.

use std::sync::Arc;

use anyhow::Context;

use crate::cli::Cli;
use crate::config::{self, LoadedConfig};
use crate::datastore::Endpoint;
use crate::flowcontrol::SaturationDetector;
use crate::request::{Policies, WeightedRewrite};
use crate::scheduling::{FactoryContext, Registry};
use crate::telemetry;

pub(super) fn load_config(
    cli: &Cli,
    registry: &Registry,
    ctx: &FactoryContext,
) -> anyhow::Result<LoadedConfig> {
    let loaded = match (&cli.config_file, &cli.config_text) {
        (Some(path), _) => config::load_file(path, registry, ctx)?,
        (None, Some(text)) => config::load(text, registry, ctx).context("--config-text")?,
        (None, None) => config::load_default(registry, ctx)?,
    };
    Ok(loaded)
}

/// The engine mappings from the `core-metrics-extractor` parameters (built-in defaults when absent).
pub(super) fn engine_set(loaded: &LoadedConfig) -> anyhow::Result<telemetry::EngineSet> {
    let Some(raw) = &loaded.extractor_params else { return Ok(telemetry::EngineSet::builtin()) };
    let params: telemetry::ExtractorParams =
        crate::scheduling::parse_params("core-metrics-extractor", "core-metrics-extractor", Some(raw))?;
    telemetry::EngineSet::from_params(&params).context("core-metrics-extractor parameters")
}

/// The data source's scrape scheme.
pub(super) fn metrics_scheme(loaded: &LoadedConfig) -> &'static str {
    match loaded.data_source.scheme {
        config::MetricsScheme::Http => "http",
        config::MetricsScheme::Https => "https",
    }
}

pub(super) fn static_endpoints(cli: &Cli, loaded: &LoadedConfig) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    for addr in &cli.endpoints {
        out.push(Endpoint::new(crate::datastore::format_host_port(*addr), *addr));
    }
    for e in &loaded.endpoints {
        if out.iter().any(|o| o.addr == e.address) {
            continue;
        }
        let name =
            if e.name.is_empty() { crate::datastore::format_host_port(e.address) } else { e.name.clone() };
        out.push(Endpoint::new(name, e.address).with_labels(e.labels.clone()));
    }
    let (scheme, path) = (metrics_scheme(loaded), &loaded.data_source.path);
    out.into_iter()
        .map(|e| {
            let url = format!("{scheme}://{}{path}", e.host_port);
            e.with_metrics_url(url)
        })
        .collect()
}

/// The configured saturation detector: `saturationDetector.pluginRef`'s plugin, if it fills that role.
pub(super) fn configured_detector(loaded: &LoadedConfig) -> Option<(String, Arc<dyn SaturationDetector>)> {
    let name = loaded.saturation_detector.as_deref()?;
    let detector = loaded.pipeline.plugin(name).and_then(|p| p.saturation_detector.clone());
    if detector.is_none() {
        tracing::warn!(plugin = name, "saturationDetector.pluginRef names a plugin without a detector role");
    }
    detector.map(|d| (name.to_string(), d))
}

/// The config's objectives and model rewrites: the base layer of the policy store, which the cluster's
/// InferenceObjective and InferenceModelRewrite objects are laid over.
pub(super) fn config_policies(loaded: &LoadedConfig) -> Policies {
    let rewrites = loaded.model_rewrites.iter().map(|r| {
        let targets = r.targets.iter().map(|t| (t.model.clone(), t.weight)).collect();
        (r.match_model.clone(), WeightedRewrite { name: r.name.clone(), targets })
    });
    Policies { objectives: loaded.objectives.clone(), rewrites: rewrites.collect(), fallback: None }
}
