//! The list/watch loop against the API server.
//!
//! One cycle: list the pool (by name) and its pods (by the pool's selector), replace the state, publish,
//! then watch both from the lists' resourceVersions, applying pod events as they come. A cycle ends — and
//! the next one lists everything again — when:
//! - the resync period has passed (the level-triggered reconcile: a Delete event the watch lost cannot
//!   keep a dead pod in the pool past one period; peers lost exactly such events, SMG #1531/#2061);
//! - a watch answers 410 Gone (its resourceVersion was compacted away);
//! - the pool was created, changed or deleted (its pods are listed again under the new spec);
//! - a call failed: then after a capped exponential backoff with jitter, while the last known endpoints
//!   keep serving.
//!
//! A watch that ends cleanly (the server's timeout) is reopened from the last resourceVersion seen,
//! bookmarks included, as client-go's reflector does, without a relist.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use super::client::{bounded, build_client, DiscoveryError};
use super::metrics::{DiscoveryMetrics, SyncReason};
use super::pods::PodInfo;
use super::publish::Publisher;
use super::spec::PoolSpec;
use super::state::PoolState;
use super::{DiscoveryConfig, PoolSource};

/// A watch that ends sooner than this after opening is reopened only after the minimum backoff, so a
/// server that closes watches at once cannot make discovery spin.
pub(super) const QUICK_END: Duration = Duration::from_secs(1);

type Events<K> = BoxStream<'static, Result<WatchEvent<K>, kube::Error>>;

/// An open watch and when it was opened.
struct OpenWatch<K> {
    events: Events<K>,
    opened: Instant,
}

/// Owns the state and runs cycles until the task is aborted.
pub(super) struct Runner {
    pub config: DiscoveryConfig,
    pub state: PoolState,
    pub publisher: Publisher,
    pub metrics: Arc<DiscoveryMetrics>,
    pub synced: watch::Sender<bool>,
}

impl Runner {
    pub(super) async fn run(mut self) {
        let mut client: Option<Client> = None;
        let mut reason = SyncReason::Initial;
        let mut failures: u32 = 0;
        loop {
            let outcome = match &client {
                Some(c) => self.cycle(c, reason).await,
                None => match build_client(&self.config.client).await {
                    Ok(c) => {
                        client = Some(c.clone());
                        self.cycle(&c, reason).await
                    }
                    Err(e) => Err(e),
                },
            };
            match outcome {
                Ok(next) => {
                    failures = 0;
                    reason = next;
                }
                Err(e) if e.is_expired() => reason = SyncReason::Expired,
                Err(e) => {
                    failures = failures.saturating_add(1);
                    self.metrics.error();
                    let delay = jittered(backoff(self.config.backoff_min, self.config.backoff_max, failures));
                    tracing::warn!(
                        error = %e,
                        retry_in = ?delay,
                        serving = self.publisher.len(),
                        "Kubernetes discovery failed; serving the last known endpoints"
                    );
                    tokio::time::sleep(delay).await;
                    reason = SyncReason::Error;
                }
            }
        }
    }

    /// Lists, publishes, then watches until the next relist is due; returns why.
    async fn cycle(&mut self, client: &Client, reason: SyncReason) -> Result<SyncReason, DiscoveryError> {
        let namespace = self.config.namespace.clone();
        let (pool, pool_rv) = match &self.config.source {
            PoolSource::Standalone(spec) => (Some(spec.clone()), None),
            PoolSource::InferencePool { resource, name, .. } => {
                let api = self.pool_api(client, resource);
                let list = self
                    .bounded(api.list(&ListParams::default().fields(&format!("metadata.name={name}"))))
                    .await?;
                let object = list.items.iter().find(|o| o.metadata.name.as_deref() == Some(name.as_str()));
                let spec = object.and_then(|o| self.read_pool(o));
                if object.is_none() {
                    tracing::warn!(pool = %name, %namespace, "InferencePool not found; the pool has no endpoints");
                }
                (spec, Some(list.metadata.resource_version.unwrap_or_default()))
            }
        };
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let (pods, pods_rv) = match &pool {
            Some(spec) => {
                let list = self
                    .bounded(pods_api.list(&ListParams::default().labels(&spec.label_selector())))
                    .await?;
                let pods: Vec<_> = list.items.iter().filter_map(PodInfo::from_pod).collect();
                (pods, Some(list.metadata.resource_version.unwrap_or_default()))
            }
            None => (Vec::new(), None),
        };
        let has_pool = pool.is_some();
        self.state.replace(pool, pods);
        self.metrics.synced(reason);
        self.publish();
        if has_pool && !*self.synced.borrow() {
            tracing::info!(endpoints = self.publisher.len(), "discovery synced: ready");
            self.synced.send_replace(true);
        }
        tracing::debug!(reason = reason.as_str(), endpoints = self.publisher.len(), "pool listed");
        self.watch(client, pool_rv, pods_rv).await
    }

