//! The load a fake backend reports, and the values of its vLLM V1 `/metrics` page.
//!
//! Why separate: tests steer epp's scheduler only through what it scrapes, so this file is the contract
//! between `POST /admin/metrics` and the page. The text itself (vLLM V1 names, `engine="0"` plus
//! `model_name` labels, the info-style `lora_requests_info` / `cache_config_info` series, upstream
//! vllm-project/vllm:vllm/v1/metrics/loggers.py) is rendered by `epp_sim::VllmPage`, the one renderer
//! the simulator and every fake server share.

use std::sync::atomic::Ordering;

use epp_sim::{CacheInfo, LoraInfo, VllmPage};
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

/// The vLLM V1 page, rendered by epp-sim's exposition (the workspace's one vLLM `/metrics` renderer):
/// running is the set value plus the requests in flight; `lora_requests_info` and `cache_config_info`
/// are always present.
pub(crate) fn render_metrics(backend: &Backend) -> String {
    let load = lock(&backend.load).clone();
    let running = load.running + backend.in_flight.load(Ordering::SeqCst) as f64;
    VllmPage {
        model: &backend.model,
        running,
        waiting: load.waiting,
        kv_usage: load.kv,
        legacy_names: false,
        lora: Some(LoraInfo {
            max_loras: load.max_lora as usize,
            running: &load.running_lora,
            waiting: &load.waiting_lora,
            updated_unix: backend.started_unix as f64,
        }),
        cache: Some(CacheInfo {
            block_size: load.block_size as usize,
            num_gpu_blocks: load.num_gpu_blocks as usize,
            enable_prefix_caching: true,
        }),
    }
    .render()
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
