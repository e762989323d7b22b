//! The per-endpoint series index.
//!
//! Every series labelled with an endpoint (per-pod queue size, in-flight load, scheduler attempts) is
//! recorded through here, so that when the endpoint leaves the pool all of its series can be removed: a
//! stale series keeps a KEDA `sum()` up forever (llm-d bug #2529), and pods come and go with fresh names, so
//! series that are never removed grow without bound. prometheus-client cannot list a family's label sets,
//! so each endpoint remembers the values its series were recorded with (notes), and each component that
//! records per-endpoint series adds a [`Pruner`] that removes its own series of a departing endpoint.
//!
//! Lock order: the endpoint map, then the pruner list, then an endpoint's notes or its kept counters (never
//! both at once), then a family (pruners must not call back into the index or the registry). Series are
//! recorded while the map's read lock is held and removed under its write lock, so a record racing a
//! removal either lands before it (and is removed) or re-registers the endpoint (and is removed by the next
//! `retain`). Counters an endpoint keeps go with its entry, so they are never those of a removed series.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::metrics::counter::Counter;

use crate::datastore::{Endpoint, EndpointTelemetry};

use super::labels::LabelValue;

/// Removes one component's series of a departing endpoint.
pub type Pruner = Box<dyn Fn(&TrackedEndpoint) + Send + Sync>;

/// An endpoint some per-endpoint series were recorded for.
#[derive(Debug)]
pub struct TrackedEndpoint {
    pub name: LabelValue,
    pub namespace: LabelValue,
    pub port: u16,
    /// `(kind, value)` label values its series were recorded with (e.g. the producers that published
    /// in-flight load for it, the target models it was picked for).
    notes: RwLock<HashSet<(&'static str, LabelValue)>>,
    /// Counters a recorder found once and keeps here by `(kind, raw value)` (the scheduler's attempt
    /// counters by target model): they go with the endpoint's series, so a kept one is never a series
    /// that was removed.
    kept_counters: RwLock<Vec<KeptCounters>>,
}

/// Counters kept for an endpoint under a kind and a raw value.
#[derive(Debug)]
struct KeptCounters {
    kind: &'static str,
    value: Box<str>,
    counters: [Counter; 2],
}

/// How many counter pairs one endpoint keeps: an endpoint serves a handful of models; past this, counters
/// are found through their families each time.
const MAX_KEPT_COUNTERS: usize = 16;

impl TrackedEndpoint {
    fn new(endpoint: &Endpoint) -> Self {
        Self {
            name: LabelValue::new(&endpoint.name),
            namespace: LabelValue::new(&endpoint.namespace),
            port: endpoint.addr.port(),
            notes: RwLock::default(),
            kept_counters: RwLock::default(),
        }
    }

    fn is(&self, endpoint: &Endpoint) -> bool {
        self.port == endpoint.addr.port() && self.namespace.as_str() == endpoint.namespace
    }

    /// Remembers that a series of `kind` was recorded with `value` (cheap when already noted, the common
    /// case).
    pub fn note(&self, kind: &'static str, value: &LabelValue) {
        let key = (kind, value.clone());
        if self.notes.read().unwrap_or_else(PoisonError::into_inner).contains(&key) {
            return;
        }
        self.notes.write().unwrap_or_else(PoisonError::into_inner).insert(key);
    }

    /// Runs `f` on the counters kept under `(kind, value)`, or on new ones from `make`, kept when `make`
    /// says so (only handles on series of their own, never an overflow series) and this endpoint keeps
    /// fewer than its most. As [`super::KeptHandles::with`], by a short scan instead of a hash: an
    /// endpoint keeps a handful.
    pub fn with_kept_counters<R>(
        &self,
        kind: &'static str,
        value: &str,
        make: impl FnOnce() -> ([Counter; 2], bool),
        f: impl FnOnce(&[Counter; 2]) -> R,
    ) -> R {
        let is = |k: &KeptCounters| k.kind == kind && &*k.value == value;
        if let Some(k) =
            self.kept_counters.read().unwrap_or_else(PoisonError::into_inner).iter().find(|k| is(k))
        {
            return f(&k.counters);
        }
        let (counters, keep) = make();
        if keep {
            let mut kept = self.kept_counters.write().unwrap_or_else(PoisonError::into_inner);
            // Another thread may have kept the same series in between: one entry is enough.
            if kept.len() < MAX_KEPT_COUNTERS && !kept.iter().any(is) {
                kept.push(KeptCounters { kind, value: value.into(), counters: counters.clone() });
            }
        }
        f(&counters)
    }

    /// The values noted under `kind`.
    pub fn noted(&self, kind: &'static str) -> Vec<LabelValue> {
        let notes = self.notes.read().unwrap_or_else(PoisonError::into_inner);
        notes.iter().filter(|(k, _)| *k == kind).map(|(_, v)| v.clone()).collect()
    }
}

/// The endpoints that currently have per-endpoint series, by name, and the pruners that remove them.
#[derive(Default)]
pub struct EndpointSeries {
    by_name: RwLock<HashMap<LabelValue, TrackedEndpoint>>,
    pruners: RwLock<Vec<Pruner>>,
}

impl std::fmt::Debug for EndpointSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointSeries").field("tracked", &self.tracked_names()).finish()
    }
}

