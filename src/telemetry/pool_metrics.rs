//! The pool families, recomputed from the datastore's endpoints on a timer: averages and standard
//! deviations of KV-cache use, queue and running requests over endpoints with fresh telemetry, the ready
//! count, and a queue-size series per endpoint (`inference_pool_*`, `llm_d_epp_{average,std_dev}_*`,
//! `llm_d_epp_ready_endpoints`, `llm_d_epp_per_endpoint_queue_size`).
//!
//! The per-endpoint queue series go through the per-endpoint series index: each update removes every
//! tracked series of endpoints no longer in the pool, whichever component recorded them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::datastore::{Endpoint, EndpointTelemetry};
use crate::metrics::{
    alpha, EndpointQueueLabels, EndpointSeries, FloatGauge, MetricsRegistry, PodQueueLabels, PoolLabels,
    PoolSummary, SharedLabels,
};

/// The pool families, recomputed by [`PoolMetrics::update_pool`].
#[derive(Debug)]
pub struct PoolMetrics {
    labels: Arc<SharedLabels>,
    endpoints: Arc<EndpointSeries>,
    gie_avg_kv_cache: Family<PoolLabels, FloatGauge>,
    gie_avg_queue: Family<PoolLabels, FloatGauge>,
    gie_avg_running: Family<PoolLabels, FloatGauge>,
    gie_ready: Family<PoolLabels, Gauge>,
    gie_pod_queue: Family<PodQueueLabels, Gauge>,
    llmd_avg_kv_cache: Family<PoolLabels, FloatGauge>,
    llmd_avg_queue: Family<PoolLabels, FloatGauge>,
    llmd_avg_running: Family<PoolLabels, FloatGauge>,
    llmd_std_kv_cache: Family<PoolLabels, FloatGauge>,
    llmd_std_queue: Family<PoolLabels, FloatGauge>,
    llmd_std_running: Family<PoolLabels, FloatGauge>,
    llmd_ready: Family<PoolLabels, Gauge>,
    llmd_endpoint_queue: Family<EndpointQueueLabels, Gauge>,
}

