//! Pods → endpoints: which pods may serve (the readiness rule) and which `ip:port` each one contributes
//! (pod × target port, narrowed by the active-ports annotation).
//!
//! Rules from `kubernetes-sigs/gateway-api-inference-extension`: `pkg/epp/util/pod/pod.go: IsPodReady`
//! (DeletionTimestamp unset and condition Ready=True) and `pkg/epp/datastore/datastore.go` (one endpoint
//! per target port named `<pod>-rank-<index in targetPorts>`, the `active-ports` annotation, the metrics
//! port override for single-port pools, pod labels copied onto the endpoint).

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Pod;

use super::spec::PoolSpec;

/// Pod annotation restricting which of the pool's target ports are active on that pod.
pub const ACTIVE_PORTS_ANNOTATION: &str = "inference.networking.k8s.io/active-ports";

/// What discovery keeps of a pod: only what decides its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    /// `status.podIP`; `None` until the pod has one (or when it does not parse).
    pub ip: Option<IpAddr>,
    /// The readiness rule: no deletion timestamp and condition `Ready` is `True`.
    pub ready: bool,
    pub labels: BTreeMap<String, String>,
    /// The raw `inference.networking.k8s.io/active-ports` annotation, if any.
    pub active_ports: Option<String>,
}

impl PodInfo {
    /// Reads a pod object; `None` for a pod without a name (not something an API server sends).
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let meta = &pod.metadata;
        let name = meta.name.clone()?;
        let status = pod.status.as_ref();
        let ip = status.and_then(|s| s.pod_ip.as_deref()).and_then(|ip| ip.parse().ok());
        Some(Self {
            name,
            namespace: meta.namespace.clone().unwrap_or_default(),
            ip,
            ready: is_ready(pod),
            labels: meta.labels.clone().unwrap_or_default(),
            active_ports: meta.annotations.as_ref().and_then(|a| a.get(ACTIVE_PORTS_ANNOTATION)).cloned(),
        })
    }
}

/// Upstream's `IsPodReady`: a pod being deleted is not ready, whatever its conditions say.
pub fn is_ready(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The target ports active on a pod, each with its rank (index in `targetPorts`). Without the
/// annotation every target port is active; with it, only its entries (trimmed, positive integers) that
/// are target ports. Ranks keep their position, so skipping a port leaves a gap.
pub fn active_ports(pool: &PoolSpec, annotation: Option<&str>) -> Vec<(usize, u16)> {
    let ranked = pool.target_ports.iter().copied().enumerate();
    let Some(annotation) = annotation else { return ranked.collect() };
    let listed: Vec<u16> =
        annotation.split(',').filter_map(|p| p.trim().parse::<u16>().ok()).filter(|p| *p > 0).collect();
    ranked.filter(|(_, port)| listed.contains(port)).collect()
}

/// One endpoint discovery wants in the pool: plain data, compared to decide whether anything changed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DesiredEndpoint {
    /// `<pod>-rank-<i>`.
    pub name: String,
    pub namespace: String,
    /// Where requests go: pod IP × target port.
    pub addr: SocketAddr,
    /// Where `/metrics` is scraped: the target port, or `--model-server-metrics-port` for a single-port
    /// pool.
    pub metrics_addr: SocketAddr,
    /// The pod's labels (engine type, role, `epp.io/max-concurrency`, …) for plugins and detectors.
    pub labels: BTreeMap<String, String>,
    /// The port's index in `targetPorts` (a data-parallel rank).
    pub rank: u16,
}

/// The endpoints of one pod: none unless it is selected, ready and has an IP.
pub fn pod_endpoints(pool: &PoolSpec, pod: &PodInfo, metrics_port: Option<u16>) -> Vec<DesiredEndpoint> {
    let Some(ip) = pod.ip.filter(|_| pod.ready && pool.selects(&pod.labels)) else { return Vec::new() };
    let ports = active_ports(pool, pod.active_ports.as_deref());
    if ports.is_empty() {
        tracing::info!(pod = %pod.name, "No container ports match pool targetPorts, pod will not receive traffic");
    }
    // The metrics port override applies only to a single-port pool (each rank of a multi-port pod serves
    // its own /metrics).
    let metrics_port = metrics_port.filter(|_| pool.target_ports.len() == 1);
    ports
        .into_iter()
        .map(|(rank, port)| DesiredEndpoint {
            name: format!("{}-rank-{rank}", pod.name),
            namespace: pod.namespace.clone(),
            addr: SocketAddr::new(ip, port),
            metrics_addr: SocketAddr::new(ip, metrics_port.unwrap_or(port)),
            labels: pod.labels.clone(),
            rank: u16::try_from(rank).unwrap_or(u16::MAX),
        })
        .collect()
}

/// Every endpoint of the pool, sorted by name (so two computations of one state compare equal). No pool
/// (absent, deleted or invalid) means no endpoints.
pub fn desired_endpoints<'a>(
    pool: Option<&PoolSpec>,
    pods: impl IntoIterator<Item = &'a PodInfo>,
    metrics_port: Option<u16>,
) -> Vec<DesiredEndpoint> {
    let Some(pool) = pool else { return Vec::new() };
    let mut out: Vec<_> = pods.into_iter().flat_map(|pod| pod_endpoints(pool, pod, metrics_port)).collect();
    out.sort();
    // Two pods can share an IP (host networking): the first name wins the address, as one endpoint.
    let mut seen = HashSet::new();
    out.retain(|e| seen.insert(e.addr));
    out
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
