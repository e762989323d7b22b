//! Leader election over a `coordination.k8s.io/v1` Lease (`--ha-enable-leader-election`): active-passive
//! HA as upstream ships it. Every replica campaigns for the Lease; only its holder reports ready, so the
//! gateway's health checks send traffic to one replica while the others wait warm (discovery and
//! telemetry keep running on all of them).
//!
//! The algorithm is client-go's (`kubernetes/client-go:tools/leaderelection/leaderelection.go`), which
//! upstream's EPP uses through controller-runtime, with its defaults (15 s lease, 10 s renew deadline, 2 s
//! retry) and its lease name (`kubernetes-sigs/gateway-api-inference-extension:pkg/epp/server/controller_manager.go`):
//! - every retry period: get the Lease; create it if absent; take it if it is released (no holder) or
//!   expired, else renew it if held. Writes carry the resourceVersion read, so of two candidates racing
//!   for one version only one wins (the other gets 409 and stays a follower);
//! - expiry is judged on this replica's own clock: a Lease is expired when its resourceVersion has not
//!   changed for its `leaseDurationSeconds` since this replica first saw that version (no clock skew
//!   between replicas matters);
//! - a leader that cannot renew for the renew deadline steps down (NOT_SERVING) before the lease can
//!   expire for the others, then campaigns again;
//! - on graceful shutdown the leader releases the Lease (no holder, duration 1 s), as controller-runtime's
//!   `LeaderElectionReleaseOnCancel`, which upstream sets: a follower takes over at its next retry instead
//!   of after the lease duration.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client::{build_client, ClientSource, DiscoveryError};

/// The Lease's name for the pool `pool` in `namespace`, as upstream names it, so an epp and a Go EPP
/// of one pool never both lead.
pub fn lease_name(namespace: &str, pool: &str) -> String {
    format!("epp-{namespace}-{pool}.gateway-api-inference-extension.sigs.k8s.io")
}

