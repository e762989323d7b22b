//! Endpoint health: which endpoints may receive requests now, whatever the scheduling profile.
//!
//! A dead or failing replica is attractive to every load-aware scorer: its last telemetry says "idle"
//! forever, and a replica that fails fast never builds a queue. So before scheduling, the director drops
//! from the candidates every endpoint that is
//!
//! - **stale**: no successful scrape for longer than the staleness threshold (the scrape failed, timed
//!   out, or returned a page that did not parse; an endpoint never scraped counts from when it joined), or
//! - **ejected** by its circuit breaker ([`crate::datastore::EndpointHealth`]): its requests failed (5xx
//!   at response headers, Envoy's 503 for a refused connection included) too often in a row or by rate,
//!   and its ejection has not expired, or its half-open probe is still in flight.
//!
//! When that would leave no candidate, the request goes to the full set (fail open, counted): a fleet-wide
//! scrape outage must not halt serving (the Go EPP's fail-closed staleness does, llm-d-router PR #2547).
//! The Go EPP leans on Kubernetes readiness for this; epp also runs with static endpoints, and readiness
//! lags a SIGKILL by seconds.

mod metrics;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::datastore::{BreakerPolicy, BreakerState, Endpoint, Outcome, Transition};
use crate::metrics::MetricsRegistry;

pub use metrics::HealthMetrics;

/// The `endpointHealth` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSettings {
    /// false: every endpoint is a candidate, as before this existed.
    pub enabled: bool,
    /// Telemetry older than this takes the endpoint out (`Duration::ZERO`: never).
    pub staleness: Duration,
    pub breaker: BreakerPolicy,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self { enabled: true, staleness: DEFAULT_STALENESS, breaker: BreakerPolicy::default() }
    }
}

/// The default staleness threshold, `--metrics-staleness-threshold`'s default (upstream
/// kubernetes-sigs/gateway-api-inference-extension:cmd/epp/runner/runner.go): forty missed 50 ms scrapes.
pub const DEFAULT_STALENESS: Duration = Duration::from_secs(2);

/// What [`HealthMonitor::exclude`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exclusion {
    /// The endpoints that may not receive a request were dropped (possibly none).
    Applied,
    /// None may, so none was dropped: health fails open rather than halt serving.
    FailedOpen,
}

/// What an endpoint is, health-wise, at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthState {
    Healthy,
    /// No fresh telemetry.
    Stale,
    /// Ejected by its breaker.
    Ejected,
    /// Half-open: its ejection expired; probe requests decide.
    Probing,
}

impl HealthState {
    pub const ALL: [HealthState; 4] = [Self::Healthy, Self::Stale, Self::Ejected, Self::Probing];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Stale => "stale",
            Self::Ejected => "ejected",
            Self::Probing => "probing",
        }
    }
}

/// Filters candidates by health and feeds each endpoint's breaker.
#[derive(Debug)]
pub struct HealthMonitor {
    settings: HealthSettings,
    metrics: Arc<HealthMetrics>,
    /// The states last published, for logging transitions that happen with time (staleness, an ejection
    /// expiring); only the periodic refresh touches it.
    published: Mutex<HashMap<usize, (Arc<Endpoint>, HealthState)>>,
}

impl HealthMonitor {
    pub fn new(settings: HealthSettings, registry: &MetricsRegistry) -> Arc<Self> {
        Arc::new(Self { settings, metrics: HealthMetrics::register(registry), published: Mutex::default() })
    }

    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// The endpoint's state at `now`.
    pub fn state(&self, endpoint: &Endpoint, now: Instant) -> HealthState {
        if !self.settings.enabled {
            return HealthState::Healthy;
        }
        match endpoint.health().state(now) {
            BreakerState::Open => return HealthState::Ejected,
            BreakerState::HalfOpen | BreakerState::Probing if !self.is_stale(endpoint, now) => {
                return HealthState::Probing
            }
            _ => {}
        }
        if self.is_stale(endpoint, now) {
            HealthState::Stale
        } else {
            HealthState::Healthy
        }
    }

    fn is_stale(&self, endpoint: &Endpoint, now: Instant) -> bool {
        !self.settings.staleness.is_zero() && endpoint.telemetry_age(now) > self.settings.staleness
    }

    /// Whether a request may go to `endpoint` at `now`.
    pub fn admits(&self, endpoint: &Endpoint, now: Instant) -> bool {
        if !self.settings.enabled {
            return true;
        }
        let breaker_admits =
            matches!(endpoint.health().state(now), BreakerState::Closed | BreakerState::HalfOpen);
        breaker_admits && !self.is_stale(endpoint, now)
    }

    /// Drops the endpoints that may not receive a request now; keeps them all when none may (fail open,
    /// counted in `epp_endpoint_health_fail_open_total`).
    pub fn retain_admitted(&self, candidates: &mut Vec<Arc<Endpoint>>, now: Instant) {
        if self.exclude(candidates, now, &mut |_| {}) == Exclusion::FailedOpen {
            self.metrics.record_fail_open();
        }
    }

