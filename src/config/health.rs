//! `endpointHealth` (epp extension): the staleness threshold and the circuit breaker's thresholds, with
//! the defaults of [`HealthSettings`] and every value checked, naming the field.

use std::time::Duration;

use serde::Deserialize;

use super::values::GoDuration;
use super::ConfigError;
use crate::datastore::{BreakerPolicy, RATE_WINDOW_REQUESTS};
use crate::health::HealthSettings;

/// `endpointHealth` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawEndpointHealth {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub staleness_threshold: Option<GoDuration>,
    #[serde(default)]
    pub consecutive_failures: Option<u32>,
    #[serde(default)]
    pub failure_rate_threshold: Option<f64>,
    #[serde(default)]
    pub failure_rate_minimum_requests: Option<u32>,
    #[serde(default)]
    pub failure_rate_window: Option<GoDuration>,
    #[serde(default)]
    pub base_ejection_time: Option<GoDuration>,
    #[serde(default)]
    pub max_ejection_time: Option<GoDuration>,
    #[serde(default)]
    pub probe_successes: Option<u32>,
}

fn invalid(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::invalid(format!("endpointHealth.{field}"), message)
}

fn positive(field: &str, value: Option<GoDuration>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(GoDuration(d)) if !d.is_zero() => Ok(d),
        Some(_) => Err(invalid(field, "must be a duration > 0")),
    }
}

/// Resolves the block; absent means every default (health on).
pub(crate) fn build_endpoint_health(raw: Option<&RawEndpointHealth>) -> Result<HealthSettings, ConfigError> {
    let defaults = HealthSettings::default();
    let Some(raw) = raw else { return Ok(defaults) };
    let d = &defaults.breaker;
    let failure_rate_threshold = match raw.failure_rate_threshold {
        None => d.failure_rate_threshold,
        Some(v) if v.is_finite() && v > 0.0 && v <= 1.0 => v,
        Some(v) => return Err(invalid("failureRateThreshold", format!("{v} must be in (0, 1]"))),
    };
    let at_least_one = |field: &str, v: Option<u32>, default: u32| match v {
        None => Ok(default),
        Some(0) => Err(invalid(field, "must be at least 1")),
        Some(v) => Ok(v),
    };
    let min_requests = at_least_one(
        "failureRateMinimumRequests",
        raw.failure_rate_minimum_requests,
        d.failure_rate_min_requests,
    )?;
    if min_requests as usize > RATE_WINDOW_REQUESTS {
        return Err(invalid(
            "failureRateMinimumRequests",
            format!("{min_requests} is more than the {RATE_WINDOW_REQUESTS} latest requests the rate is taken over"),
        ));
    }
    let base_ejection = positive("baseEjectionTime", raw.base_ejection_time, d.base_ejection)?;
    let max_ejection = positive("maxEjectionTime", raw.max_ejection_time, d.max_ejection.max(base_ejection))?;
    if max_ejection < base_ejection {
        return Err(invalid(
            "maxEjectionTime",
            format!("{max_ejection:?} is shorter than baseEjectionTime ({base_ejection:?})"),
        ));
    }
    let staleness = match raw.staleness_threshold {
        None => defaults.staleness,
        Some(GoDuration(d)) => d, // 0 turns the staleness check off
    };
    Ok(HealthSettings {
        enabled: raw.enabled.unwrap_or(defaults.enabled),
        staleness,
        breaker: BreakerPolicy {
            // 0 turns the consecutive-failure check off (the rate check remains).
            consecutive_failures: raw.consecutive_failures.unwrap_or(d.consecutive_failures),
            failure_rate_threshold,
            failure_rate_min_requests: min_requests,
            failure_rate_window: positive(
                "failureRateWindow",
                raw.failure_rate_window,
                d.failure_rate_window,
            )?,
            base_ejection,
            max_ejection,
            probe_successes: at_least_one("probeSuccesses", raw.probe_successes, d.probe_successes)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::parse_document;

    fn build(text: &str) -> Result<HealthSettings, ConfigError> {
        let raw = parse_document(text)?;
        build_endpoint_health(raw.endpoint_health.as_ref())
    }

    #[test]
    fn absent_block_is_on_with_defaults() {
        assert_eq!(build("{}\n").unwrap(), HealthSettings::default());
        assert!(HealthSettings::default().enabled);
    }

    #[test]
    fn values_are_read() {
        let s = build(
            "endpointHealth:\n  stalenessThreshold: 500ms\n  consecutiveFailures: 3\n  failureRateThreshold: 0.25\n  \
             failureRateMinimumRequests: 8\n  failureRateWindow: 30s\n  baseEjectionTime: 2s\n  maxEjectionTime: 1m\n  \
             probeSuccesses: 1\n",
        )
        .unwrap();
        assert_eq!(s.staleness, Duration::from_millis(500));
        let b = &s.breaker;
        assert_eq!(
            (b.consecutive_failures, b.failure_rate_threshold, b.failure_rate_min_requests),
            (3, 0.25, 8)
        );
        assert_eq!(
            (b.failure_rate_window, b.base_ejection),
            (Duration::from_secs(30), Duration::from_secs(2))
        );
        assert_eq!((b.max_ejection, b.probe_successes), (Duration::from_secs(60), 1));
        assert!(!build("endpointHealth: {enabled: false}\n").unwrap().enabled);
    }

    #[test]
    fn a_long_base_ejection_raises_the_default_max() {
        let s = build("endpointHealth: {baseEjectionTime: 5m}\n").unwrap();
        assert_eq!(s.breaker.max_ejection, Duration::from_secs(300));
    }

    #[test]
    fn bad_values_name_the_field() {
        for (bad, field) in [
            ("{failureRateThreshold: 0}", "failureRateThreshold"),
            ("{failureRateThreshold: 1.5}", "failureRateThreshold"),
            ("{failureRateThreshold: .nan}", "failureRateThreshold"),
            ("{failureRateMinimumRequests: 0}", "failureRateMinimumRequests"),
            ("{failureRateMinimumRequests: 65}", "failureRateMinimumRequests"),
            ("{probeSuccesses: 0}", "probeSuccesses"),
            ("{baseEjectionTime: 0s}", "baseEjectionTime"),
            ("{failureRateWindow: 0}", "failureRateWindow"),
            ("{baseEjectionTime: 10s, maxEjectionTime: 5s}", "maxEjectionTime"),
            ("{consecutiveFailures: -1}", "consecutiveFailures"),
            ("{stalenessThreshold: soon}", "stalenessThreshold"),
            ("{consecutive5xx: 3}", "consecutive5xx"),
        ] {
            let e = build(&format!("endpointHealth: {bad}\n")).unwrap_err().to_string();
            assert!(e.contains("endpointHealth") && e.contains(field), "{bad}: {e}");
        }
    }
}
