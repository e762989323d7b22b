//! The sidecar's own metrics, served at `/pd-sidecar/metrics` (every other path, `/metrics` included, is
//! the engine's): requests by path taken and outcome, and how long prefill legs took.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The path a request took through the sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Prefill on the named pod, then decode here.
    Disaggregated,
    /// A generate request without a prefiller: the local engine does both.
    Local,
    /// Not a generate request: passed through.
    Passthrough,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Self::Disaggregated => "disaggregated",
            Self::Local => "local",
            Self::Passthrough => "passthrough",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    outcome: &'static str,
}

/// Handles and the registry they are served from.
#[derive(Debug)]
pub struct SidecarMetrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    prefill_seconds: Histogram,
}

impl SidecarMetrics {
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let buckets = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];
        let prefill_seconds = Histogram::new(buckets);
        registry.register(
            "epp_pd_sidecar_requests",
            "Requests by route taken and outcome (ok, or the error code answered)",
            requests.clone(),
        );
        registry.register(
            "epp_pd_sidecar_prefill_duration_seconds",
            "Time from sending the prefill leg to its answer, successful legs only",
            prefill_seconds.clone(),
        );
        Arc::new(Self { registry: Mutex::new(registry), requests, prefill_seconds })
    }

    /// One request answered (`outcome`: "ok" or an error code).
    pub fn request(&self, route: Route, outcome: &'static str) {
        self.requests.get_or_create(&RequestLabels { route: route.as_str(), outcome }).inc();
    }

    pub fn prefill_done(&self, seconds: f64) {
        self.prefill_seconds.observe(seconds);
    }

    /// The OpenMetrics exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}
