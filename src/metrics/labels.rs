//! Label values and label sets.
//!
//! Label values are interned as [`LabelValue`] (an `Arc<str>`), so recording a sample on the request path
//! clones a pointer instead of allocating a `String` per label. Values taken from requests (model names,
//! fairness ids) pass through a [`BoundedLabels`] that caps how many distinct values may mint series: the
//! model name comes from the request body, and Prometheus families never forget a label set, so without a
//! cap a client could grow the exposition without limit (the Go EPP caps these at 1000 for the same
//! reason, folding the rest into `other`).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// What label values beyond a [`BoundedLabels`] cap collapse to (the Go EPP's `OverflowValue`).
pub const OVERFLOW_LABEL: &str = "other";

/// An interned label value. Hashes and compares as its text, so a `HashSet<LabelValue>` can be probed
/// with a `&str`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelValue(Arc<str>);

impl LabelValue {
    pub fn new(value: &str) -> Self {
        Self(Arc::from(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for LabelValue {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl EncodeLabelValue for LabelValue {
    /// prometheus-client writes label values verbatim, and these values can come from a request body:
    /// escape them as the exposition format requires so a quote or newline cannot break (or forge)
    /// series.
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        let value = self.as_str();
        if !value.contains(['\\', '"', '\n']) {
            return encoder.write_str(value);
        }
        for c in value.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// An interner that admits at most `cap` distinct values (plus any pinned ones); later values map to
/// [`OVERFLOW_LABEL`]. Once admitted a value always maps to itself, so paired calls (running
/// increment/decrement) stay balanced.
#[derive(Debug)]
pub struct BoundedLabels {
    cap: usize,
    inner: RwLock<Admitted>,
    empty: LabelValue,
    overflow: LabelValue,
}

#[derive(Debug, Default)]
struct Admitted {
    values: HashSet<LabelValue>,
    /// Admitted values that count against the cap (pinned ones do not).
    counted: usize,
    pinned: HashSet<LabelValue>,
}

impl BoundedLabels {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            inner: RwLock::new(Admitted::default()),
            empty: LabelValue::new(""),
            overflow: LabelValue::new(OVERFLOW_LABEL),
        }
    }

    /// The label value to emit for `raw`: itself when admitted (or there is room to admit it), else
    /// [`OVERFLOW_LABEL`]. The empty string is always itself and never counts.
    pub fn get(&self, raw: &str) -> LabelValue {
        if raw.is_empty() {
            return self.empty.clone();
        }
        {
            let admitted = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(v) = admitted.values.get(raw) {
                return v.clone();
            }
            if admitted.counted >= self.cap {
                return self.overflow.clone();
            }
        }
        let mut admitted = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have admitted this value, or taken the last slot, in between.
        if let Some(v) = admitted.values.get(raw) {
            return v.clone();
        }
        if admitted.counted >= self.cap {
            return self.overflow.clone();
        }
        let value = LabelValue::new(raw);
        admitted.values.insert(value.clone());
        admitted.counted += 1;
        value
    }

    /// Admits `raw` without counting it against the cap (configured model names, so a flood of unknown
    /// names cannot push a configured one into `other`).
    pub fn pin(&self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let mut admitted = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let value = admitted.values.get(raw).cloned().unwrap_or_else(|| LabelValue::new(raw));
        admitted.values.insert(value.clone());
        admitted.pinned.insert(value);
    }

    /// Whether `raw` was pinned (a configured name).
    pub fn is_pinned(&self, raw: &str) -> bool {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).pinned.contains(raw)
    }
}

/// `{model_name, target_model_name}`: the GIE `modelLabels`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
}

/// `{model_name, target_model_name, priority}`: the GIE `modelWithPriorityLabels`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelPriorityLabels {
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
    pub priority: i32,
}

/// `{model_name, target_model_name, error_code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelErrorLabels {
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
    pub error_code: &'static str,
}

/// `{model_name}`: GIE `running_requests` only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelNameLabels {
    pub model_name: LabelValue,
}

/// `{model_name, target_model_name, fairness_id, priority}`: every llm-d per-request family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowLabels {
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
    pub fairness_id: LabelValue,
    pub priority: i32,
}

/// [`FlowLabels`] plus `error_code`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowErrorLabels {
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
    pub fairness_id: LabelValue,
    pub priority: i32,
    pub error_code: &'static str,
}

/// [`FlowLabels`] plus `streaming` (`"true"`/`"false"`): `llm_d_epp_request_ttft_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowStreamingLabels {
    pub model_name: LabelValue,
    pub target_model_name: LabelValue,
    pub fairness_id: LabelValue,
    pub priority: i32,
    pub streaming: bool,
}

