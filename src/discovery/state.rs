//! The pool as discovery last saw it: the pool's spec (or none: absent, deleted or invalid) and the pods
//! its selector matched, updated by list results and watch events. Level-triggered: the endpoints are
//! always recomputed from this whole state, never patched by one event, so a relist repairs anything a
//! lost event left behind.

use std::collections::BTreeMap;

use super::pods::{desired_endpoints, DesiredEndpoint, PodInfo};
use super::spec::PoolSpec;

/// The pool spec and its selected pods, by pod name.
#[derive(Debug, Default)]
pub(super) struct PoolState {
    pool: Option<PoolSpec>,
    pods: BTreeMap<String, PodInfo>,
}

impl PoolState {
    /// The spec in force; `None` when there is no usable pool (its endpoints are then none).
    pub(super) fn pool(&self) -> Option<&PoolSpec> {
        self.pool.as_ref()
    }

    /// Replaces everything with a fresh list: what is not listed is gone.
    pub(super) fn replace(&mut self, pool: Option<PoolSpec>, pods: impl IntoIterator<Item = PodInfo>) {
        self.pool = pool;
        self.pods.clear();
        for pod in pods {
            self.upsert(pod);
        }
    }

    /// A pod was added or changed. One that no longer matches the selector is dropped (an API server
    /// reports that as a delete on a selector watch; this holds either way).
    pub(super) fn upsert(&mut self, pod: PodInfo) {
        match &self.pool {
            Some(pool) if pool.selects(&pod.labels) => {
                self.pods.insert(pod.name.clone(), pod);
            }
            _ => {
                self.pods.remove(&pod.name);
            }
        }
    }

    /// A pod was deleted.
    pub(super) fn remove(&mut self, name: &str) {
        self.pods.remove(name);
    }

    /// The endpoints this state yields, sorted by name.
    pub(super) fn desired(&self, metrics_port: Option<u16>) -> Vec<DesiredEndpoint> {
        desired_endpoints(self.pool.as_ref(), self.pods.values(), metrics_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str, app: &str, ready: bool) -> PodInfo {
        PodInfo {
            name: name.into(),
            namespace: "ns".into(),
            ip: ip.parse().ok(),
            ready,
            labels: [("app".to_string(), app.to_string())].into(),
            active_ports: None,
        }
    }

    fn names(state: &PoolState) -> Vec<String> {
        state.desired(None).into_iter().map(|e| e.name).collect()
    }

    #[test]
    fn events_then_relist_repairs_a_lost_delete() {
        let mut state = PoolState::default();
        let pool = PoolSpec::standalone("app=vllm", "8000,8001").unwrap();
        state.replace(Some(pool.clone()), [pod("a", "10.0.0.1", "vllm", true)]);
        state.upsert(pod("b", "10.0.0.2", "vllm", false));
        assert_eq!(names(&state), ["a-rank-0", "a-rank-1"]);
        state.upsert(pod("b", "10.0.0.2", "vllm", true));
        assert_eq!(names(&state).len(), 4);
        state.upsert(pod("b", "10.0.0.2", "other", true));
        assert_eq!(names(&state), ["a-rank-0", "a-rank-1"], "relabelled out of the selector");
        state.remove("a");
        assert!(names(&state).is_empty());
        // "c" was deleted but its Delete event was lost: the next list does not have it.
        state.upsert(pod("c", "10.0.0.3", "vllm", true));
        state.replace(Some(pool), [pod("d", "10.0.0.4", "vllm", true)]);
        assert_eq!(names(&state), ["d-rank-0", "d-rank-1"]);
    }

    #[test]
    fn no_pool_no_endpoints() {
        let mut state = PoolState::default();
        state.replace(None, [pod("a", "10.0.0.1", "vllm", true)]);
        assert!(names(&state).is_empty());
        assert!(state.pool().is_none());
    }
}