impl EndpointSeries {
    /// Adds a component's pruner, run for every endpoint whose series are removed from now on.
    pub fn add_pruner(&self, pruner: Pruner) {
        self.pruners.write().unwrap_or_else(PoisonError::into_inner).push(pruner);
    }

    fn prune(&self, tracked: &TrackedEndpoint) {
        for pruner in self.pruners.read().unwrap_or_else(PoisonError::into_inner).iter() {
            pruner(tracked);
        }
    }

    /// Runs `record` with the tracked entry of `endpoint`, registering it first if needed. An entry with
    /// the same name but another namespace or port is a different endpoint: its series go first.
    pub fn with<R>(&self, endpoint: &Endpoint, record: impl FnOnce(&TrackedEndpoint) -> R) -> R {
        {
            let map = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(tracked) = map.get(endpoint.name.as_str()).filter(|t| t.is(endpoint)) {
                return record(tracked);
            }
        }
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let tracked = self.entry(&mut map, endpoint);
        record(tracked)
    }

    fn entry<'m>(
        &self,
        map: &'m mut HashMap<LabelValue, TrackedEndpoint>,
        endpoint: &Endpoint,
    ) -> &'m TrackedEndpoint {
        let name = endpoint.name.as_str();
        if map.get(name).is_some_and(|t| !t.is(endpoint)) {
            if let Some(old) = map.remove(name) {
                self.prune(&old);
            }
        }
        if !map.contains_key(name) {
            let tracked = TrackedEndpoint::new(endpoint);
            return map.entry(tracked.name.clone()).or_insert(tracked);
        }
        map.entry(LabelValue::new(name)).or_insert_with(|| TrackedEndpoint::new(endpoint))
    }

    /// Removes the series of `endpoint`, unless a newer endpoint of the same name has taken over its
    /// entry (whose series then stay).
    pub fn remove(&self, endpoint: &Endpoint) {
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        if map.get(endpoint.name.as_str()).is_some_and(|t| t.is(endpoint)) {
            if let Some(tracked) = map.remove(endpoint.name.as_str()) {
                self.prune(&tracked);
            }
        }
    }

    /// Removes the series of every tracked endpoint not in `endpoints`, then runs `record` for each of
    /// `endpoints` with its (possibly new) entry, all under one lock.
    pub fn retain(&self, endpoints: &[Arc<Endpoint>], mut record: impl FnMut(&Endpoint, &TrackedEndpoint)) {
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let current: HashSet<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
        map.retain(|name, tracked| {
            let keep = current.contains(name.as_str());
            if !keep {
                self.prune(tracked);
            }
            keep
        });
        for endpoint in endpoints {
            let tracked = self.entry(&mut map, endpoint);
            record(endpoint, tracked);
        }
    }

    /// The names of the tracked endpoints, sorted.
    pub fn tracked_names(&self) -> Vec<String> {
        let map = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<String> = map.keys().map(|k| k.as_str().to_string()).collect();
        names.sort();
        names
    }
}

/// Mean and sample standard deviation, rounded to two decimals as the Go EPP publishes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub std_dev: f64,
}

impl Stats {
    fn of(values: impl Iterator<Item = f64> + Clone) -> Option<Self> {
        let n = values.clone().count();
        if n == 0 {
            return None;
        }
        let n = n as f64;
        let mean = values.clone().sum::<f64>() / n;
        let squares: f64 = values.map(|v| (v - mean) * (v - mean)).sum();
        // Sample standard deviation (n − 1), with one endpoint treated as n − 1 = 1, as in Go.
        let std_dev = (squares / (n - 1.0).max(1.0)).sqrt();
        Some(Self { mean: round2(mean), std_dev: round2(std_dev) })
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The pool aggregates over endpoints with fresh telemetry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolSummary {
    pub kv_cache: Stats,
    pub queue: Stats,
    pub running: Stats,
}

impl PoolSummary {
    pub fn of(fresh: &[Arc<EndpointTelemetry>]) -> Option<Self> {
        Some(Self {
            kv_cache: Stats::of(fresh.iter().map(|m| m.kv_cache_usage))?,
            queue: Stats::of(fresh.iter().map(|m| m.waiting_queue_size as f64))?,
            running: Stats::of(fresh.iter().map(|m| m.running_requests as f64))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_std_dev_rounded_like_go() {
        let s = Stats::of([1.0, 4.0].into_iter()).unwrap();
        assert_eq!(s, Stats { mean: 2.5, std_dev: 2.12 });
        let one = Stats::of([3.0].into_iter()).unwrap();
        assert_eq!(one, Stats { mean: 3.0, std_dev: 0.0 });
        assert!(Stats::of(std::iter::empty()).is_none());
    }
}
