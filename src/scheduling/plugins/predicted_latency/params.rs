//! The producer's parameters: llm-d's names and defaults (llm-d/llm-d-router:pkg/epp/framework/plugins/
//! requestcontrol/dataproducer/predictedlatency/plugin.go, `DefaultConfig`), decoded strictly, plus
//! epp's `acceleratorLabels`. Deprecated parameters are accepted with a warning that names them, so llm-d
//! configurations load unchanged.

use std::time::Duration;

use serde::Deserialize;

use super::super::param_checks::positive;
use crate::datastore::Endpoint;
use crate::scheduling::{parse_params, PluginError};

/// Endpoint labels read for the accelerator class, first present wins: the lab's and static config's
/// `accelerator`, an epp-namespaced pod label, and GKE's node label when copied onto pods.
pub(super) const DEFAULT_ACCELERATOR_LABELS: [&str; 3] =
    ["accelerator", "epp.io/accelerator", "cloud.google.com/gke-accelerator"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    /// Deprecated, ignored (mid-stream TPOT sampling was removed upstream).
    sampling_mean: Option<f64>,
    /// Deprecated, ignored.
    max_decode_token_samples_for_prediction: Option<u64>,
    slo_buffer_factor: Option<f64>,
    #[serde(default, rename = "contextTTL", with = "humantime_serde")]
    context_ttl: Option<Duration>,
    streaming_mode: Option<bool>,
    endpoint_role_label: Option<String>,
    predict_in_produce: Option<bool>,
    predict_decode_stall: Option<bool>,
    /// epp wires producers by the data they produce, so these name which producer llm-d would read; an
    /// empty or any name is accepted (the configured or auto-created producer of that data is used).
    #[allow(dead_code)]
    prefix_match_info_producer_name: Option<String>,
    #[allow(dead_code)]
    in_flight_load_producer_name: Option<String>,
    /// Multimodal encoder-cache features: accepted, but epp has no encoder-cache producer, so the encoder
    /// columns stay 0.
    #[allow(dead_code)]
    use_encoder_cache_features: Option<bool>,
    #[allow(dead_code)]
    encoder_cache_match_info_producer_name: Option<String>,
    accelerator_labels: Option<Vec<String>>,
}

/// The decoded, validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerSettings {
    /// llm-d's `streamingMode`: TTFT from the first chunk and a TPOT model; off, the TTFT model learns
    /// end-to-end latency and TPOT is neither predicted nor enforced.
    pub streaming: bool,
    /// Multiplies TPOT objectives before comparing (> 0).
    pub slo_buffer_factor: f64,
    /// A request still running after this long is forgotten: no training row, and its TPOT objective no
    /// longer constrains its endpoint.
    pub context_ttl: Duration,
    /// The label holding the endpoint's P/D role (`prefill`, `decode`, interleaved roles); `None`: llm-d's
    /// `llm-d.ai/role`.
    pub endpoint_role_label: Option<String>,
    /// `false`: training only, no predictions written.
    pub predict_in_produce: bool,
    /// epp's `predictDecodeStall`: also predict each candidate's [`LatencyPrediction::decode_stall_ms`]
    /// (one more TTFT batch per request), for `latency-scorer`'s `decodeStallWeight`.
    ///
    /// [`LatencyPrediction::decode_stall_ms`]: crate::scheduling::LatencyPrediction::decode_stall_ms
    pub predict_decode_stall: bool,
    pub accelerator_labels: Vec<String>,
}

impl Default for ProducerSettings {
    fn default() -> Self {
        ProducerSettings {
            streaming: false,
            slo_buffer_factor: 1.0,
            context_ttl: Duration::from_secs(300),
            endpoint_role_label: None,
            predict_in_produce: true,
            predict_decode_stall: false,
            accelerator_labels: DEFAULT_ACCELERATOR_LABELS
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        }
    }
}

impl ProducerSettings {
    /// Decodes and validates the `parameters` block; errors name the plugin and the field.
    pub fn parse(
        name: &str,
        type_name: &str,
        params: Option<&serde_json::Value>,
    ) -> Result<Self, PluginError> {
        let p: Params = parse_params(name, type_name, params)?;
        let invalid = |message: String| PluginError::new(name, type_name, message);
        for (deprecated, given) in [
            ("samplingMean", p.sampling_mean.is_some()),
            ("maxDecodeTokenSamplesForPrediction", p.max_decode_token_samples_for_prediction.is_some()),
        ] {
            if given {
                tracing::warn!(plugin = name, parameter = deprecated, "deprecated parameter ignored");
            }
        }
        let defaults = Self::default();
        let slo_buffer_factor = positive("sloBufferFactor", p.slo_buffer_factor, defaults.slo_buffer_factor)
            .map_err(|e| e.for_plugin(name, type_name))?;
        let context_ttl = p.context_ttl.unwrap_or(defaults.context_ttl);
        if context_ttl.is_zero() {
            return Err(invalid("parameter `contextTTL`: must be > 0".into()));
        }
        let accelerator_labels = p.accelerator_labels.unwrap_or(defaults.accelerator_labels);
        if accelerator_labels.iter().any(String::is_empty) {
            return Err(invalid("parameter `acceleratorLabels`: a label name is empty".into()));
        }
        Ok(ProducerSettings {
            streaming: p.streaming_mode.unwrap_or(defaults.streaming),
            slo_buffer_factor,
            context_ttl,
            endpoint_role_label: p.endpoint_role_label.filter(|l| !l.is_empty()),
            predict_in_produce: p.predict_in_produce.unwrap_or(defaults.predict_in_produce),
            predict_decode_stall: p.predict_decode_stall.unwrap_or(defaults.predict_decode_stall),
            accelerator_labels,
        })
    }

    /// The endpoint's accelerator class label value ("" when it has none).
    pub fn accelerator<'e>(&self, endpoint: &'e Endpoint) -> &'e str {
        self.accelerator_labels.iter().find_map(|l| endpoint.labels.get(l)).map_or("", String::as_str)
    }
}
