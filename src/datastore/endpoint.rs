//! One model-server endpoint (an `ip:port`) and the telemetry scraped from it.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};

use super::EndpointHealth;

/// What the scraper last learned about one endpoint. Immutable once published: a scrape builds a new one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointTelemetry {
    /// Requests waiting in the model server's queue (`vllm:num_requests_waiting`, summed over engines).
    pub waiting_queue_size: u64,
    /// Requests in the running batch (`vllm:num_requests_running`, summed over engines).
    pub running_requests: u64,
    /// KV-cache usage as a 0..1 fraction (max over engines).
    pub kv_cache_usage: f64,
    /// LoRA adapters currently running.
    pub active_models: HashSet<String>,
    /// LoRA adapters waiting to run.
    pub waiting_models: HashSet<String>,
    /// `max_lora`: how many adapters may be active at once.
    pub max_active_models: usize,
    /// KV block size in tokens (`cache_config_info{block_size}`), 0 when unknown.
    pub cache_block_size: usize,
    /// Number of KV blocks (`cache_config_info{num_gpu_blocks}`), 0 when unknown.
    pub cache_num_blocks: usize,
    /// When this telemetry was produced; `None` until the first successful scrape.
    pub update_time: Option<Instant>,
}

impl EndpointTelemetry {
    /// True when the telemetry is missing or older than `threshold` at `now`.
    pub fn is_stale(&self, now: Instant, threshold: std::time::Duration) -> bool {
        match self.update_time {
            None => true,
            Some(t) => now.saturating_duration_since(t) > threshold,
        }
    }
}

/// A model-server endpoint: an address the gateway can route to, plus its latest telemetry.
#[derive(Debug)]
pub struct Endpoint {
    /// Stable name used in metrics and logs (e.g. `pod-0-rank-0`, or the address for static endpoints).
    pub name: String,
    /// Kubernetes namespace, empty for static endpoints.
    pub namespace: String,
    /// Where requests go.
    pub addr: SocketAddr,
    /// `addr` formatted once as `ip:port` (IPv6 bracketed): the value written into the destination header.
    pub host_port: String,
    /// Where `/metrics` is scraped (`http://ip:port/metrics` unless configured otherwise).
    pub metrics_url: String,
    /// Labels of the pod (engine type, capacity hints, ...).
    pub labels: BTreeMap<String, String>,
    /// The data-parallel rank of this endpoint on its pod (its port's index in the pool's `targetPorts`; 0
    /// for a single-port pool and for static endpoints): rank r publishes KV events on the base port + r.
    pub rank: u16,
    /// When this endpoint joined the pool: until its first scrape, its telemetry's age counts from here.
    pub joined_at: Instant,
    telemetry: ArcSwap<EndpointTelemetry>,
    /// The telemetry the last scrape replaced, held until the next scrape. Workers' kept candidates
    /// (`scheduling::CandidateSet`) let go of it in between, so the scraper, not a routing decision, is
    /// the one that frees it: at 1,000 endpoints and a 50 ms interval a decision would otherwise free
    /// about a fifth of the pool's telemetry.
    retired: ArcSwapOption<EndpointTelemetry>,
    health: EndpointHealth,
}

impl Endpoint {
    pub fn new(name: impl Into<String>, addr: SocketAddr) -> Self {
        let host_port = format_host_port(addr);
        let joined_at = Instant::now();
        Self {
            name: name.into(),
            namespace: String::new(),
            metrics_url: format!("http://{host_port}/metrics"),
            host_port,
            addr,
            labels: BTreeMap::new(),
            rank: 0,
            joined_at,
            telemetry: ArcSwap::from_pointee(EndpointTelemetry::default()),
            retired: ArcSwapOption::empty(),
            health: EndpointHealth::new(joined_at),
        }
    }

    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    pub fn with_rank(mut self, rank: u16) -> Self {
        self.rank = rank;
        self
    }

    pub fn with_metrics_url(mut self, url: impl Into<String>) -> Self {
        self.metrics_url = url.into();
        self
    }

    /// True when `other` is this endpoint as far as the pool is concerned: same address, name, namespace,
    /// labels and `/metrics` URL. Anything else makes it a new endpoint (fresh telemetry, fresh breaker),
    /// so a changed scrape URL (discovery's metrics port) or relabelled pod is picked up.
    pub fn same_identity(&self, other: &Endpoint) -> bool {
        self.addr == other.addr
            && self.name == other.name
            && self.namespace == other.namespace
            && self.labels == other.labels
            && self.metrics_url == other.metrics_url
            && self.rank == other.rank
    }

