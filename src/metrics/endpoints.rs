//! Per-endpoint series and the pool aggregates.
//!
//! Every series labelled with an endpoint (per-pod queue size, in-flight load, scheduler attempts) is
//! tracked here, so that when the endpoint leaves the pool all of its series can be removed: a stale
//! series keeps a KEDA `sum()` up forever (llm-d bug #2529), and pods come and go with fresh names, so
//! series that are never removed grow without bound. prometheus-client cannot list a family's label sets,
//! so each endpoint remembers the producers and target models its series were recorded with.
//!
//! Lock order: the endpoint map, then an endpoint's sets, then a family. Series are recorded while the
//! map's read lock is held and removed under its write lock, so a record racing a removal either lands
//! before it (and is removed) or re-registers the endpoint (and is removed by the next `update_pool`).

use std::collections::{HashMap, HashSet};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::datastore::{Endpoint, EndpointMetrics};

use super::buckets::FloatGauge;
use super::families::Families;
use super::labels::*;

/// An endpoint some per-endpoint series were recorded for.
#[derive(Debug)]
pub struct TrackedEndpoint {
    pub name: LabelValue,
    pub namespace: LabelValue,
    pub port: u16,
    /// Producers that published in-flight load for it.
    producers: RwLock<HashSet<LabelValue>>,
    /// Target models it was picked for (scheduler attempts carry `target_model_name`).
    targets: RwLock<HashSet<LabelValue>>,
}

impl TrackedEndpoint {
    fn new(endpoint: &Endpoint) -> Self {
        Self {
            name: LabelValue::new(&endpoint.name),
            namespace: LabelValue::new(&endpoint.namespace),
            port: endpoint.addr.port(),
            producers: RwLock::default(),
            targets: RwLock::default(),
        }
    }

    fn is(&self, endpoint: &Endpoint) -> bool {
        self.port == endpoint.addr.port() && self.namespace.as_str() == endpoint.namespace
    }

    /// Remembers `value` in `set` (cheap when already there, the common case).
    fn note(set: &RwLock<HashSet<LabelValue>>, value: &LabelValue) {
        if set.read().unwrap_or_else(PoisonError::into_inner).contains(value) {
            return;
        }
        set.write().unwrap_or_else(PoisonError::into_inner).insert(value.clone());
    }

    pub fn note_producer(&self, producer: &LabelValue) {
        Self::note(&self.producers, producer);
    }

    pub fn note_target(&self, target: &LabelValue) {
        Self::note(&self.targets, target);
    }

    pub fn inflight_labels(&self, producer: &LabelValue) -> InflightLabels {
        InflightLabels {
            endpoint_name: self.name.clone(),
            namespace: self.namespace.clone(),
            producer_name: producer.clone(),
            fairness_id: "",
            priority: "",
        }
    }

    pub fn attempt_labels(&self, target: &LabelValue) -> GieAttemptLabels {
        GieAttemptLabels {
            status: "success",
            target_model_name: target.clone(),
            pod_name: self.name.clone(),
            namespace: self.namespace.clone(),
            port: Some(self.port),
        }
    }

    /// Removes every series recorded for this endpoint.
    fn remove_series(&self, families: &Families, pool: &LabelValue) {
        let (p, e) = (&families.pool, &families.epp);
        p.gie_pod_queue.remove(&PodQueueLabels { name: pool.clone(), model_server_pod: self.name.clone() });
        p.llmd_endpoint_queue
            .remove(&EndpointQueueLabels { name: pool.clone(), model_server_endpoint: self.name.clone() });
        for producer in self.producers.read().unwrap_or_else(PoisonError::into_inner).iter() {
            let labels = self.inflight_labels(producer);
            e.inflight_requests.remove(&labels);
            e.inflight_tokens.remove(&labels);
        }
        for target in self.targets.read().unwrap_or_else(PoisonError::into_inner).iter() {
            let labels = self.attempt_labels(target);
            e.llmd_attempts.remove(&LlmdAttemptLabels::from(&labels));
            e.gie_attempts.remove(&labels);
        }
    }
}

/// The endpoints that currently have per-endpoint series, by name.
#[derive(Debug, Default)]
pub struct EndpointSeries {
    by_name: RwLock<HashMap<LabelValue, TrackedEndpoint>>,
}

