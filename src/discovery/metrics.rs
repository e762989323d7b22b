//! Discovery's families (epp's own; the Go EPP only logs), so an operator sees when epp is serving a
//! pool it can no longer confirm with the API server:
//!
//! - `epp_discovery_api_reachable{name}`: 1 while the last list or watch call succeeded, 0 while epp
//!   retries with backoff and keeps serving the last known endpoints;
//! - `epp_discovery_errors_total{name}`: failed list/watch calls (and failed client configuration);
//! - `epp_discovery_syncs_total{name, reason}`: full relists, by why (`initial`, `periodic`, `expired`,
//!   `pool_changed`, `error`);
//! - `epp_discovery_endpoints{name}`: endpoints discovery last published.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{LabelValue, MetricsRegistry, PoolLabels};

/// Why a full list was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncReason {
    /// The first list.
    Initial,
    /// The periodic level-triggered reconcile.
    Periodic,
    /// A watch answered 410 Gone: its resourceVersion is too old.
    Expired,
    /// The pool was created, changed or deleted: its pods are listed again under the new selector.
    PoolChanged,
    /// The list or watch failed; listed again after the backoff.
    Error,
}

impl SyncReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Periodic => "periodic",
            Self::Expired => "expired",
            Self::PoolChanged => "pool_changed",
            Self::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncLabels {
    name: LabelValue,
    reason: &'static str,
}

/// The discovery families, registered at construction.
#[derive(Debug)]
pub struct DiscoveryMetrics {
    pool: PoolLabels,
    reachable: Family<PoolLabels, Gauge>,
    errors: Family<PoolLabels, Counter>,
    syncs: Family<SyncLabels, Counter>,
    endpoints: Family<PoolLabels, Gauge>,
}

impl DiscoveryMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let m = Self {
            pool: PoolLabels { name: registry.labels().pool.clone() },
            reachable: Family::default(),
            errors: Family::default(),
            syncs: Family::default(),
            endpoints: Family::default(),
        };
        registry.register(
            "epp_discovery_api_reachable",
            "1 while the Kubernetes API server answers discovery's list and watch calls, 0 while epp retries \
             and serves the last known endpoints",
            m.reachable.clone(),
        );
        registry.register("epp_discovery_errors", "Failed discovery list or watch calls", m.errors.clone());
        registry.register(
            "epp_discovery_syncs",
            "Full lists of the pool and its pods, by reason",
            m.syncs.clone(),
        );
        registry.register(
            "epp_discovery_endpoints",
            "Endpoints discovery last published",
            m.endpoints.clone(),
        );
        // Present from the start: "no data" would read as "no discovery".
        m.reachable.get_or_create(&m.pool).set(0);
        let _ = m.errors.get_or_create(&m.pool);
        Arc::new(m)
    }

    pub fn set_reachable(&self, reachable: bool) {
        self.reachable.get_or_create(&self.pool).set(i64::from(reachable));
    }

    pub fn error(&self) {
        self.errors.get_or_create(&self.pool).inc();
        self.set_reachable(false);
    }

    pub fn synced(&self, reason: SyncReason) {
        self.syncs.get_or_create(&SyncLabels { name: self.pool.name.clone(), reason: reason.as_str() }).inc();
        self.set_reachable(true);
    }

    pub fn published(&self, endpoints: usize) {
        self.endpoints.get_or_create(&self.pool).set(i64::try_from(endpoints).unwrap_or(i64::MAX));
    }
}
