//! Kubernetes discovery: which model-server endpoints the pool has, kept current from the API server.
//!
//! Two modes, as upstream (`kubernetes-sigs/gateway-api-inference-extension:pkg/epp/server/options.go`):
//! - **InferencePool**: the pool named by `--pool-name` in `--pool-namespace`, of `--pool-group`
//!   (`inference.networking.k8s.io/v1`, or the older `inference.networking.x-k8s.io/v1alpha2`); its
//!   selector and target ports come from the object and follow its changes;
//! - **standalone**: no pool object; `--endpoint-selector` and `--endpoint-target-ports` say the same.
//!
//! Either way the endpoints are the ready selected pods × the target ports ([`pods`]), published into
//! the [`Datastore`] whenever they change ([`publish`]); the loop ([`runner`]) lists, watches, relists on
//! 410 and on a period, and backs off while the API server is unreachable, serving the last known
//! endpoints. [`Discovery::synced`] turns true at the first successful sync of an existing pool, which is
//! when epp may report ready.
//!
//! A third source needs no cluster: [`file`] reads the endpoints from a file (llm-d-router's
//! `file-discovery` format), optionally reloading it on change.
//!
//! In InferencePool mode [`PolicyWatch`] also follows the `InferenceObjective` and
//! `InferenceModelRewrite` objects that reference the pool ([`objectives`]), when their CRDs exist, and
//! keeps the request path's [`crate::request::PolicyStore`] equal to them.
//!
//! [`LeaderElection`] (`--ha-enable-leader-election`) lives here too: it is the other client of the same
//! API server, with the same client configuration and errors.
//!
//! Discovery sits beside telemetry and health: it feeds the datastore (below it) and registers its
//! families in the metrics registry; `app` wires it and hands it the pipeline's removal hook.

mod client;
pub(crate) mod file;
mod leader;
mod metrics;
mod objectives;
mod pods;
mod policy_watch;
mod publish;
mod runner;
mod spec;
mod state;

use std::sync::Arc;
use std::time::Duration;

use kube::api::ApiResource;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use client::{build_client, ClientSource, DiscoveryError};
pub use file::endpoint_addresses;
pub use leader::{lease_name, LeaderConfig, LeaderElection};
pub use metrics::{DiscoveryMetrics, SyncReason};
pub use objectives::{policies, PolicyKind, PoolRef, GROUP_LLM_D, POLICY_VERSION};
pub use pods::{
    active_ports, desired_endpoints, is_ready, pod_endpoints, DesiredEndpoint, PodInfo,
    ACTIVE_PORTS_ANNOTATION,
};
pub use policy_watch::{PolicyWatch, POLICY_GROUPS};
pub use publish::{MetricsTarget, RemovedHook};
pub use spec::{pool_version, standalone_pool_name, PoolSpec, SpecError, GROUP_V1, GROUP_X_K8S};

use crate::datastore::Datastore;

/// How long a full relist may wait at most: the level-triggered reconcile's period.
pub const DEFAULT_RESYNC_PERIOD: Duration = Duration::from_secs(60);

/// Where the pool's spec comes from.
#[derive(Debug, Clone)]
pub enum PoolSource {
    /// An InferencePool object, watched.
    InferencePool { group: String, name: String, resource: ApiResource },
    /// The standalone flags' fixed spec.
    Standalone(PoolSpec),
}

impl PoolSource {
    /// The InferencePool `name` of `group` (checked: one of the two known groups).
    pub fn inference_pool(group: &str, name: &str) -> Result<Self, SpecError> {
        let resource = client::pool_resource(group)?;
        Ok(Self::InferencePool { group: group.to_string(), name: name.to_string(), resource })
    }
}

impl std::fmt::Display for PoolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InferencePool { name, resource, .. } => {
                write!(f, "InferencePool {} {name}", resource.api_version)
            }
            Self::Standalone(spec) => {
                write!(
                    f,
                    "standalone selector {} target ports {:?}",
                    spec.label_selector(),
                    spec.target_ports
                )
            }
        }
    }
}

/// Everything discovery needs to run.
#[derive(Debug, Clone)]
pub struct DiscoveryConfig {
    pub source: PoolSource,
    /// The pool's namespace: pods are watched there only.
    pub namespace: String,
    pub client: ClientSource,
    /// How the endpoints' `/metrics` URLs are formed.
    pub metrics_target: MetricsTarget,
    /// Period of the full relist.
    pub resync_period: Duration,
    /// The server-side timeout of each watch call (the watch is then reopened from where it was).
    pub watch_timeout_secs: u32,
    /// Longest wait for the answer to one list call or for a watch to open.
    pub call_timeout: Duration,
    /// First retry delay after a failed call; doubles per consecutive failure up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl DiscoveryConfig {
    /// The defaults for `source` in `namespace`: inferred client, 60 s resync, 30 s call timeout, backoff
    /// 200 ms → 30 s.
    pub fn new(source: PoolSource, namespace: impl Into<String>) -> Self {
        Self {
            source,
            namespace: namespace.into(),
            client: ClientSource::Infer,
            metrics_target: MetricsTarget::default(),
            resync_period: DEFAULT_RESYNC_PERIOD,
            watch_timeout_secs: 290,
            call_timeout: Duration::from_secs(30),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// A running discovery task.
#[derive(Debug)]
pub struct Discovery {
    task: JoinHandle<()>,
    synced: watch::Receiver<bool>,
}

impl Discovery {
    /// Starts discovery: it publishes into `datastore`, calls `on_removed` with endpoints that leave, and
    /// records into `metrics`.
    pub fn spawn(
        config: DiscoveryConfig,
        datastore: Arc<Datastore>,
        on_removed: RemovedHook,
        metrics: Arc<DiscoveryMetrics>,
    ) -> Self {
        let (synced_tx, synced) = watch::channel(false);
        let publisher =
            publish::Publisher::new(datastore, on_removed, config.metrics_target.clone(), metrics.clone());
        let runner = runner::Runner {
            config,
            state: state::PoolState::default(),
            publisher,
            metrics,
            synced: synced_tx,
        };
        Self { task: tokio::spawn(runner.run()), synced }
    }

    /// Turns true at the first successful sync of an existing pool, and stays true.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    /// The task, for whoever stops it.
    pub fn into_task(self) -> JoinHandle<()> {
        self.task
    }

    /// Stops discovery (the endpoints stay as last published).
    pub fn abort(&self) {
        self.task.abort();
    }
}