    /// The latest telemetry; lock-free.
    pub fn telemetry(&self) -> Arc<EndpointTelemetry> {
        self.telemetry.load_full()
    }

    /// A handle that re-reads this endpoint's telemetry only when a scrape has replaced it: checking costs
    /// one relaxed load of a pointer, where [`telemetry`](Self::telemetry) touches a reference count.
    pub fn telemetry_cache(self: &Arc<Self>) -> TelemetryCache {
        TelemetryCache::new(TelemetrySource(self.clone()))
    }

    /// Publishes new telemetry (called by the scraper, or by tests and the lab).
    pub fn update_telemetry(&self, metrics: EndpointTelemetry) {
        let replaced = self.telemetry.swap(Arc::new(metrics));
        self.retired.store(Some(replaced));
    }

    /// The circuit breaker fed by the outcomes of requests routed here.
    pub fn health(&self) -> &EndpointHealth {
        &self.health
    }

    /// How old the telemetry is at `now`: since the last successful scrape, or since the endpoint joined
    /// when it has never been scraped.
    pub fn telemetry_age(&self, now: Instant) -> std::time::Duration {
        // A guard, not `metrics()`: no reference count touched for each candidate of each request.
        let since = self.telemetry.load().update_time.unwrap_or(self.joined_at);
        now.saturating_duration_since(since)
    }
}

/// An endpoint's telemetry as a cached handle (see [`Endpoint::telemetry_cache`]).
pub type TelemetryCache = arc_swap::cache::Cache<TelemetrySource, Arc<EndpointTelemetry>>;

/// What a [`TelemetryCache`] re-reads: the endpoint's telemetry slot (it keeps the endpoint alive).
#[derive(Debug, Clone)]
pub struct TelemetrySource(Arc<Endpoint>);

impl std::ops::Deref for TelemetrySource {
    type Target = ArcSwap<EndpointTelemetry>;

    fn deref(&self) -> &Self::Target {
        &self.0.telemetry
    }
}

/// Formats an address the way `net.JoinHostPort` does: `1.2.3.4:80`, `[::1]:80`.
pub fn format_host_port(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ipv6_is_bracketed() {
        let v4: SocketAddr = "10.0.0.1:8000".parse().unwrap();
        let v6: SocketAddr = "[fd00::1]:8000".parse().unwrap();
        assert_eq!(format_host_port(v4), "10.0.0.1:8000");
        assert_eq!(format_host_port(v6), "[fd00::1]:8000");
    }

    #[test]
    fn staleness() {
        let now = Instant::now();
        let m = EndpointTelemetry::default();
        assert!(m.is_stale(now, Duration::from_secs(1)));
        let m = EndpointTelemetry { update_time: Some(now), ..Default::default() };
        assert!(!m.is_stale(now + Duration::from_millis(100), Duration::from_millis(200)));
        assert!(m.is_stale(now + Duration::from_millis(300), Duration::from_millis(200)));
    }

    #[test]
    fn telemetry_swaps() {
        let ep = Endpoint::new("a", "127.0.0.1:1".parse().unwrap());
        assert_eq!(ep.telemetry().waiting_queue_size, 0);
        ep.update_telemetry(EndpointTelemetry { waiting_queue_size: 3, ..Default::default() });
        assert_eq!(ep.telemetry().waiting_queue_size, 3);
    }

    #[test]
    fn replaced_telemetry_is_freed_by_the_next_update_not_by_its_last_reader() {
        let ep = Endpoint::new("a", "127.0.0.1:1".parse().unwrap());
        ep.update_telemetry(EndpointTelemetry { waiting_queue_size: 1, ..Default::default() });
        let reader = ep.telemetry(); // a decision's kept candidate
        ep.update_telemetry(EndpointTelemetry { waiting_queue_size: 2, ..Default::default() });
        let watch = Arc::downgrade(&reader);
        drop(reader);
        assert!(watch.upgrade().is_some(), "the endpoint still holds what it replaced");
        ep.update_telemetry(EndpointTelemetry { waiting_queue_size: 3, ..Default::default() });
        assert!(watch.upgrade().is_none(), "freed by the update after");
        assert_eq!(ep.telemetry().waiting_queue_size, 3);
    }
}