impl EndpointSeries {
    /// Runs `record` with the tracked entry of `endpoint`, registering it first if needed. An entry with
    /// the same name but another namespace or port is a different endpoint: its series go first.
    pub fn with<R>(
        &self,
        endpoint: &Endpoint,
        families: &Families,
        pool: &LabelValue,
        record: impl FnOnce(&TrackedEndpoint) -> R,
    ) -> R {
        {
            let map = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(tracked) = map.get(endpoint.name.as_str()).filter(|t| t.is(endpoint)) {
                return record(tracked);
            }
        }
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let tracked = Self::entry(&mut map, endpoint, families, pool);
        record(tracked)
    }

    fn entry<'m>(
        map: &'m mut HashMap<LabelValue, TrackedEndpoint>,
        endpoint: &Endpoint,
        families: &Families,
        pool: &LabelValue,
    ) -> &'m TrackedEndpoint {
        let name = endpoint.name.as_str();
        if map.get(name).is_some_and(|t| !t.is(endpoint)) {
            if let Some(old) = map.remove(name) {
                old.remove_series(families, pool);
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
    pub fn remove(&self, endpoint: &Endpoint, families: &Families, pool: &LabelValue) {
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        if map.get(endpoint.name.as_str()).is_some_and(|t| t.is(endpoint)) {
            if let Some(tracked) = map.remove(endpoint.name.as_str()) {
                tracked.remove_series(families, pool);
            }
        }
    }

    /// Publishes the pool aggregates and per-endpoint queue sizes, and removes the series of every tracked
    /// endpoint not in `endpoints`.
    pub fn update_pool(
        &self,
        endpoints: &[std::sync::Arc<Endpoint>],
        families: &Families,
        pool: &LabelValue,
        now: Instant,
        staleness: Duration,
    ) {
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let current: HashSet<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
        map.retain(|name, tracked| {
            let keep = current.contains(name.as_str());
            if !keep {
                tracked.remove_series(families, pool);
            }
            keep
        });

        let p = &families.pool;
        let mut fresh: Vec<std::sync::Arc<EndpointMetrics>> = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let telemetry = endpoint.metrics();
            let tracked = Self::entry(&mut map, endpoint, families, pool);
            let queue = i64::try_from(telemetry.waiting_queue_size).unwrap_or(i64::MAX);
            p.gie_pod_queue
                .get_or_create(&PodQueueLabels { name: pool.clone(), model_server_pod: tracked.name.clone() })
                .set(queue);
            p.llmd_endpoint_queue
                .get_or_create(&EndpointQueueLabels {
                    name: pool.clone(),
                    model_server_endpoint: tracked.name.clone(),
                })
                .set(queue);
            if !telemetry.is_stale(now, staleness) {
                fresh.push(telemetry);
            }
        }
        drop(map);

        let labels = PoolLabels { name: pool.clone() };
        let ready = i64::try_from(fresh.len()).unwrap_or(i64::MAX);
        p.gie_ready.get_or_create(&labels).set(ready);
        p.llmd_ready.get_or_create(&labels).set(ready);
        // As in the Go EPP, the aggregates keep their last values while no endpoint has fresh telemetry.
        let Some(summary) = PoolSummary::of(&fresh) else { return };
        let set = |family: &prometheus_client::metrics::family::Family<PoolLabels, FloatGauge>, v: f64| {
            family.get_or_create(&labels).set(v);
        };
        set(&p.gie_avg_kv_cache, summary.kv_cache.mean);
        set(&p.gie_avg_queue, summary.queue.mean);
        set(&p.gie_avg_running, summary.running.mean);
        set(&p.llmd_avg_kv_cache, summary.kv_cache.mean);
        set(&p.llmd_avg_queue, summary.queue.mean);
        set(&p.llmd_avg_running, summary.running.mean);
        set(&p.llmd_std_kv_cache, summary.kv_cache.std_dev);
        set(&p.llmd_std_queue, summary.queue.std_dev);
        set(&p.llmd_std_running, summary.running.std_dev);
    }

    #[cfg(test)]
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
    pub fn of(fresh: &[std::sync::Arc<EndpointMetrics>]) -> Option<Self> {
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
