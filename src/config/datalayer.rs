//! The data layer (`metrics-data-source` + `core-metrics-extractor`, wired by `dataLayer.sources`) and the
//! request parser (`parser.pluginRef`). epp has one scrape source per endpoint and one parser, so the
//! declarations resolve to a single [`DataSourceConfig`], the extractor's raw parameters, and a
//! [`ParserKind`].

use serde::Deserialize;

use super::local::{DataSourceConfig, LocalPlugin, MetricsScheme, ParserKind, RefTarget};
use super::schema::{RawDataLayer, RawPluginRef};
use super::ConfigError;
use crate::scheduling::parse_params;

pub(crate) const METRICS_DATA_SOURCE: &str = "metrics-data-source";
pub(crate) const CORE_METRICS_EXTRACTOR: &str = "core-metrics-extractor";
pub(crate) const OPENAI_PARSER: &str = "openai-parser";
pub(crate) const PASSTHROUGH_PARSER: &str = "passthrough-parser";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MetricsSourceParams {
    scheme: Option<MetricsScheme>,
    path: Option<String>,
    insecure_skip_verify: Option<bool>,
    name_filter: Option<bool>,
}

/// Parsers take no parameters; anything given is a mistake worth reporting.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

/// Builds a data-layer or parser plugin; `None` when `type_name` is not one.
pub(crate) fn build(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Option<Result<LocalPlugin, ConfigError>> {
    let built = match type_name {
        METRICS_DATA_SOURCE => parse_params::<MetricsSourceParams>(name, type_name, params)
            .map_err(ConfigError::from)
            .and_then(|p| data_source(name, p))
            .map(LocalPlugin::DataSource),
        CORE_METRICS_EXTRACTOR => match params {
            None | Some(serde_json::Value::Null) => Ok(LocalPlugin::Extractor(None)),
            Some(v @ serde_json::Value::Object(_)) => Ok(LocalPlugin::Extractor(Some(v.clone()))),
            Some(_) => {
                Err(crate::scheduling::PluginError::new(name, type_name, "parameters must be a mapping")
                    .into())
            }
        },
        OPENAI_PARSER | PASSTHROUGH_PARSER => {
            parse_params::<NoParams>(name, type_name, params).map_err(ConfigError::from).map(|_| {
                LocalPlugin::Parser(if type_name == OPENAI_PARSER {
                    ParserKind::OpenAi
                } else {
                    ParserKind::Passthrough
                })
            })
        }
        _ => return None,
    };
    Some(built)
}

fn data_source(name: &str, p: MetricsSourceParams) -> Result<DataSourceConfig, ConfigError> {
    let defaults = DataSourceConfig::default();
    let path = match p.path {
        None => defaults.path,
        Some(path) if path.trim().is_empty() => {
            let e = crate::scheduling::PluginError::new(
                name,
                METRICS_DATA_SOURCE,
                "parameter `path`: must not be empty",
            );
            return Err(e.into());
        }
        Some(path) if path.starts_with('/') => path,
        Some(path) => format!("/{path}"),
    };
    Ok(DataSourceConfig {
        scheme: p.scheme.unwrap_or(defaults.scheme),
        path,
        insecure_skip_verify: p.insecure_skip_verify.unwrap_or(defaults.insecure_skip_verify),
        name_filter: p.name_filter.unwrap_or(defaults.name_filter),
    })
}

/// Resolves `dataLayer` (or, without it, the declared source and extractor) to the scrape settings and
/// the extractor's raw parameters.
pub(crate) fn resolve_data_layer<'a>(
    raw: Option<&RawDataLayer>,
    declared: &[(&'a str, &'a LocalPlugin)],
    lookup: &dyn Fn(&str) -> RefTarget<'a>,
) -> Result<(DataSourceConfig, Option<serde_json::Value>), ConfigError> {
    let Some(layer) = raw.filter(|l| !l.sources.is_empty()) else {
        let sources: Vec<_> =
            declared.iter().filter(|(_, p)| matches!(p, LocalPlugin::DataSource(_))).collect();
        let extractors: Vec<_> =
            declared.iter().filter(|(_, p)| matches!(p, LocalPlugin::Extractor(_))).collect();
        if sources.len() > 1 || extractors.len() > 1 {
            return Err(ConfigError::invalid(
                "dataLayer",
                "several data sources or extractors are declared; say which to use in dataLayer.sources",
            ));
        }
        let source = match sources.first() {
            Some((_, LocalPlugin::DataSource(s))) => s.clone(),
            _ => DataSourceConfig::default(),
        };
        let extractor = match extractors.first() {
            Some((_, LocalPlugin::Extractor(params))) => params.clone(),
            _ => None,
        };
        return Ok((source, extractor));
    };
    if layer.sources.len() > 1 {
        return Err(ConfigError::invalid(
            "dataLayer.sources",
            "epp supports exactly one metrics data source",
        ));
    }
    let source_ref = &layer.sources[0];
    let source = match lookup(&source_ref.plugin_ref) {
        RefTarget::Local(LocalPlugin::DataSource(s)) => s.clone(),
        other => {
            return Err(wrong_ref(
                "dataLayer.sources[0].pluginRef",
                &source_ref.plugin_ref,
                other,
                "a data source",
            ))
        }
    };
    if source_ref.extractors.len() > 1 {
        return Err(ConfigError::invalid(
            "dataLayer.sources[0].extractors",
            "epp supports one core-metrics-extractor per source",
        ));
    }
    let extractor = match source_ref.extractors.first() {
        None => {
            tracing::warn!(
                "dataLayer source {:?} lists no extractor; using core-metrics-extractor defaults",
                source_ref.plugin_ref
            );
            None
        }
        Some(RawPluginRef { plugin_ref }) => match lookup(plugin_ref) {
            RefTarget::Local(LocalPlugin::Extractor(params)) => params.clone(),
            other => {
                return Err(wrong_ref(
                    "dataLayer.sources[0].extractors[0].pluginRef",
                    plugin_ref,
                    other,
                    "a metrics extractor",
                ))
            }
        },
    };
    Ok((source, extractor))
}

/// Resolves `parser.pluginRef`; the supported parser type names are accepted even when not declared.
pub(crate) fn resolve_parser<'a>(
    raw: Option<&RawPluginRef>,
    lookup: &dyn Fn(&str) -> RefTarget<'a>,
) -> Result<ParserKind, ConfigError> {
    let Some(RawPluginRef { plugin_ref }) = raw else { return Ok(ParserKind::default()) };
    match lookup(plugin_ref) {
        RefTarget::Local(LocalPlugin::Parser(kind)) => Ok(*kind),
        RefTarget::Missing if plugin_ref == OPENAI_PARSER => Ok(ParserKind::OpenAi),
        RefTarget::Missing if plugin_ref == PASSTHROUGH_PARSER => Ok(ParserKind::Passthrough),
        other => Err(wrong_ref("parser.pluginRef", plugin_ref, other, "a parser")),
    }
}

/// The error for a `pluginRef` that names nothing or the wrong kind of plugin.
pub(crate) fn wrong_ref(field: &str, name: &str, target: RefTarget<'_>, wanted: &str) -> ConfigError {
    let message = match target {
        RefTarget::Missing => format!("references unknown plugin {name:?} (declare it under plugins)"),
        RefTarget::Local(p) => format!("plugin {name:?} is {}, not {wanted}", p.role()),
        RefTarget::Scheduling { type_name } => {
            format!("plugin {name:?} (type {type_name}) is not {wanted}")
        }
    };
    ConfigError::invalid(field, message)
}
