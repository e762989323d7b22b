//! Follows the cluster's `InferenceObjective` and `InferenceModelRewrite` objects (both API groups) in
//! the pool's namespace and keeps the [`PolicyStore`]'s cluster layer equal to what they say.
//!
//! One task per collection (kind × group), each the same level-triggered loop as the pool's: list,
//! watch from the list's resourceVersion (reopening a watch that ends cleanly, bookmarks included),
//! relist on 410 and every resync period, back off while the API server is unreachable and keep the
//! last known objects meanwhile. A collection whose list answers 404 has no CRD installed: it is not
//! used (logged once) and asked again each resync period, so a CRD installed later is picked up; 403
//! (no RBAC rule for it) is handled the same way, with a warning. Only InferencePool mode reads these,
//! as upstream: in standalone mode there is no pool for them to reference.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::Client;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client::{bounded, build_client, DiscoveryError};
use super::objectives::{policies, PolicyKind, PoolRef, GROUP_LLM_D};
use super::runner::{backoff, jittered, QUICK_END};
use super::spec::GROUP_X_K8S;
use super::{DiscoveryConfig, PoolSource};
use crate::request::{Policies, PolicyStore};

/// The API groups both kinds are read from: GIE's and llm-d-router's.
pub const POLICY_GROUPS: [&str; 2] = [GROUP_X_K8S, GROUP_LLM_D];

