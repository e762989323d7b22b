//! The allow-list of prefillers from the InferencePool itself (`--inference-pool`, llm-d's flag): the
//! sidecar watches the pool's pods with epp's own discovery (the same selector, target ports and
//! readiness rules), so exactly the endpoints epp may route to may be named as prefillers, and a pod
//! that leaves the pool can no longer be called.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use epp::datastore::Datastore;
use epp::discovery::{ClientSource, Discovery, DiscoveryConfig, DiscoveryMetrics, PoolSource};
use epp::metrics::MetricsRegistry;

/// `--inference-pool`: `namespace/name`, or `name` in the `default` namespace (llm-d's parsing).
pub fn parse_pool(value: &str) -> Result<(String, String), String> {
    let (namespace, name) = match value.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("default", value),
    };
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(format!("--inference-pool {value:?} is not namespace/name or name"));
    }
    Ok((namespace.to_string(), name.to_string()))
}

/// A running watch of the pool's endpoints.
pub struct PoolWatch {
    pub datastore: Arc<Datastore>,
    discovery: Discovery,
}

impl PoolWatch {
    /// Starts watching `pool` (`namespace/name`) of API group `group`; needs a Tokio runtime.
    pub fn start(pool: &str, group: &str, kubeconfig: Option<PathBuf>) -> Result<Self, String> {
        let (namespace, name) = parse_pool(pool)?;
        let source = PoolSource::inference_pool(group, &name).map_err(|e| format!("--pool-group: {e}"))?;
        let mut config = DiscoveryConfig::new(source, namespace);
        config.client = kubeconfig.map_or(ClientSource::Infer, ClientSource::Kubeconfig);
        let datastore = Arc::new(Datastore::new(&name));
        // Discovery's own families go to a registry nobody scrapes: the sidecar's exposition is its own.
        let metrics = DiscoveryMetrics::register(&MetricsRegistry::new(&name));
        let discovery = Discovery::spawn(config, datastore.clone(), Arc::new(|_: &[_]| {}), metrics);
        Ok(Self { datastore, discovery })
    }

    /// Waits until the pool was read once, or `limit` passed; whether it was.
    pub async fn synced_within(&self, limit: Duration) -> bool {
        let mut synced = self.discovery.synced();
        tokio::time::timeout(limit, synced.wait_for(|s| *s)).await.is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_parse_as_llm_d_does() {
        assert_eq!(parse_pool("llm/pool").unwrap(), ("llm".into(), "pool".into()));
        assert_eq!(parse_pool("pool").unwrap(), ("default".into(), "pool".into()));
        for bad in ["", "/pool", "ns/", "a/b/c"] {
            assert!(parse_pool(bad).is_err(), "{bad:?}");
        }
    }
}
