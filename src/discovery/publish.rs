//! Hands discovery's endpoint set to the datastore, only when it changed, and tells the pipeline which
//! endpoints left (so plugins drop their per-endpoint state) — what `app.rs` does once for static
//! endpoints. The telemetry supervisor follows the datastore's version channel on its own.

use std::net::SocketAddr;
use std::sync::Arc;

use super::metrics::DiscoveryMetrics;
use super::pods::DesiredEndpoint;
use crate::datastore::{format_host_port, Datastore, Endpoint};

/// Called with the endpoints that left the pool (the pipeline's `on_endpoints_removed`).
pub type RemovedHook = Arc<dyn Fn(&[Arc<Endpoint>]) + Send + Sync>;

/// How a model server's `/metrics` URL is formed: `{scheme}://{ip:port}{path}` (the data source's
/// scheme and path, as for static endpoints).
#[derive(Debug, Clone)]
pub struct MetricsTarget {
    pub scheme: &'static str,
    pub path: String,
    /// `--model-server-metrics-port`: scrape this port instead of the target port (single-port pools).
    pub port: Option<u16>,
}

impl MetricsTarget {
    pub fn url(&self, addr: SocketAddr) -> String {
        format!("{}://{}{}", self.scheme, format_host_port(addr), self.path)
    }
}

impl Default for MetricsTarget {
    fn default() -> Self {
        Self { scheme: "http", path: "/metrics".into(), port: None }
    }
}

/// Publishes endpoint sets into the datastore.
pub(super) struct Publisher {
    datastore: Arc<Datastore>,
    on_removed: RemovedHook,
    target: MetricsTarget,
    metrics: Arc<DiscoveryMetrics>,
    last: Option<Vec<DesiredEndpoint>>,
}

impl Publisher {
    pub(super) fn new(
        datastore: Arc<Datastore>,
        on_removed: RemovedHook,
        target: MetricsTarget,
        metrics: Arc<DiscoveryMetrics>,
    ) -> Self {
        Self { datastore, on_removed, target, metrics, last: None }
    }

    pub(super) fn metrics_port(&self) -> Option<u16> {
        self.target.port
    }

    /// How many endpoints were last published.
    pub(super) fn len(&self) -> usize {
        self.last.as_ref().map_or(0, Vec::len)
    }

    /// Replaces the datastore's endpoints with `desired` unless that is what it already holds.
    pub(super) fn publish(&mut self, desired: Vec<DesiredEndpoint>) {
        if self.last.as_ref() == Some(&desired) {
            return;
        }
        let endpoints = desired
            .iter()
            .map(|d| {
                let mut e = Endpoint::new(d.name.clone(), d.addr)
                    .with_labels(d.labels.clone())
                    .with_metrics_url(self.target.url(d.metrics_addr))
                    .with_rank(d.rank);
                e.namespace = d.namespace.clone();
                e
            })
            .collect();
        let changes = self.datastore.set_endpoints(endpoints);
        if !changes.removed.is_empty() {
            (self.on_removed)(&changes.removed);
        }
        let names = |eps: &[Arc<Endpoint>]| eps.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        tracing::info!(
            endpoints = desired.len(),
            added = ?names(&changes.added),
            removed = ?names(&changes.removed),
            "pool endpoints updated"
        );
        self.metrics.published(desired.len());
        self.last = Some(desired);
    }
}
