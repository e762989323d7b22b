//! Faults a test injects into one backend through `POST /admin/faults` (partial updates, like
//! `/admin/metrics`): a `/metrics` page that hangs, is garbage, or is slow, and API requests that fail.
//!
//! Why: epp's endpoint health must take out a replica whose telemetry freezes or whose requests fail, and
//! the fault-matrix tests need those failures on demand and deterministic (every Nth request, not a coin).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What `/metrics` does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MetricsFault {
    #[default]
    Ok,
    /// Never answers (the connection stays open).
    Hang,
    /// Answers 200 with a page that is not the exposition format.
    Garbage,
}

/// The injected faults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Faults {
    metrics: MetricsFault,
    /// Delay before `/metrics` answers.
    metrics_delay_ms: u64,
    /// Every Nth API request answers 500 (0: none; 2: every other one).
    fail_every: u64,
}

impl Faults {
    /// Overlays the keys of `update` (a JSON object) on these faults; unknown keys are an error.
    pub(crate) fn merged(&self, update: &Value) -> Result<Self, String> {
        let Value::Object(update) = update else { return Err("expected a JSON object".into()) };
        let mut current = serde_json::to_value(self).map_err(|e| e.to_string())?;
        if let Value::Object(fields) = &mut current {
            for (key, value) in update {
                fields.insert(key.clone(), value.clone());
            }
        }
        serde_json::from_value(current).map_err(|e| e.to_string())
    }

    pub(crate) fn metrics(&self) -> MetricsFault {
        self.metrics
    }

    pub(crate) fn metrics_delay(&self) -> Duration {
        Duration::from_millis(self.metrics_delay_ms)
    }

    /// Whether API request number `n` (counting from 1, per backend) fails.
    pub(crate) fn fails(&self, counter: &AtomicU64) -> bool {
        self.fail_every > 0 && (counter.fetch_add(1, Ordering::SeqCst) + 1).is_multiple_of(self.fail_every)
    }
}

/// A page a Prometheus text parser must reject.
pub(crate) const GARBAGE_PAGE: &str =
    "<html><body>502 Bad Gateway {{{ vllm:num_requests_waiting=\n\0\x01</body>";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn partial_updates_and_every_nth_failure() {
        let f = Faults::default().merged(&json!({"fail_every": 2})).unwrap();
        let f = f.merged(&json!({"metrics": "garbage"})).unwrap();
        assert_eq!(f.metrics(), MetricsFault::Garbage);
        let counter = AtomicU64::new(0);
        let fails: Vec<bool> = (0..4).map(|_| f.fails(&counter)).collect();
        assert_eq!(fails, [false, true, false, true]);
        assert!(f.merged(&json!({"failEvery": 2})).is_err());
        assert!(f.merged(&json!({"metrics": "slow"})).is_err());
    }
}