impl PoolMetrics {
    /// Creates the families, registers them in `registry`, and prunes an endpoint's queue series when it
    /// leaves.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let m = Self {
            labels: registry.labels().clone(),
            endpoints: registry.endpoints().clone(),
            gie_avg_kv_cache: Family::default(),
            gie_avg_queue: Family::default(),
            gie_avg_running: Family::default(),
            gie_ready: Family::default(),
            gie_pod_queue: Family::default(),
            llmd_avg_kv_cache: Family::default(),
            llmd_avg_queue: Family::default(),
            llmd_avg_running: Family::default(),
            llmd_std_kv_cache: Family::default(),
            llmd_std_queue: Family::default(),
            llmd_std_running: Family::default(),
            llmd_ready: Family::default(),
            llmd_endpoint_queue: Family::default(),
        };
        let r = registry;
        r.register(
            "inference_pool_average_kv_cache_utilization",
            alpha("The average kv cache utilization for an inference server pool"),
            m.gie_avg_kv_cache.clone(),
        );
        r.register(
            "inference_pool_average_queue_size",
            alpha("The average number of requests pending in the model server queue"),
            m.gie_avg_queue.clone(),
        );
        r.register(
            "inference_pool_average_running_requests",
            alpha("The average number of running requests across model servers in the pool"),
            m.gie_avg_running.clone(),
        );
        r.register(
            "inference_pool_ready_pods",
            alpha("The number of ready pods in the inference server pool"),
            m.gie_ready.clone(),
        );
        r.register(
            "inference_pool_per_pod_queue_size",
            alpha("The total number of requests pending in the model server queue for each underlying pod"),
            m.gie_pod_queue.clone(),
        );
        r.register(
            "llm_d_epp_average_kv_cache_utilization",
            alpha("The average kv cache utilization for an inference server pool"),
            m.llmd_avg_kv_cache.clone(),
        );
        r.register(
            "llm_d_epp_average_queue_size",
            alpha("The average number of requests pending in the model server queue"),
            m.llmd_avg_queue.clone(),
        );
        r.register(
            "llm_d_epp_average_running_requests",
            alpha("The average number of running requests across model servers in the pool"),
            m.llmd_avg_running.clone(),
        );
        r.register(
            "llm_d_epp_std_dev_kv_cache_utilization",
            alpha("The standard deviation kv cache utilization for an inference server pool"),
            m.llmd_std_kv_cache.clone(),
        );
        r.register(
            "llm_d_epp_std_dev_queue_size",
            alpha("The standard deviation number of requests pending in the model server queue"),
            m.llmd_std_queue.clone(),
        );
        r.register(
            "llm_d_epp_std_dev_running_requests",
            alpha("The standard deviation number of running requests across model servers in the pool"),
            m.llmd_std_running.clone(),
        );
        r.register(
            "llm_d_epp_ready_endpoints",
            alpha("The number of ready endpoints in the inference server pool"),
            m.llmd_ready.clone(),
        );
        r.register(
            "llm_d_epp_per_endpoint_queue_size",
            alpha(
                "The total number of requests pending in the model server queue for each underlying endpoint",
            ),
            m.llmd_endpoint_queue.clone(),
        );
        let (gie, llmd, pool) =
            (m.gie_pod_queue.clone(), m.llmd_endpoint_queue.clone(), m.labels.pool.clone());
        m.endpoints.add_pruner(Box::new(move |tracked| {
            gie.remove(&PodQueueLabels { name: pool.clone(), model_server_pod: tracked.name.clone() });
            llmd.remove(&EndpointQueueLabels {
                name: pool.clone(),
                model_server_endpoint: tracked.name.clone(),
            });
        }));
        Arc::new(m)
    }

    /// Recomputes the pool gauges from the current endpoints: averages and standard deviations over the
    /// endpoints whose telemetry is at most `staleness` old at `now`, `ready` = how many those are, a
    /// queue-size series per current endpoint; series of endpoints no longer listed are removed.
    pub fn update_pool(&self, endpoints: &[Arc<Endpoint>], now: Instant, staleness: Duration) {
        let pool = &self.labels.pool;
        let mut fresh: Vec<Arc<EndpointTelemetry>> = Vec::with_capacity(endpoints.len());
        self.endpoints.retain(endpoints, |endpoint, tracked| {
            let telemetry = endpoint.telemetry();
            let queue = i64::try_from(telemetry.waiting_queue_size).unwrap_or(i64::MAX);
            self.gie_pod_queue
                .get_or_create(&PodQueueLabels { name: pool.clone(), model_server_pod: tracked.name.clone() })
                .set(queue);
            self.llmd_endpoint_queue
                .get_or_create(&EndpointQueueLabels {
                    name: pool.clone(),
                    model_server_endpoint: tracked.name.clone(),
                })
                .set(queue);
            if !telemetry.is_stale(now, staleness) {
                fresh.push(telemetry);
            }
        });
        let labels = PoolLabels { name: pool.clone() };
        let ready = i64::try_from(fresh.len()).unwrap_or(i64::MAX);
        self.gie_ready.get_or_create(&labels).set(ready);
        self.llmd_ready.get_or_create(&labels).set(ready);
        // As in the Go EPP, the aggregates keep their last values while no endpoint has fresh telemetry.
        let Some(summary) = PoolSummary::of(&fresh) else { return };
        let set = |family: &Family<PoolLabels, FloatGauge>, v: f64| {
            family.get_or_create(&labels).set(v);
        };
        set(&self.gie_avg_kv_cache, summary.kv_cache.mean);
        set(&self.gie_avg_queue, summary.queue.mean);
        set(&self.gie_avg_running, summary.running.mean);
        set(&self.llmd_avg_kv_cache, summary.kv_cache.mean);
        set(&self.llmd_avg_queue, summary.queue.mean);
        set(&self.llmd_avg_running, summary.running.mean);
        set(&self.llmd_std_kv_cache, summary.kv_cache.std_dev);
        set(&self.llmd_std_queue, summary.queue.std_dev);
        set(&self.llmd_std_running, summary.running.std_dev);
    }
}
