//! Engine mappings: which metrics of a vLLM, SGLang, TensorRT-LLM or llama.cpp page feed which telemetry
//! field.
//!
//! The built-ins and the `core-metrics-extractor` parameters follow the Go EPP
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go):
//! engines by name, `"default"` reserved as an alias of `defaultEngine`, a user entry replacing that engine's
//! built-in entirely, `""` disabling a spec. Two deliberate differences: series are combined across
//! data-parallel ranks for vLLM (see [`SeriesAggregation`]), and the vLLM KV gauge is read under both its
//! current and its pre-0.9 name, so one config works across vLLM versions.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::spec::{MetricSpec, SpecError};

/// The pod label that names an endpoint's engine, unless configured otherwise.
pub const DEFAULT_ENGINE_LABEL_KEY: &str = "inference.networking.k8s.io/engine-type";
/// The engine used for endpoints without (or with an unknown) engine label, unless configured otherwise.
pub const DEFAULT_ENGINE: &str = "vllm";
/// Not a valid engine name: it is the alias of the default engine.
pub const RESERVED_ENGINE_NAME: &str = "default";

const VLLM_KV_USAGE: &str = "vllm:kv_cache_usage_perc";
const VLLM_KV_USAGE_LEGACY: &str = "vllm:gpu_cache_usage_perc";
const DEFAULT_BLOCK_SIZE_LABEL: &str = "block_size";
const DEFAULT_NUM_BLOCKS_LABEL: &str = "num_gpu_blocks";

/// How several series matching one spec are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SeriesAggregation {
    /// The first matching series wins (the Go EPP's behaviour for pages without timestamps; the latest
    /// timestamp wins when the page has them).
    First,
    /// Queue and running counts are summed and KV usage is the maximum over all matching series: the
    /// whole server's load when vLLM runs data-parallel ranks that each print an `engine="<rank>"` series.
    SumMax,
}

/// One engine's mapping, validated and ready for the extractor.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineMapping {
    pub name: String,
    pub queued: Option<MetricSpec>,
    pub running: Option<MetricSpec>,
    pub kv_usage: Option<MetricSpec>,
    /// The other spelling of the vLLM KV gauge, read only when `kv_usage` is absent from the page.
    pub kv_usage_fallback: Option<MetricSpec>,
    /// Info metric whose labels list running and waiting LoRA adapters; the largest value wins.
    pub lora: Option<MetricSpec>,
    /// Info metric whose labels carry the KV block size and block count.
    pub cache_info: Option<MetricSpec>,
    pub cache_block_size_label: String,
    pub cache_num_blocks_label: String,
    /// Gauge holding the KV block size (TensorRT-LLM).
    pub cache_block_size: Option<MetricSpec>,
    /// Gauge holding the number of KV blocks (TensorRT-LLM).
    pub cache_num_blocks: Option<MetricSpec>,
    pub aggregation: SeriesAggregation,
    /// Distinct metric names of all specs: the parser's filter.
    wanted_names: Vec<String>,
}

impl EngineMapping {
    /// Builds and validates one engine's mapping. Errors name the field as `<location>.<field>`.
    pub fn from_params(params: &EngineConfigParams, location: &str) -> Result<Self, TelemetryConfigError> {
        let parse = |field: &'static str, text: &str| {
            MetricSpec::parse(text).map_err(|source| TelemetryConfigError::InvalidSpec {
                field: format!("{location}.{field}"),
                source,
            })
        };
        let kv_usage = parse("kvUsageSpec", &params.kv_usage_spec)?;
        let kv_usage_fallback = kv_usage.as_ref().and_then(|spec| match spec.name() {
            VLLM_KV_USAGE => Some(spec.with_name(VLLM_KV_USAGE_LEGACY)),
            VLLM_KV_USAGE_LEGACY => Some(spec.with_name(VLLM_KV_USAGE)),
            _ => None,
        });
        // Prefer the current vLLM name whichever spelling was configured: both carry the same value.
        let (kv_usage, kv_usage_fallback) = match (kv_usage, kv_usage_fallback) {
            (Some(legacy), Some(current)) if legacy.name() == VLLM_KV_USAGE_LEGACY => {
                (Some(current), Some(legacy))
            }
            other => other,
        };
        let label_or = |label: &str, default: &str| {
            if label.is_empty() {
                default.to_string()
            } else {
                label.to_string()
            }
        };
        let aggregation = params.series_aggregation.unwrap_or(if params.name == "vllm" {
            SeriesAggregation::SumMax
        } else {
            SeriesAggregation::First
        });
        let mut mapping = EngineMapping {
            name: params.name.clone(),
            queued: parse("queuedRequestsSpec", &params.queued_requests_spec)?,
            running: parse("runningRequestsSpec", &params.running_requests_spec)?,
            kv_usage,
            kv_usage_fallback,
            lora: parse("loraSpec", &params.lora_spec)?,
            cache_info: parse("cacheInfoSpec", &params.cache_info_spec)?,
            cache_block_size_label: label_or(&params.cache_block_size_label_name, DEFAULT_BLOCK_SIZE_LABEL),
            cache_num_blocks_label: label_or(&params.cache_num_blocks_label_name, DEFAULT_NUM_BLOCKS_LABEL),
            cache_block_size: parse("cacheBlockSizeSpec", &params.cache_block_size_spec)?,
            cache_num_blocks: parse("cacheNumBlocksSpec", &params.cache_num_blocks_spec)?,
            aggregation,
            wanted_names: Vec::new(),
        };
        mapping.wanted_names = mapping.specs().map(|s| s.name().to_string()).collect();
        mapping.wanted_names.sort();
        mapping.wanted_names.dedup();
        Ok(mapping)
    }

    /// The metric names this engine reads; everything else on a page is skipped.
    pub fn wanted_names(&self) -> &[String] {
        &self.wanted_names
    }

    fn specs(&self) -> impl Iterator<Item = &MetricSpec> {
        [
            &self.queued,
            &self.running,
            &self.kv_usage,
            &self.kv_usage_fallback,
            &self.lora,
            &self.cache_info,
            &self.cache_block_size,
            &self.cache_num_blocks,
        ]
        .into_iter()
        .flatten()
    }
}