type Key = (PolicyKind, &'static str);

/// The running watches.
#[derive(Debug)]
pub struct PolicyWatch {
    tasks: Vec<JoinHandle<()>>,
}

impl PolicyWatch {
    /// Starts following both kinds in both groups for the pool of `config`, publishing into `store`;
    /// `None` in standalone mode.
    pub fn spawn(config: &DiscoveryConfig, store: Arc<PolicyStore>) -> Option<Self> {
        let PoolSource::InferencePool { group, name, .. } = &config.source else { return None };
        let shared = Arc::new(Shared {
            pool: PoolRef { group: group.clone(), name: name.clone() },
            store,
            objects: Mutex::default(),
            last: Mutex::default(),
        });
        let tasks = POLICY_GROUPS
            .iter()
            .flat_map(|g| PolicyKind::ALL.map(|kind| (kind, *g)))
            .map(|key| {
                let follower = Follower {
                    key,
                    resource: key.0.resource(key.1),
                    config: config.clone(),
                    shared: shared.clone(),
                };
                tokio::spawn(follower.run())
            })
            .collect();
        Some(Self { tasks })
    }

    /// The tasks, for whoever stops them.
    pub fn into_tasks(self) -> Vec<JoinHandle<()>> {
        self.tasks
    }

    pub fn abort(&self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// Every collection's objects, and the store they are published into.
struct Shared {
    pool: PoolRef,
    store: Arc<PolicyStore>,
    objects: Mutex<BTreeMap<Key, BTreeMap<String, DynamicObject>>>,
    /// The cluster layer last published, to log changes only.
    last: Mutex<Policies>,
}

impl Shared {
    fn change(&self, key: Key, edit: impl FnOnce(&mut BTreeMap<String, DynamicObject>)) {
        let policies = {
            let mut all = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
            edit(all.entry(key).or_default());
            let objects = all.iter().flat_map(|((kind, _), objects)| objects.values().map(|o| (*kind, o)));
            policies(&self.pool, objects)
        };
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if *last != policies {
            tracing::info!(
                objectives = policies.objectives.len(),
                model_rewrites = policies.rewrites.len() + usize::from(policies.fallback.is_some()),
                "InferenceObjective / InferenceModelRewrite set changed"
            );
            self.store.set_cluster(&policies);
            *last = policies;
        }
    }

    fn replace(&self, key: Key, items: Vec<DynamicObject>) {
        let items = items.into_iter().filter_map(|o| Some((o.metadata.name.clone()?, o))).collect();
        self.change(key, |objects| *objects = items);
    }
}

/// Why a collection cannot be read at all (as opposed to a passing failure).
fn unavailable(e: &DiscoveryError) -> Option<u16> {
    match e {
        DiscoveryError::Api(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => {
            Some(status.code)
        }
        _ => None,
    }
}

/// One collection's loop.
struct Follower {
    key: Key,
    resource: ApiResource,
    config: DiscoveryConfig,
    shared: Arc<Shared>,
}

impl Follower {
    async fn run(self) {
        let (mut client, mut failures, mut unavailable_logged) = (None::<Client>, 0u32, false);
        let what = format!("{}.{}", self.resource.plural, self.resource.group);
        loop {
            let result = match &client {
                Some(c) => self.cycle(c, &mut unavailable_logged).await,
                None => match build_client(&self.config.client).await {
                    Ok(c) => {
                        client = Some(c.clone());
                        self.cycle(&c, &mut unavailable_logged).await
                    }
                    Err(e) => Err(e),
                },
            };
            let delay = match result {
                Ok(()) => {
                    failures = 0;
                    continue;
                }
                Err(e) if e.is_expired() => continue,
                Err(e) => match unavailable(&e) {
                    Some(code) => {
                        failures = 0;
                        if !std::mem::replace(&mut unavailable_logged, true) {
                            if code == 404 {
                                tracing::info!(resource = %what, "CRD not installed; not used");
                            } else {
                                tracing::warn!(resource = %what, error = %e, "not allowed to list; not used");
                            }
                        }
                        self.shared.replace(self.key, Vec::new());
                        self.config.resync_period
                    }
                    None => {
                        failures = failures.saturating_add(1);
                        let delay =
                            jittered(backoff(self.config.backoff_min, self.config.backoff_max, failures));
                        tracing::warn!(resource = %what, error = %e, retry_in = ?delay, "keeping the last known objects");
                        delay
                    }
                },
            };
            tokio::time::sleep(delay).await;
        }
    }

    /// Lists, then watches until the resync period is over.
    async fn cycle(&self, client: &Client, unavailable_logged: &mut bool) -> Result<(), DiscoveryError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &self.config.namespace, &self.resource);
        let list = bounded(self.config.call_timeout, api.list(&ListParams::default())).await?;
        if std::mem::take(unavailable_logged) {
            tracing::info!(resource = %self.resource.plural, group = %self.resource.group, "now readable; used");
        }
        let mut rv = list.metadata.resource_version.clone().unwrap_or_default();
        self.shared.replace(self.key, list.items);
        let deadline = Instant::now() + self.config.resync_period;
        let params = WatchParams { timeout: Some(self.config.watch_timeout_secs), ..WatchParams::default() };
        loop {
            let mut events = bounded(self.config.call_timeout, api.watch(&params, &rv)).await?.boxed();
            let opened = Instant::now();
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    () = tokio::time::sleep_until(deadline) => return Ok(()),
                };
                match event {
                    None => break,
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(WatchEvent::Bookmark(b))) => rv = b.metadata.resource_version,
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                        rv = o.metadata.resource_version.clone().unwrap_or(rv);
                        if let Some(name) = o.metadata.name.clone() {
                            self.shared.change(self.key, |objects| {
                                objects.insert(name, o);
                            });
                        }
                    }
                    Some(Ok(WatchEvent::Deleted(o))) => {
                        rv = o.metadata.resource_version.clone().unwrap_or(rv);
                        if let Some(name) = o.metadata.name.as_deref() {
                            self.shared.change(self.key, |objects| {
                                objects.remove(name);
                            });
                        }
                    }
                    Some(Ok(WatchEvent::Error(status))) => {
                        return Err(DiscoveryError::WatchStatus {
                            code: status.code,
                            message: status.message,
                        })
                    }
                }
            }
            if opened.elapsed() < QUICK_END {
                tokio::time::sleep(self.config.backoff_min).await;
            }
        }
    }
}
