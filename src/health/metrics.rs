//! The health families (epp's own; the Go EPP has none):
//!
//! - `epp_endpoint_health_state{name, model_server_endpoint, state}`: 1 for the endpoint's current state
//!   (`healthy`, `stale`, `ejected`, `probing`), 0 for the others, refreshed on a timer;
//! - `epp_endpoint_ejections_total{name, model_server_endpoint, reason}`: breaker ejections
//!   (`consecutive_failures`, `failure_rate`, `probe_failed`);
//! - `epp_endpoint_health_fail_open_total{name}`: requests sent to the full candidate set because every
//!   candidate was out.
//!
//! Per-endpoint series go through the per-endpoint series index, so a departing endpoint's series go too.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::HealthState;
use crate::datastore::{EjectionReason, Endpoint};
use crate::metrics::{EndpointSeries, LabelValue, MetricsRegistry, PoolLabels, SharedLabels};

const REASONS: [EjectionReason; 3] =
    [EjectionReason::ConsecutiveFailures, EjectionReason::FailureRate, EjectionReason::ProbeFailed];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    name: LabelValue,
    model_server_endpoint: LabelValue,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EjectionLabels {
    name: LabelValue,
    model_server_endpoint: LabelValue,
    reason: &'static str,
}

/// The health families.
#[derive(Debug)]
pub struct HealthMetrics {
    labels: Arc<SharedLabels>,
    endpoints: Arc<EndpointSeries>,
    state: Family<StateLabels, Gauge>,
    ejections: Family<EjectionLabels, Counter>,
    fail_open: Family<PoolLabels, Counter>,
}

impl HealthMetrics {
    /// Creates the families, registers them in `registry`, and prunes a departing endpoint's series.
    pub fn register(registry: &MetricsRegistry) -> Arc<Self> {
        let m = Self {
            labels: registry.labels().clone(),
            endpoints: registry.endpoints().clone(),
            state: Family::default(),
            ejections: Family::default(),
            fail_open: Family::default(),
        };
        registry.register(
            "epp_endpoint_health_state",
            "1 for the endpoint's current health state (healthy, stale, ejected, probing), 0 for the others",
            m.state.clone(),
        );
        registry.register(
            "epp_endpoint_ejections",
            "Times the endpoint's circuit breaker ejected it, by reason",
            m.ejections.clone(),
        );
        registry.register(
            "epp_endpoint_health_fail_open",
            "Requests routed to every candidate because all of them were stale or ejected",
            m.fail_open.clone(),
        );
        let (state, ejections, pool) = (m.state.clone(), m.ejections.clone(), m.labels.pool.clone());
        m.endpoints.add_pruner(Box::new(move |tracked| {
            let endpoint = &tracked.name;
            for s in HealthState::ALL {
                state.remove(&StateLabels {
                    name: pool.clone(),
                    model_server_endpoint: endpoint.clone(),
                    state: s.as_str(),
                });
            }
            for reason in REASONS {
                ejections.remove(&EjectionLabels {
                    name: pool.clone(),
                    model_server_endpoint: endpoint.clone(),
                    reason: reason.as_str(),
                });
            }
        }));
        Arc::new(m)
    }

    /// Sets the endpoint's state series: 1 for `current`, 0 for the others.
    pub fn set_state(&self, endpoint: &Endpoint, current: HealthState) {
        self.endpoints.with(endpoint, |tracked| {
            for s in HealthState::ALL {
                let labels = StateLabels {
                    name: self.labels.pool.clone(),
                    model_server_endpoint: tracked.name.clone(),
                    state: s.as_str(),
                };
                self.state.get_or_create(&labels).set(i64::from(s == current));
            }
        });
    }

    pub fn record_ejection(&self, endpoint: &Endpoint, reason: EjectionReason) {
        self.endpoints.with(endpoint, |tracked| {
            let labels = EjectionLabels {
                name: self.labels.pool.clone(),
                model_server_endpoint: tracked.name.clone(),
                reason: reason.as_str(),
            };
            self.ejections.get_or_create(&labels).inc();
        });
    }

    pub fn record_fail_open(&self) {
        self.fail_open.get_or_create(&PoolLabels { name: self.labels.pool.clone() }).inc();
    }
}
