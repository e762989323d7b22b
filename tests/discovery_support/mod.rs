//! Harness for the discovery tests: epp's discovery driven through the real kube-rs client against the
//! fake API server (`epp_testkit::kube_api`), and polling for the endpoint set a step must produce.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use epp::datastore::Datastore;
use epp::discovery::{ClientSource, Discovery, DiscoveryConfig, DiscoveryMetrics, PoolSource};
use epp::metrics::MetricsRegistry;
use epp_testkit::kube_api::FakeKubeApi;

pub(crate) const NS: &str = "llm";
pub(crate) const POOL: &str = "vllm-pool";
pub(crate) const APP: (&str, &str) = ("app", "vllm");
pub(crate) const ROLE: (&str, &str) = ("llm-d.ai/role", "decode");

/// How long a step may take to show (generous: these machines are shared; nothing is timed).
const DEADLINE: Duration = Duration::from_secs(60);

pub(crate) struct Harness {
    pub api: FakeKubeApi,
    pub datastore: Arc<Datastore>,
    pub registry: Arc<MetricsRegistry>,
    pub discovery: Discovery,
    pub removed: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// Discovery settings for a test: `resync` is the periodic relist (long when a test must see that
/// something else repaired the state), fast backoff so outages recover quickly.
pub(crate) fn config(source: PoolSource, resync: Duration) -> DiscoveryConfig {
    let mut config = DiscoveryConfig::new(source, NS);
    config.resync_period = resync;
    config.backoff_min = Duration::from_millis(50);
    config.backoff_max = Duration::from_millis(500);
    config
}

pub(crate) fn pool_source() -> PoolSource {
    PoolSource::inference_pool(epp::discovery::GROUP_V1, POOL).expect("known group")
}

impl Harness {
    /// Starts discovery against `api` (already holding the test's objects).
    pub(crate) fn start(api: FakeKubeApi, mut config: DiscoveryConfig) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        config.client = ClientSource::Kubeconfig(api.write_kubeconfig(dir.path()).expect("kubeconfig"));
        let datastore = Arc::new(Datastore::new(POOL));
        let registry = MetricsRegistry::new(POOL);
        let removed: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = removed.clone();
        let on_removed = Arc::new(move |gone: &[Arc<epp::datastore::Endpoint>]| {
            sink.lock().unwrap().extend(gone.iter().map(|e| e.name.clone()));
        });
        let metrics = DiscoveryMetrics::register(&registry);
        let discovery = Discovery::spawn(config, datastore.clone(), on_removed, metrics);
        Self { api, datastore, registry, discovery, removed, _dir: dir }
    }

    /// The endpoints now, as `(name, ip:port)`.
    pub(crate) fn endpoints(&self) -> BTreeSet<(String, String)> {
        self.datastore.endpoints().iter().map(|e| (e.name.clone(), e.host_port.clone())).collect()
    }

    /// Waits until the endpoints are exactly `want`.
    pub(crate) async fn expect(&self, want: &[(&str, &str)]) {
        let want: BTreeSet<(String, String)> =
            want.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect();
        let mut last = BTreeSet::new();
        let polled = poll(|| {
            last = self.endpoints();
            last == want
        })
        .await;
        assert!(polled, "endpoints {last:?}, want {want:?}\nrequests: {:#?}", self.api.requests());
    }

    /// The value of the discovery series whose line contains every one of `parts`.
    pub(crate) fn metric(&self, family: &str, parts: &[&str]) -> f64 {
        let text = self.registry.encode();
        text.lines()
            .find(|l| l.starts_with(family) && parts.iter().all(|p| l.contains(p)))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    pub(crate) fn synced(&self) -> bool {
        *self.discovery.synced().borrow()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.discovery.abort();
    }
}

/// Polls `cond` every 10 ms until it holds or the deadline passes; true when it held.
pub(crate) async fn poll(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// Waits until `cond` holds, failing with `what`.
pub(crate) async fn eventually(what: &str, cond: impl FnMut() -> bool) {
    assert!(poll(cond).await, "never happened: {what}");
}
