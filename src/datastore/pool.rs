//! The endpoint list of the one pool this EPP serves.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::Endpoint;

/// What a call to [`Datastore::set_endpoints`] changed.
#[derive(Debug, Default)]
pub struct EndpointChanges {
    pub added: Vec<Arc<Endpoint>>,
    pub removed: Vec<Arc<Endpoint>>,
}

/// The pool: a lock-free list of endpoints plus a version channel that wakes whoever waits for changes
/// (scraper supervisor, health, and later the flow controller's scale-from-zero path).
#[derive(Debug)]
pub struct Datastore {
    pool_name: String,
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    version: watch::Sender<u64>,
}

impl Datastore {
    pub fn new(pool_name: impl Into<String>) -> Self {
        let (version, _) = watch::channel(0);
        Self { pool_name: pool_name.into(), endpoints: ArcSwap::from_pointee(Vec::new()), version }
    }

    pub fn pool_name(&self) -> &str {
        &self.pool_name
    }

    /// The current endpoints; lock-free, and stable for as long as the caller holds it.
    pub fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.load_full()
    }

    /// Replaces the endpoint list. Endpoints whose address is unchanged keep their identity (and so their
    /// telemetry); the caller learns which were added and removed.
    pub fn set_endpoints(&self, wanted: Vec<Endpoint>) -> EndpointChanges {
        let current = self.endpoints.load_full();
        let by_addr: HashMap<_, _> = current.iter().map(|e| (e.addr, e.clone())).collect();
        let mut next = Vec::with_capacity(wanted.len());
        let mut changes = EndpointChanges::default();
        for ep in wanted {
            match by_addr.get(&ep.addr) {
                Some(existing) if existing.same_identity(&ep) => next.push(existing.clone()),
                _ => {
                    let ep = Arc::new(ep);
                    changes.added.push(ep.clone());
                    next.push(ep);
                }
            }
        }
        for ep in current.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(n, ep)) {
                changes.removed.push(ep.clone());
            }
        }
        self.endpoints.store(Arc::new(next));
        self.version.send_modify(|v| *v += 1);
        changes
    }

    /// A receiver that changes whenever the endpoint list is replaced.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::EndpointTelemetry;

    fn ep(name: &str, addr: &str) -> Endpoint {
        Endpoint::new(name, addr.parse().unwrap())
    }

    #[test]
    fn keeps_identity_of_unchanged_endpoints() {
        let ds = Datastore::new("pool");
        let c = ds.set_endpoints(vec![ep("a", "10.0.0.1:8000"), ep("b", "10.0.0.2:8000")]);
        assert_eq!(c.added.len(), 2);
        ds.endpoints()[0].update_telemetry(EndpointTelemetry { waiting_queue_size: 7, ..Default::default() });
        let c = ds.set_endpoints(vec![ep("a", "10.0.0.1:8000"), ep("c", "10.0.0.3:8000")]);
        assert_eq!(c.added.len(), 1);
        assert_eq!(c.removed.len(), 1);
        assert_eq!(c.removed[0].name, "b");
        assert_eq!(ds.endpoints()[0].telemetry().waiting_queue_size, 7);
    }
}