    /// Watches the pool and its pods until a relist is due.
    async fn watch(
        &mut self,
        client: &Client,
        mut pool_rv: Option<String>,
        mut pods_rv: Option<String>,
    ) -> Result<SyncReason, DiscoveryError> {
        let deadline = Instant::now() + self.config.resync_period;
        let mut pool_watch: Option<OpenWatch<DynamicObject>> = None;
        let mut pod_watch: Option<OpenWatch<Pod>> = None;
        loop {
            if let (PoolSource::InferencePool { resource, name, .. }, Some(rv), None) =
                (&self.config.source, &pool_rv, &pool_watch)
            {
                let params = self.watch_params().fields(&format!("metadata.name={name}"));
                let events = self.bounded(self.pool_api(client, resource).watch(&params, rv)).await?.boxed();
                pool_watch = Some(OpenWatch { events, opened: Instant::now() });
            }
            if let (Some(spec), Some(rv), None) = (self.state.pool(), &pods_rv, &pod_watch) {
                let params = self.watch_params().labels(&spec.label_selector());
                let api: Api<Pod> = Api::namespaced(client.clone(), &self.config.namespace);
                let events = self.bounded(api.watch(&params, rv)).await?.boxed();
                pod_watch = Some(OpenWatch { events, opened: Instant::now() });
            }
            tokio::select! {
                event = next_event(&mut pool_watch) => match event {
                    None => self.reopen_after(&mut pool_watch).await,
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(WatchEvent::Bookmark(b))) => pool_rv = Some(b.metadata.resource_version),
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                        pool_rv = o.metadata.resource_version.clone();
                        if self.read_pool(&o).as_ref() != self.state.pool() {
                            return Ok(SyncReason::PoolChanged);
                        }
                    }
                    Some(Ok(WatchEvent::Deleted(_))) => return Ok(SyncReason::PoolChanged),
                    Some(Ok(WatchEvent::Error(status))) => {
                        return Err(DiscoveryError::WatchStatus { code: status.code, message: status.message })
                    }
                },
                event = next_event(&mut pod_watch) => match event {
                    None => self.reopen_after(&mut pod_watch).await,
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(WatchEvent::Bookmark(b))) => pods_rv = Some(b.metadata.resource_version),
                    Some(Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod))) => {
                        pods_rv = pod.metadata.resource_version.clone().or(pods_rv);
                        if let Some(info) = PodInfo::from_pod(&pod) {
                            self.state.upsert(info);
                            self.publish();
                        }
                    }
                    Some(Ok(WatchEvent::Deleted(pod))) => {
                        pods_rv = pod.metadata.resource_version.clone().or(pods_rv);
                        if let Some(name) = &pod.metadata.name {
                            self.state.remove(name);
                            self.publish();
                        }
                    }
                    Some(Ok(WatchEvent::Error(status))) => {
                        return Err(DiscoveryError::WatchStatus { code: status.code, message: status.message })
                    }
                },
                () = tokio::time::sleep_until(deadline) => return Ok(SyncReason::Periodic),
            }
        }
    }

    /// A watch ended cleanly: drop it so the loop reopens it from the last resourceVersion.
    async fn reopen_after<K>(&self, open: &mut Option<OpenWatch<K>>) {
        if open.take().is_some_and(|w| w.opened.elapsed() < QUICK_END) {
            tokio::time::sleep(self.config.backoff_min).await;
        }
    }

    /// One API call, bounded by the call timeout ([`bounded`]).
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, DiscoveryError> {
        bounded(self.config.call_timeout, call).await
    }

    fn publish(&mut self) {
        let desired = self.state.desired(self.publisher.metrics_port());
        self.publisher.publish(desired);
    }

    fn pool_api(&self, client: &Client, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &self.config.namespace, resource)
    }

    /// The spec of a pool object, or `None` (logged) when it is invalid: an invalid pool has no endpoints.
    fn read_pool(&self, object: &DynamicObject) -> Option<PoolSpec> {
        let PoolSource::InferencePool { group, name, .. } = &self.config.source else { return None };
        match PoolSpec::from_object(group, &object.data) {
            Ok(spec) => Some(spec),
            Err(e) => {
                tracing::error!(pool = %name, error = %e, "invalid InferencePool; the pool has no endpoints");
                None
            }
        }
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams { timeout: Some(self.config.watch_timeout_secs), ..WatchParams::default() }
    }
}

async fn next_event<K>(open: &mut Option<OpenWatch<K>>) -> Option<Result<WatchEvent<K>, kube::Error>> {
    match open {
        Some(w) => w.events.next().await,
        None => std::future::pending().await,
    }
}

/// `min × 2^(failures-1)`, capped at `max`.
pub(super) fn backoff(min: Duration, max: Duration, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    min.saturating_mul(factor).min(max)
}

/// `delay` spread over `[delay / 2, delay]` ("equal jitter"): every epp replica, and each of one epp's
/// watch loops, lost the API server at the same moment, and without jitter they would all come back at
/// the same instants, a thundering herd on an API server that is just recovering.
pub(super) fn jittered(delay: Duration) -> Duration {
    spread(delay, rand::random::<f64>())
}

/// `delay × (1 + unit) / 2` for `unit` in [0, 1].
fn spread(delay: Duration, unit: f64) -> Duration {
    delay.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_keeps_between_half_and_all_of_the_delay() {
        let delay = Duration::from_secs(1);
        assert_eq!(spread(delay, 0.0), Duration::from_millis(500));
        assert_eq!(spread(delay, 1.0), delay);
        assert_eq!(spread(delay, 7.0), delay, "clamped");
        assert!((0..100).map(|_| jittered(delay)).all(|d| d >= delay / 2 && d <= delay));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<_> = (1..=6).map(|n| backoff(min, max, n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(min, max, u32::MAX), max);
    }
}
