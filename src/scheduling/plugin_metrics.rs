//! The families plugins record, one handle per plugin kind: the prefix-cache indexer's size and hit
//! ratio (`approx-prefix-cache-producer`) and the in-flight load per endpoint (`inflight-load-producer`).
//! Factories take the handle their plugin uses from [`PluginMetrics`] in the factory context.
//!
//! In-flight series carry the endpoint, so they go through the per-endpoint series index and are removed
//! when the endpoint leaves the pool.

use std::sync::Arc;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::latency_metrics::LatencyMetrics;
use crate::datastore::Endpoint;
use crate::metrics::{
    alpha, EndpointSeries, InflightLabels, LabelValue, MetricsRegistry, SharedLabels, TrackedEndpoint,
    HIT_BYTES, HIT_RATIO,
};

/// The note kind under which an endpoint remembers the producers of its in-flight series.
const PRODUCER: &str = "inflight-producer";

/// The handles plugin factories may hand their plugins.
#[derive(Debug, Clone)]
pub struct PluginMetrics {
    pub prefix_indexer: Arc<PrefixIndexerMetrics>,
    pub inflight: Arc<InflightMetrics>,
    pub latency: Arc<LatencyMetrics>,
    pub kv_cache: Arc<super::kv_cache_metrics::KvCacheMetrics>,
    pub disagg: Arc<super::plugins::disagg::DisaggMetrics>,
}

impl PluginMetrics {
    /// Creates the plugins' families and registers them in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Self {
        Self {
            prefix_indexer: PrefixIndexerMetrics::register(registry),
            inflight: InflightMetrics::register(registry),
            latency: LatencyMetrics::register(registry),
            kv_cache: super::kv_cache_metrics::KvCacheMetrics::register(registry),
            disagg: super::plugins::disagg::DisaggMetrics::register(registry),
        }
    }

    /// Handles registered nowhere, for plugins whose numbers nobody scrapes (the lab, tests).
    pub fn detached() -> Self {
        Self::register(&MetricsRegistry::new("detached"))
    }
}

/// `inference_extension_prefix_indexer_*`.
#[derive(Debug)]
pub struct PrefixIndexerMetrics {
    size: Gauge,
    hit_ratio: Histogram,
    hit_bytes: Histogram,
}

impl PrefixIndexerMetrics {
    fn register(r: &MetricsRegistry) -> Arc<Self> {
        let m = Self {
            size: Gauge::default(),
            hit_ratio: HIT_RATIO.histogram(),
            hit_bytes: HIT_BYTES.histogram(),
        };
        r.register(
            "inference_extension_prefix_indexer_size",
            alpha("Size of the prefix indexer"),
            m.size.clone(),
        );
        r.register(
            "inference_extension_prefix_indexer_hit_ratio",
            alpha("Ratio of prefix length matched to total prefix length in the cache lookup"),
            m.hit_ratio.clone(),
        );
        r.register(
            "inference_extension_prefix_indexer_hit_bytes",
            alpha("Length of the prefix match in number of bytes in the cache lookup"),
            m.hit_bytes.clone(),
        );
        Arc::new(m)
    }

    /// Entries in the prefix-cache indexer.
    pub fn set_size(&self, entries: i64) {
        self.size.set(entries);
    }

    /// One prefix-cache lookup: the matched fraction of the prompt and the matched length in bytes.
    pub fn observe_hit(&self, ratio: f64, hit_bytes: usize) {
        self.hit_ratio.observe(ratio);
        self.hit_bytes.observe(hit_bytes as f64);
    }
}

/// `llm_d_epp_inflight_{requests,tokens}`.
#[derive(Debug)]
pub struct InflightMetrics {
    labels: Arc<SharedLabels>,
    endpoints: Arc<EndpointSeries>,
    requests: Family<InflightLabels, Gauge>,
    tokens: Family<InflightLabels, Gauge>,
}

fn inflight_labels(tracked: &TrackedEndpoint, producer: &LabelValue) -> InflightLabels {
    InflightLabels {
        endpoint_name: tracked.name.clone(),
        namespace: tracked.namespace.clone(),
        producer_name: producer.clone(),
        fairness_id: "",
        priority: "",
    }
}

impl InflightMetrics {
    fn register(r: &MetricsRegistry) -> Arc<Self> {
        let m = Self {
            labels: r.labels().clone(),
            endpoints: r.endpoints().clone(),
            requests: Family::default(),
            tokens: Family::default(),
        };
        r.register(
            "llm_d_epp_inflight_requests",
            alpha("Current number of in-flight requests per endpoint, as tracked by the in-flight load producer"),
            m.requests.clone(),
        );
        r.register(
            "llm_d_epp_inflight_tokens",
            alpha(
                "Current number of in-flight tokens per endpoint (uncached prompt tokens, optionally plus \
                 estimated output), as tracked by the in-flight load producer",
            ),
            m.tokens.clone(),
        );
        let (requests, tokens) = (m.requests.clone(), m.tokens.clone());
        m.endpoints.add_pruner(Box::new(move |tracked| {
            for producer in tracked.noted(PRODUCER) {
                let labels = inflight_labels(tracked, &producer);
                requests.remove(&labels);
                tokens.remove(&labels);
            }
        }));
        Arc::new(m)
    }

    /// The in-flight load `producer_name` tracks for `endpoint`.
    pub fn set(&self, endpoint: &Endpoint, producer_name: &str, requests: i64, tokens: i64) {
        let producer = self.labels.config_names.get(producer_name);
        self.endpoints.with(endpoint, |tracked| {
            tracked.note(PRODUCER, &producer);
            let labels = inflight_labels(tracked, &producer);
            self.requests.get_or_create(&labels).set(requests);
            self.tokens.get_or_create(&labels).set(tokens);
        });
    }

    /// Drops every per-endpoint series of an endpoint that left the pool (all components' series).
    pub fn remove_endpoint(&self, endpoint: &Endpoint) {
        self.endpoints.remove(endpoint);
    }
}
