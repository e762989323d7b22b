//! `llm_d_epp_disagg_decision_total` and `llm_d_epp_pd_decision_total`
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/profilehandler/disagg/metrics.go): one count per
//! scheduling cycle of the path a request took. llm-d's `disagg-profile-handler` records only the first;
//! epp records both, so the P/D guide's dashboards, written for the second, work with the current handler.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics::{alpha, LabelValue, MetricsRegistry, SharedLabels};

/// The path of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    DecodeOnly,
    PrefillDecode,
    EncodeDecode,
    EncodePrefillDecode,
}

impl Decision {
    pub fn of(encode: bool, prefill: bool) -> Self {
        match (encode, prefill) {
            (true, true) => Self::EncodePrefillDecode,
            (true, false) => Self::EncodeDecode,
            (false, true) => Self::PrefillDecode,
            (false, false) => Self::DecodeOnly,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::DecodeOnly => "decode-only",
            Self::PrefillDecode => "prefill-decode",
            Self::EncodeDecode => "encode-decode",
            Self::EncodePrefillDecode => "encode-prefill-decode",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    plugin_name: LabelValue,
    plugin_type: &'static str,
    model_name: LabelValue,
    decision_type: &'static str,
}

/// The decision counters.
#[derive(Debug)]
pub struct DisaggMetrics {
    labels: Arc<SharedLabels>,
    disagg: Family<DecisionLabels, Counter>,
    pd: Family<DecisionLabels, Counter>,
}

impl DisaggMetrics {
    pub(crate) fn register(r: &MetricsRegistry) -> Arc<Self> {
        let m = Self { labels: r.labels().clone(), disagg: Family::default(), pd: Family::default() };
        r.register(
            "llm_d_epp_disagg_decision",
            alpha("Total number of disaggregation routing decisions made"),
            m.disagg.clone(),
        );
        r.register(
            "llm_d_epp_pd_decision",
            alpha("Total number of P/D disaggregation decisions made"),
            m.pd.clone(),
        );
        Arc::new(m)
    }

    /// Counts one decision of handler `plugin` for `model` (empty: `unknown`, as llm-d records it).
    pub fn record(&self, plugin: &str, plugin_type: &'static str, model: &str, decision: Decision) {
        let labels = DecisionLabels {
            plugin_name: self.labels.config_names.get(plugin),
            plugin_type,
            model_name: self.labels.models.get(if model.is_empty() { "unknown" } else { model }),
            decision_type: decision.as_str(),
        };
        self.disagg.get_or_create(&labels).inc();
        // The P/D counter knows only the two P/D paths.
        if matches!(decision, Decision::DecodeOnly | Decision::PrefillDecode) {
            self.pd.get_or_create(&labels).inc();
        }
    }
}