/// What leader election needs.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub lease_name: String,
    /// The Lease's namespace (the pool's).
    pub namespace: String,
    /// This replica's identity in `holderIdentity`: unique per process.
    pub identity: String,
    pub client: ClientSource,
    /// How long a Lease nobody renews stays held.
    pub lease_duration: Duration,
    /// How long a leader keeps leading while its renewals fail.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// client-go's and controller-runtime's defaults: 15 s, 10 s, 2 s.
    pub fn new(lease_name: String, namespace: String, identity: String, client: ClientSource) -> Self {
        Self {
            lease_name,
            namespace,
            identity,
            client,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A running campaign.
#[derive(Debug)]
pub struct LeaderElection {
    leading: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl LeaderElection {
    pub fn spawn(config: LeaderConfig) -> Self {
        let (leading_tx, leading) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        let elector = Elector { config, api: None, observed: None, leading: leading_tx, renewed: None };
        Self { leading, stop, task: tokio::spawn(elector.run(stop_rx)) }
    }

    /// True while this replica holds the Lease.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Graceful end: stops campaigning and, if leading, releases the Lease (bounded by the renew deadline).
    pub async fn release(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Ends at once without releasing, as a crash would: the others wait for the lease to expire.
    pub fn abort(&self) {
        self.task.abort();
    }
}

struct Elector {
    config: LeaderConfig,
    api: Option<Api<Lease>>,
    /// The Lease's last seen resourceVersion and when this replica first saw it.
    observed: Option<(String, Instant)>,
    leading: watch::Sender<bool>,
    /// When this replica last renewed successfully.
    renewed: Option<Instant>,
}

impl Elector {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        tracing::info!(lease = %self.config.lease_name, identity = %self.config.identity, "leader election");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    self.renewed = Some(Instant::now());
                    if !*self.leading.borrow() {
                        tracing::info!(lease = %self.config.lease_name, "leader election: this replica leads");
                        self.leading.send_replace(true);
                    }
                }
                Ok(false) => self.step_down("another replica holds the lease"),
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: lease call failed");
                    let overdue = self.renewed.is_none_or(|at| at.elapsed() >= self.config.renew_deadline);
                    if overdue {
                        self.step_down("could not renew the lease within the renew deadline");
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
        if *self.leading.borrow() {
            self.leading.send_replace(false);
            let deadline = self.config.renew_deadline;
            match tokio::time::timeout(deadline, self.release()).await {
                Ok(Ok(())) => {
                    tracing::info!(lease = %self.config.lease_name, "leader election: lease released");
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "leader election: could not release the lease"),
                Err(_) => tracing::warn!("leader election: releasing the lease timed out"),
            }
        }
    }

    fn step_down(&mut self, why: &str) {
        if *self.leading.borrow() {
            tracing::warn!(lease = %self.config.lease_name, reason = why, "leader election: no longer leading");
            self.leading.send_replace(false);
        }
        self.renewed = None;
    }

    async fn api(&mut self) -> Result<Api<Lease>, DiscoveryError> {
        if let Some(api) = &self.api {
            return Ok(api.clone());
        }
        let client = build_client(&self.config.client).await?;
        let api: Api<Lease> = Api::namespaced(client, &self.config.namespace);
        self.api = Some(api.clone());
        Ok(api)
    }

    /// One round: Ok(true) when this replica holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, DiscoveryError> {
        let api = self.api().await?;
        let name = self.config.lease_name.clone();
        let bound = self.config.renew_deadline;
        let current = bounded(bound, api.get_opt(&name)).await?;
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(name), ..Default::default() },
                spec: Some(self.held_spec(&LeaseSpec::default(), now, true)),
            };
            return conflict_is_false(bounded(bound, api.create(&PostParams::default(), &lease)).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let first_seen = match &self.observed {
            Some((seen, at)) if *seen == version => *at,
            _ => {
                self.observed = Some((version, Instant::now()));
                Instant::now()
            }
        };
        let mine = holder == self.config.identity;
        let duration = spec.lease_duration_seconds.map_or(self.config.lease_duration, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or_default())
        });
        if !mine && !holder.is_empty() && first_seen.elapsed() < duration {
            return Ok(false);
        }
        lease.spec = Some(self.held_spec(&spec, now, !mine));
        conflict_is_false(bounded(bound, api.replace(&name, &PostParams::default(), &lease)).await)
    }

    /// `spec` held by this replica, renewed `now`; `acquired`: a new term (acquire time, one more transition).
    fn held_spec(&self, spec: &LeaseSpec, now: MicroTime, acquired: bool) -> LeaseSpec {
        let mut held = spec.clone();
        held.holder_identity = Some(self.config.identity.clone());
        held.lease_duration_seconds = Some(whole_seconds(self.config.lease_duration));
        held.renew_time = Some(now.clone());
        if acquired {
            held.acquire_time = Some(now);
            held.lease_transitions = Some(spec.lease_transitions.map_or(0, |t| t.saturating_add(1)));
        }
        held
    }

    /// Gives the Lease up if this replica still holds it: no holder, a 1 s duration (client-go's release).
    async fn release(&mut self) -> Result<(), DiscoveryError> {
        let api = self.api().await?;
        let name = self.config.lease_name.clone();
        let Some(mut lease) = api.get_opt(&name).await? else { return Ok(()) };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        lease.spec = Some(spec);
        api.replace(&name, &PostParams::default(), &lease).await?;
        Ok(())
    }
}

/// A write that lost a race (409: created or updated by another candidate first) is not an error: this
/// replica simply does not hold the Lease.
fn conflict_is_false<T>(result: Result<T, DiscoveryError>) -> Result<bool, DiscoveryError> {
    match result {
        Ok(_) => Ok(true),
        Err(DiscoveryError::Api(kube::Error::Api(status))) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn bounded<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, DiscoveryError> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(DiscoveryError::Timeout(limit)),
    }
}

/// `leaseDurationSeconds` for `d`: whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_lease_name_and_whole_seconds() {
        assert_eq!(lease_name("llm", "pool"), "epp-llm-pool.gateway-api-inference-extension.sigs.k8s.io");
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(10)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(15)), 15);
    }
}
