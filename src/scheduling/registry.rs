//! Plugin types by name, and the strict parameter decoding every factory uses.
//!
//! The Go EPP decodes plugin parameters non-strictly, so a misspelt parameter is silently ignored. Here an
//! unknown or ill-typed parameter is a startup error that names the plugin and the field.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::plugin::BuiltPlugin;
use super::plugin_metrics::PluginMetrics;
use crate::datastore::Datastore;
use crate::kvcache::KvPools;
use crate::predictor::online::PredictorHub;

/// A plugin configuration error, naming the plugin instance and, where there is one, the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {name:?} (type {type_name}): {message}")]
pub struct PluginError {
    pub name: String,
    pub type_name: String,
    pub message: String,
}

impl PluginError {
    pub fn new(name: &str, type_name: &str, message: impl Into<String>) -> Self {
        Self { name: name.to_string(), type_name: type_name.to_string(), message: message.into() }
    }
}

/// What factories may use while building a plugin: shared services handed in, never globals.
#[derive(Debug, Clone)]
pub struct FactoryContext {
    pub datastore: Arc<Datastore>,
    /// The metric handles plugins record with; each factory takes the one its plugin uses.
    pub metrics: PluginMetrics,
    /// The latency predictor service, built when a `predicted-latency-producer` first asks for it.
    pub predictor: PredictorHub,
    /// Where `precise-prefix-cache-producer` registers its KV-event pool, for callers that feed it events
    /// in process (the lab); the server's subscribers need nothing from it.
    pub kv_pools: KvPools,
}

impl FactoryContext {
    /// A context with a manual, unscraped predictor hub (replace it with [`with_predictor`](Self::with_predictor)).
    pub fn new(datastore: Arc<Datastore>, metrics: PluginMetrics) -> Self {
        Self { datastore, metrics, predictor: PredictorHub::detached(), kv_pools: KvPools::default() }
    }

    pub fn with_predictor(mut self, predictor: PredictorHub) -> Self {
        self.predictor = predictor;
        self
    }
}

/// Builds a plugin instance from its name and its `parameters` block (`None` when absent).
pub(crate) type Factory = fn(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError>;

/// Plugin factories by type name.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    factories: BTreeMap<&'static str, Factory>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, type_name: &'static str, factory: Factory) {
        self.factories.insert(type_name, factory);
    }

    pub fn get(&self, type_name: &str) -> Option<Factory> {
        self.factories.get(type_name).copied()
    }

    pub fn type_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.factories.keys().copied()
    }
}

/// Decodes a plugin's parameters strictly into `P` (which should use `#[serde(deny_unknown_fields)]`).
/// Absent parameters decode from `{}`. Errors name the plugin and the offending field path.
pub fn parse_params<P: DeserializeOwned>(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Result<P, PluginError> {
    let empty = serde_json::Value::Object(Default::default());
    let value = match params {
        None | Some(serde_json::Value::Null) => &empty,
        Some(v) => v,
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = if path == "." || path.is_empty() {
            format!("parameters: {inner}")
        } else {
            format!("parameter `{path}`: {inner}")
        };
        PluginError::new(name, type_name, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct P {
        #[allow(dead_code)]
        queue_depth_threshold: Option<u32>,
    }

    #[test]
    fn unknown_field_names_plugin_and_field() {
        let v = serde_json::json!({"queueDepthTreshold": 5});
        let e = parse_params::<P>("det", "utilization-detector", Some(&v)).unwrap_err();
        assert!(e.to_string().contains("det"), "{e}");
        assert!(e.to_string().contains("queueDepthTreshold"), "{e}");
    }

    #[test]
    fn wrong_type_names_field() {
        let v = serde_json::json!({"queueDepthThreshold": "five"});
        let e = parse_params::<P>("det", "utilization-detector", Some(&v)).unwrap_err();
        assert!(e.message.contains("queueDepthThreshold"), "{e}");
    }

    #[test]
    fn absent_params_decode_as_empty() {
        let p = parse_params::<P>("x", "t", None).unwrap();
        assert!(p.queue_depth_threshold.is_none());
    }
}
