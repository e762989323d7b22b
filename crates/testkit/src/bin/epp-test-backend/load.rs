//! The load a fake backend reports, and its vLLM V1 `/metrics` exposition.
//!
//! Why separate: tests steer epp's scheduler only through what it scrapes, so this file is the contract
//! with epp's metrics parser: vLLM V1 names, `engine="0"` plus `model_name` labels (sorted, as
//! `prometheus_client` writes them), and the info-style `lora_requests_info` / `cache_config_info` series
//! (upstream vllm-project/vllm:vllm/v1/metrics/loggers.py).

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{lock, Backend};

/// The load a backend reports in /metrics; set by tests through `POST /admin/metrics` (partial updates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LoadSettings {
    waiting: f64,
    /// Added to the requests this backend is serving right now.
    running: f64,
    kv: f64,
    block_size: u32,
    num_gpu_blocks: u32,
    max_lora: u32,
    running_lora: Vec<String>,
    waiting_lora: Vec<String>,
}

impl Default for LoadSettings {
    fn default() -> Self {
        Self {
            waiting: 0.0,
            running: 0.0,
            kv: 0.0,
            block_size: 16,
            num_gpu_blocks: 8192,
            max_lora: 4,
            running_lora: Vec::new(),
            waiting_lora: Vec::new(),
        }
    }
}

impl LoadSettings {
    /// Overlays the keys of `update` (a JSON object) on these settings; unknown keys are an error.
    pub(crate) fn merged(&self, update: &Value) -> Result<Self, String> {
        let Value::Object(update) = update else { return Err("expected a JSON object".into()) };
        let mut current = serde_json::to_value(self).map_err(|e| e.to_string())?;
        if let Value::Object(current) = &mut current {
            current.extend(update.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        serde_json::from_value(current).map_err(|e| e.to_string())
    }
}

fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The vLLM V1 exposition (see upstream vllm-project/vllm:vllm/v1/metrics/loggers.py): `engine="0"` plus
/// `model_name` labels, labels sorted.
pub(crate) fn render_metrics(backend: &Backend) -> String {
    use std::fmt::Write;
    let load = lock(&backend.load).clone();
    let running = load.running + backend.in_flight.load(Ordering::SeqCst) as f64;
    let labels = format!("engine=\"0\",model_name=\"{}\"", escape_label(&backend.model));
    let mut out = String::with_capacity(2048);
    let gauges = [
        ("num_requests_running", "Number of requests in model execution batches.", running),
        ("num_requests_waiting", "Number of requests waiting to be processed.", load.waiting),
        ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", load.kv),
    ];
    for (name, help, value) in gauges {
        let _ = write!(
            out,
            "# HELP vllm:{name} {help}\n# TYPE vllm:{name} gauge\nvllm:{name}{{{labels}}} {value:?}\n"
        );
    }
    let _ = write!(
        out,
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n\
         # TYPE vllm:lora_requests_info gauge\n\
         vllm:lora_requests_info{{max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {:?}\n",
        load.max_lora,
        escape_label(&load.running_lora.join(",")),
        escape_label(&load.waiting_lora.join(",")),
        backend.started_unix as f64,
    );
    let _ = write!(
        out,
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
         # TYPE vllm:cache_config_info gauge\n\
         vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",\
         engine=\"0\",num_gpu_blocks=\"{}\"}} 1.0\n",
        load.block_size, load.num_gpu_blocks,
    );
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::{test_backend, InFlight};

    #[test]
    fn admin_update_is_partial_and_rejects_unknown_keys() {
        let load = LoadSettings::default();
        let merged = load.merged(&json!({"waiting": 3, "kv": 0.5})).unwrap();
        assert_eq!((merged.waiting, merged.kv, merged.running), (3.0, 0.5, 0.0));
        assert_eq!(merged.block_size, 16);
        assert!(load.merged(&json!({"queue": 1})).is_err());
        assert!(load.merged(&json!([1])).is_err());
    }

    #[test]
    fn metrics_add_in_flight_requests_to_running() {
        let backend = Arc::new(test_backend("m\"x"));
        *lock(&backend.load) = LoadSettings { running: 1.0, waiting: 2.0, kv: 0.25, ..Default::default() };
        let in_flight = InFlight::new(&backend);
        let text = render_metrics(&backend);
        let labels = "{engine=\"0\",model_name=\"m\\\"x\"}";
        assert!(text.contains(&format!("vllm:num_requests_running{labels} 2.0\n")), "{text}");
        assert!(text.contains(&format!("vllm:num_requests_waiting{labels} 2.0\n")));
        assert!(text.contains(&format!("vllm:kv_cache_usage_perc{labels} 0.25\n")));
        assert!(text.contains("# TYPE vllm:kv_cache_usage_perc gauge\n"));
        assert!(text.contains("block_size=\"16\""));
        assert!(text.contains("vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"\","));
        drop(in_flight);
        assert!(render_metrics(&backend).contains(&format!("vllm:num_requests_running{labels} 1.0\n")));
    }
}