    /// The rule of [`retain_admitted`](Self::retain_admitted) without its counter, telling `excluded`
    /// each endpoint it drops (the route probe names them).
    pub fn exclude(
        &self,
        candidates: &mut Vec<Arc<Endpoint>>,
        now: Instant,
        excluded: &mut dyn FnMut(&Endpoint),
    ) -> Exclusion {
        if !self.settings.enabled || candidates.is_empty() {
            return Exclusion::Applied;
        }
        if !candidates.iter().any(|e| self.admits(e, now)) {
            return Exclusion::FailedOpen;
        }
        candidates.retain(|e| {
            let admitted = self.admits(e, now);
            if !admitted {
                excluded(e);
            }
            admitted
        });
        Exclusion::Applied
    }

    /// A request was dispatched to `endpoint`; true when it is the endpoint's half-open probe.
    pub fn on_dispatch(&self, endpoint: &Endpoint, now: Instant) -> bool {
        self.settings.enabled && endpoint.health().on_dispatch(now)
    }

    /// The response headers of a request routed to `endpoint` arrived with `status`; `served` is the
    /// endpoint Envoy reports it used. When Envoy served the request from a fallback, the primary failed
    /// (Envoy moves down the destination list only when an attempt fails); the fallback's own outcome is
    /// not counted, since it was not the endpoint this request's probe or breaker was about.
    pub fn on_response(
        &self,
        endpoint: &Endpoint,
        status: u16,
        served: Option<&str>,
        probe: bool,
        now: Instant,
    ) {
        if !self.settings.enabled {
            return;
        }
        let failed_over = served.is_some_and(|s| !s.is_empty() && s != endpoint.host_port);
        let outcome = if status >= 500 || failed_over { Outcome::Failure } else { Outcome::Success };
        if let Some(transition) = endpoint.health().record(outcome, probe, &self.settings.breaker, now) {
            self.on_transition(endpoint, transition, status);
        }
    }

    /// [`Self::on_response`] without a `served` report.
    pub fn on_status(&self, endpoint: &Endpoint, status: u16, probe: bool, now: Instant) {
        self.on_response(endpoint, status, None, probe, now);
    }

    /// A probe ended before its response headers (client cancel): it says nothing; another may go.
    pub fn on_probe_abandoned(&self, endpoint: &Endpoint) {
        endpoint.health().release_probe();
    }

    fn on_transition(&self, endpoint: &Endpoint, transition: Transition, status: u16) {
        match transition {
            Transition::Ejected { reason, duration, ejections } => {
                self.metrics.record_ejection(endpoint, reason);
                tracing::warn!(
                    endpoint = %endpoint.name,
                    address = %endpoint.host_port,
                    reason = reason.as_str(),
                    last_status = status,
                    ejected_for = ?duration,
                    ejections,
                    "endpoint ejected: no requests until the ejection expires and a probe succeeds"
                );
            }
            Transition::Restored => {
                tracing::info!(endpoint = %endpoint.name, address = %endpoint.host_port, "endpoint restored");
            }
        }
    }

    /// Publishes every endpoint's state as a gauge and logs the changes time made (staleness, expiry);
    /// forgets endpoints no longer listed. Called on a timer.
    pub fn refresh(&self, endpoints: &[Arc<Endpoint>], now: Instant) {
        if !self.settings.enabled {
            return;
        }
        let mut published = self.published.lock().unwrap_or_else(PoisonError::into_inner);
        published.retain(|key, _| endpoints.iter().any(|e| Arc::as_ptr(e) as usize == *key));
        for endpoint in endpoints {
            let state = self.state(endpoint, now);
            let key = Arc::as_ptr(endpoint) as usize;
            let before = published.insert(key, (endpoint.clone(), state)).map(|(_, s)| s);
            if before != Some(state) {
                self.metrics.set_state(endpoint, state);
                if before.is_some() || state != HealthState::Healthy {
                    log_state_change(endpoint, before, state, endpoint.telemetry_age(now));
                }
            }
        }
    }
}

fn log_state_change(endpoint: &Endpoint, before: Option<HealthState>, state: HealthState, age: Duration) {
    let before = before.map_or("new", HealthState::as_str);
    match state {
        HealthState::Stale => tracing::warn!(
            endpoint = %endpoint.name,
            address = %endpoint.host_port,
            before,
            telemetry_age = ?age,
            "endpoint stale: no successful scrape within the staleness threshold; no requests until one succeeds"
        ),
        _ => tracing::info!(
            endpoint = %endpoint.name,
            address = %endpoint.host_port,
            before,
            state = state.as_str(),
            "endpoint health changed"
        ),
    }
}

#[cfg(test)]
mod tests;