/// One `engineConfigs` entry of the `core-metrics-extractor` parameters. Absent fields are `""`
/// (disabled), because an entry replaces the built-in of the same name entirely.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineConfigParams {
    pub name: String,
    #[serde(default)]
    pub queued_requests_spec: String,
    #[serde(default)]
    pub running_requests_spec: String,
    #[serde(default)]
    pub kv_usage_spec: String,
    #[serde(default)]
    pub lora_spec: String,
    #[serde(default)]
    pub cache_info_spec: String,
    /// Label of `cacheInfoSpec` holding the block size; `block_size` when empty.
    #[serde(default)]
    pub cache_block_size_label_name: String,
    /// Label of `cacheInfoSpec` holding the block count; `num_gpu_blocks` when empty.
    #[serde(default)]
    pub cache_num_blocks_label_name: String,
    #[serde(default)]
    pub cache_block_size_spec: String,
    #[serde(default)]
    pub cache_num_blocks_spec: String,
    /// epp extension: how matching series combine; `sumMax` for `vllm`, `first` otherwise.
    #[serde(default)]
    pub series_aggregation: Option<SeriesAggregation>,
}

impl EngineConfigParams {
    /// The built-in entries
    /// (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go).
    pub fn builtins() -> Vec<EngineConfigParams> {
        let entry = |name: &str, queued: &str, running: &str, kv: &str| EngineConfigParams {
            name: name.to_string(),
            queued_requests_spec: queued.to_string(),
            running_requests_spec: running.to_string(),
            kv_usage_spec: kv.to_string(),
            ..Default::default()
        };
        let triton = "nv_trt_llm_kv_cache_block_metrics";
        vec![
            EngineConfigParams {
                lora_spec: "vllm:lora_requests_info".into(),
                cache_info_spec: "vllm:cache_config_info".into(),
                ..entry("vllm", "vllm:num_requests_waiting", "vllm:num_requests_running", VLLM_KV_USAGE)
            },
            EngineConfigParams {
                cache_info_spec: "sglang:cache_config_info".into(),
                cache_block_size_label_name: "page_size".into(),
                cache_num_blocks_label_name: "num_pages".into(),
                ..entry("sglang", "sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage")
            },
            EngineConfigParams {
                cache_block_size_spec: "trtllm_kv_cache_tokens_per_block".into(),
                cache_num_blocks_spec: "trtllm_kv_cache_max_blocks".into(),
                ..entry(
                    "trtllm-serve",
                    "trtllm_num_requests_waiting",
                    "trtllm_num_requests_running",
                    "trtllm_kv_cache_utilization",
                )
            },
            // epp's own: llama.cpp's server (`llama-server --metrics`), which the Go EPP has no entry for.
            // A request waiting for a free slot is "deferred", one in a slot "processing"; the page has
            // no KV-cache usage gauge (ggml-org/llama.cpp:tools/server/README.md, "GET /metrics").
            entry("llamacpp", "llamacpp:requests_deferred", "llamacpp:requests_processing", ""),
            EngineConfigParams {
                cache_block_size_spec: format!("{triton}{{kv_cache_block_type=tokens_per}}"),
                cache_num_blocks_spec: format!("{triton}{{kv_cache_block_type=max}}"),
                ..entry(
                    "triton-tensorrt-llm",
                    "nv_trt_llm_request_metrics{request_type=waiting}",
                    "nv_trt_llm_request_metrics{request_type=scheduled}",
                    &format!("{triton}{{kv_cache_block_type=fraction}}"),
                )
            },
        ]
    }
}

/// The `core-metrics-extractor` plugin parameters, decoded strictly.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ExtractorParams {
    pub engine_label_key: String,
    pub default_engine: String,
    pub engine_configs: Vec<EngineConfigParams>,
}

impl Default for ExtractorParams {
    fn default() -> Self {
        Self {
            engine_label_key: DEFAULT_ENGINE_LABEL_KEY.to_string(),
            default_engine: DEFAULT_ENGINE.to_string(),
            engine_configs: Vec::new(),
        }
    }
}