/// `{name}`: the pool gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub name: LabelValue,
}

/// `{name, model_server_pod}`: `inference_pool_per_pod_queue_size`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodQueueLabels {
    pub name: LabelValue,
    pub model_server_pod: LabelValue,
}

/// `{name, model_server_endpoint}`: `llm_d_epp_per_endpoint_queue_size`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointQueueLabels {
    pub name: LabelValue,
    pub model_server_endpoint: LabelValue,
}

/// `{status, target_model_name, pod_name, namespace, port}`: GIE scheduler attempts. A failed attempt
/// has empty endpoint labels (`port: None` encodes as `""`), as in the Go EPP.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GieAttemptLabels {
    pub status: &'static str,
    pub target_model_name: LabelValue,
    pub pod_name: LabelValue,
    pub namespace: LabelValue,
    pub port: Option<u16>,
}

/// `{status, target_model_name, endpoint_name, namespace, port}`: llm-d scheduler attempts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmdAttemptLabels {
    pub status: &'static str,
    pub target_model_name: LabelValue,
    pub endpoint_name: LabelValue,
    pub namespace: LabelValue,
    pub port: Option<u16>,
}

impl From<&GieAttemptLabels> for LlmdAttemptLabels {
    fn from(l: &GieAttemptLabels) -> Self {
        Self {
            status: l.status,
            target_model_name: l.target_model_name.clone(),
            endpoint_name: l.pod_name.clone(),
            namespace: l.namespace.clone(),
            port: l.port,
        }
    }
}

/// `{extension_point, plugin_type, plugin_name}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub extension_point: &'static str,
    pub plugin_type: &'static str,
    pub plugin_name: LabelValue,
}

/// `{family}`: `epp_metrics_dropped_label_sets_total`, one series per capped family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    pub family: LabelValue,
}

/// `{commit, build_ref}`: the info gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfoLabels {
    pub commit: &'static str,
    pub build_ref: &'static str,
}

/// `{model_rewrite_name, model_name, target_model}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RewriteLabels {
    pub model_rewrite_name: LabelValue,
    pub model_name: LabelValue,
    pub target_model: LabelValue,
}

/// `{endpoint_name, namespace, producer_name, fairness_id, priority}`: the in-flight load gauges. epp
/// aggregates per endpoint, so `fairness_id` and `priority` are always `""` (which PromQL treats as an
/// absent label, so queries written for either upstream label set match).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InflightLabels {
    pub endpoint_name: LabelValue,
    pub namespace: LabelValue,
    pub producer_name: LabelValue,
    pub fairness_id: &'static str,
    pub priority: &'static str,
}

// prometheus-client 0.23's `#[prometheus(flatten)]` does not compile, so the wider label sets repeat
// their fields and are built from the narrower ones here.
impl ModelLabels {
    pub fn with_priority(self, priority: i32) -> ModelPriorityLabels {
        ModelPriorityLabels {
            model_name: self.model_name,
            target_model_name: self.target_model_name,
            priority,
        }
    }
    pub fn with_error(self, error_code: &'static str) -> ModelErrorLabels {
        ModelErrorLabels {
            model_name: self.model_name,
            target_model_name: self.target_model_name,
            error_code,
        }
    }
}

impl FlowLabels {
    pub fn with_error(self, error_code: &'static str) -> FlowErrorLabels {
        FlowErrorLabels {
            model_name: self.model_name,
            target_model_name: self.target_model_name,
            fairness_id: self.fairness_id,
            priority: self.priority,
            error_code,
        }
    }
    pub fn with_streaming(self, streaming: bool) -> FlowStreamingLabels {
        FlowStreamingLabels {
            model_name: self.model_name,
            target_model_name: self.target_model_name,
            fairness_id: self.fairness_id,
            priority: self.priority,
            streaming,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_labels_fold_overflow_and_keep_admitted_values() {
        let labels = BoundedLabels::new(2);
        assert_eq!(labels.get("a").as_str(), "a");
        assert_eq!(labels.get("b").as_str(), "b");
        assert_eq!(labels.get("c").as_str(), OVERFLOW_LABEL);
        assert_eq!(labels.get("a").as_str(), "a", "admitted values stay themselves");
        assert_eq!(labels.get("").as_str(), "", "empty never counts");
        labels.pin("configured");
        assert_eq!(labels.get("configured").as_str(), "configured", "pinned values bypass the cap");
        assert!(labels.is_pinned("configured") && !labels.is_pinned("a"));
    }
}