/// The `metrics-data-source` plugin parameters: where `/metrics` is on each endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct DataSourceParams {
    pub scheme: MetricsScheme,
    pub path: String,
    pub insecure_skip_verify: bool,
}

impl Default for DataSourceParams {
    fn default() -> Self {
        Self { scheme: MetricsScheme::Http, path: "/metrics".to_string(), insecure_skip_verify: true }
    }
}

impl DataSourceParams {
    /// The scrape URL for an endpoint's `ip:port` (as [`crate::datastore::format_host_port`] writes it).
    pub fn metrics_url(&self, host_port: &str) -> String {
        let scheme = match self.scheme {
            MetricsScheme::Http => "http",
            MetricsScheme::Https => "https",
        };
        let slash = if self.path.starts_with('/') { "" } else { "/" };
        format!("{scheme}://{host_port}{slash}{}", self.path)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsScheme {
    Http,
    Https,
}

/// A rejected telemetry configuration; the message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryConfigError {
    #[error("{field}: {source}")]
    InvalidSpec { field: String, source: SpecError },
    #[error("engineConfigs[{index}].name: engine config name cannot be empty")]
    EmptyEngineName { index: usize },
    #[error("engineConfigs[{index}].name: engine config name cannot be {RESERVED_ENGINE_NAME:?} (reserved)")]
    ReservedEngineName { index: usize },
    #[error("engineConfigs[{index}].name: engine {name:?} is configured twice")]
    DuplicateEngine { index: usize, name: String },
    #[error("defaultEngine: {0:?} not found in engineConfigs or the built-in engines")]
    UnknownDefaultEngine(String),
}

/// All engine mappings plus the rule that picks one for an endpoint.
#[derive(Debug, Clone)]
pub struct EngineSet {
    engine_label_key: String,
    engines: BTreeMap<String, Arc<EngineMapping>>,
    default_engine: Arc<EngineMapping>,
}

impl EngineSet {
    /// The built-in engines with default label key and default engine.
    pub fn builtin() -> Self {
        // The built-ins are constants (covered by tests), not user input.
        Self::from_params(&ExtractorParams::default()).expect("built-in engine configs are valid")
    }

    /// Validates the plugin parameters: user entries first (each replacing the built-in of its name),
    /// then the remaining built-ins.
    pub fn from_params(params: &ExtractorParams) -> Result<Self, TelemetryConfigError> {
        let mut engines = BTreeMap::new();
        for (index, entry) in params.engine_configs.iter().enumerate() {
            if entry.name.is_empty() {
                return Err(TelemetryConfigError::EmptyEngineName { index });
            }
            if entry.name == RESERVED_ENGINE_NAME {
                return Err(TelemetryConfigError::ReservedEngineName { index });
            }
            if engines.contains_key(&entry.name) {
                return Err(TelemetryConfigError::DuplicateEngine { index, name: entry.name.clone() });
            }
            let mapping = EngineMapping::from_params(entry, &format!("engineConfigs[{index}]"))?;
            engines.insert(entry.name.clone(), Arc::new(mapping));
        }
        for builtin in EngineConfigParams::builtins() {
            if !engines.contains_key(&builtin.name) {
                let mapping =
                    EngineMapping::from_params(&builtin, &format!("builtin engine {}", builtin.name))?;
                engines.insert(builtin.name.clone(), Arc::new(mapping));
            }
        }
        let default_name =
            if params.default_engine.is_empty() { DEFAULT_ENGINE } else { params.default_engine.as_str() };
        let default_engine = engines
            .get(default_name)
            .cloned()
            .ok_or_else(|| TelemetryConfigError::UnknownDefaultEngine(default_name.to_string()))?;
        let engine_label_key = if params.engine_label_key.is_empty() {
            DEFAULT_ENGINE_LABEL_KEY.to_string()
        } else {
            params.engine_label_key.clone()
        };
        Ok(Self { engine_label_key, engines, default_engine })
    }

    pub fn engine_label_key(&self) -> &str {
        &self.engine_label_key
    }

    /// The mapping registered under `name`; `"default"` is the default engine.
    pub fn get(&self, name: &str) -> Option<&Arc<EngineMapping>> {
        if name == RESERVED_ENGINE_NAME {
            return Some(&self.default_engine);
        }
        self.engines.get(name)
    }

    pub fn default_engine(&self) -> &Arc<EngineMapping> {
        &self.default_engine
    }

    /// The engine named by the endpoint's engine label; the default engine when the label is absent,
    /// empty or names no configured engine (as the Go registry falls back to its default mapping).
    pub fn for_labels(&self, labels: &BTreeMap<String, String>) -> &Arc<EngineMapping> {
        labels.get(&self.engine_label_key).and_then(|name| self.get(name)).unwrap_or(&self.default_engine)
    }

    pub fn engine_names(&self) -> impl Iterator<Item = &str> {
        self.engines.keys().map(String::as_str)
    }
}

impl Default for EngineSet {
    fn default() -> Self {
        Self::builtin()
    }
}

#[cfg(test)]
#[path = "engines_tests.rs"]
mod tests;
