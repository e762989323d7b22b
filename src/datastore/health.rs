//! Passive health of one endpoint: outlier detection over the outcomes of the requests routed to it.
//!
//! Telemetry says how loaded an endpoint is; it cannot say that the endpoint fails. A replica that refuses
//! connections or answers 500 at once looks idle (its queue is empty), so every load-aware scorer prefers
//! it. This record is the circuit breaker that takes such an endpoint out, as Envoy's outlier detection
//! (`envoyproxy/envoy:source/extensions/outlier_detection_monitors/`, `consecutive_5xx`,
//! `failure_percentage_*`, `base_ejection_time` doubling up to `max_ejection_time`) and SMG's per-worker
//! breaker (`smg-project/smg:src/core/circuit_breaker.rs`: closed → open → half-open) do:
//!
//! - **closed**: outcomes are counted; `consecutive_failures` failures in a row, or a failure rate of at
//!   least `failure_rate_threshold` among the last [`RATE_WINDOW_REQUESTS`] outcomes within
//!   `failure_rate_window` (at least `failure_rate_min_requests` of them), eject it. The window is capped
//!   in requests as well as in time so that at a high request rate a replica that starts failing is caught
//!   within a few dozen requests, not after its healthy past has aged out of ten seconds;
//! - **open**: ejected until `base_ejection × 2^(n−1)` (capped at `max_ejection`) has passed, `n` counting
//!   the ejections since it last stayed healthy for `max_ejection`;
//! - **half-open**: one probe request at a time may go; `probe_successes` successes close it, a failure
//!   re-ejects it with the next backoff.
//!
//! Like telemetry, the record lives on the endpoint, so the candidate filter reads it without a lookup:
//! the read is two atomics, lock-free; outcomes (one per response) take a short per-endpoint mutex. Every
//! method takes `now`, so the state machine is tested without a clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The breaker's thresholds (the `endpointHealth` config block).
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    /// Failures in a row that eject (0: never by count).
    pub consecutive_failures: u32,
    /// Failure fraction over the window (the last `failure_rate_window`, at most the last
    /// [`RATE_WINDOW_REQUESTS`] outcomes) that ejects, in (0, 1]; ignored while the window holds fewer than
    /// `failure_rate_min_requests` (≤ [`RATE_WINDOW_REQUESTS`]) outcomes.
    pub failure_rate_threshold: f64,
    pub failure_rate_min_requests: u32,
    pub failure_rate_window: Duration,
    pub base_ejection: Duration,
    pub max_ejection: Duration,
    /// Probe successes that close a half-open breaker.
    pub probe_successes: u32,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            failure_rate_threshold: 0.3,
            failure_rate_min_requests: 20,
            failure_rate_window: Duration::from_secs(10),
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(60),
            probe_successes: 2,
        }
    }
}

/// How a routed request went, as far as the endpoint's health is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Response headers with a status below 500.
    Success,
    /// A 5xx at response headers (Envoy's own 503 for a refused or reset connection included).
    Failure,
}

/// Why an endpoint was ejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EjectionReason {
    ConsecutiveFailures,
    FailureRate,
    ProbeFailed,
}

impl EjectionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConsecutiveFailures => "consecutive_failures",
            Self::FailureRate => "failure_rate",
            Self::ProbeFailed => "probe_failed",
        }
    }
}

/// A change of breaker state an outcome caused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transition {
    Ejected { reason: EjectionReason, duration: Duration, ejections: u32 },
    Restored,
}

/// The breaker state a reader sees at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Ejected; no request may go.
    Open,
    /// The ejection expired: a probe may go (none is in flight).
    HalfOpen,
    /// The ejection expired and a probe is in flight: nothing else may go until it answers.
    Probing,
}

/// The failure rate is taken over at most this many of the latest outcomes.
pub const RATE_WINDOW_REQUESTS: usize = 64;

/// The latest outcomes, oldest overwritten first: `(ns since the epoch) << 1 | failed`, 0 = empty.
#[derive(Debug, Clone, Copy)]
struct Recent {
    outcomes: [u64; RATE_WINDOW_REQUESTS],
    next: usize,
}

impl Default for Recent {
    fn default() -> Self {
        Self { outcomes: [0; RATE_WINDOW_REQUESTS], next: 0 }
    }
}

impl Recent {
    fn push(&mut self, t: u64, failed: bool) {
        // `| 2` keeps an outcome at t = 0 distinct from an empty slot.
        self.outcomes[self.next] = (t << 1) | 2 | u64::from(failed);
        self.next = (self.next + 1) % RATE_WINDOW_REQUESTS;
    }

    /// (outcomes, failures) at or after `since`.
    fn since(&self, since: u64) -> (u32, u32) {
        self.outcomes
            .iter()
            .filter(|&&o| o != 0 && (o >> 1) >= since)
            .fold((0, 0), |(n, f), &o| (n + 1, f + u32::from(o & 1 == 1)))
    }
}

#[derive(Debug, Default)]
struct Record {
    consecutive_failures: u32,
    recent: Recent,
    /// Ejections since the endpoint last stayed healthy for `max_ejection` (sets the backoff).
    ejections: u32,
    probe_successes: u32,
    /// When the breaker last closed (ns since the epoch).
    restored_at: u64,
}

/// One endpoint's breaker.
#[derive(Debug)]
pub struct EndpointHealth {
    epoch: Instant,
    /// True while ejected or half-open.
    ejected: AtomicBool,
    /// End of the current ejection, ns since `epoch`.
    ejected_until: AtomicU64,
    probe_in_flight: AtomicBool,
    record: Mutex<Record>,
}

impl EndpointHealth {
    pub fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            ejected: AtomicBool::new(false),
            ejected_until: AtomicU64::new(0),
            probe_in_flight: AtomicBool::new(false),
            record: Mutex::new(Record::default()),
        }
    }

    fn nanos(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The state at `now`; lock-free.
    pub fn state(&self, now: Instant) -> BreakerState {
        if !self.ejected.load(Ordering::Acquire) {
            return BreakerState::Closed;
        }
        if self.nanos(now) < self.ejected_until.load(Ordering::Acquire) {
            BreakerState::Open
        } else if self.probe_in_flight.load(Ordering::Acquire) {
            BreakerState::Probing
        } else {
            BreakerState::HalfOpen
        }
    }

    /// A request was dispatched here; true when it is the half-open probe (its outcome decides). Racing
    /// dispatches that both saw `HalfOpen` get one probe between them; the other is an ordinary request.
    pub fn on_dispatch(&self, now: Instant) -> bool {
        self.state(now) == BreakerState::HalfOpen
            && self.probe_in_flight.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The probe ended without an outcome (cancelled before response headers): another may go.
    pub fn release_probe(&self) {
        self.probe_in_flight.store(false, Ordering::Release);
    }

    /// Counts an outcome; returns the transition it caused, if any.
    pub fn record(
        &self,
        outcome: Outcome,
        probe: bool,
        policy: &BreakerPolicy,
        now: Instant,
    ) -> Option<Transition> {
        let t = self.nanos(now);
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let transition = match self.state(now) {
            // Requests dispatched before the ejection still answer; they say nothing new.
            BreakerState::Open => None,
            BreakerState::HalfOpen | BreakerState::Probing => match outcome {
                Outcome::Success => {
                    record.probe_successes += 1;
                    if record.probe_successes >= policy.probe_successes.max(1) {
                        record.consecutive_failures = 0;
                        record.recent = Recent::default();
                        record.restored_at = t;
                        self.ejected.store(false, Ordering::Release);
                        Some(Transition::Restored)
                    } else {
                        None
                    }
                }
                Outcome::Failure => Some(self.eject(&mut record, EjectionReason::ProbeFailed, policy, t)),
            },
            BreakerState::Closed => self.count(&mut record, outcome, policy, t),
        };
        if probe || transition.is_some() {
            self.probe_in_flight.store(false, Ordering::Release);
        }
        transition
    }

    fn count(
        &self,
        record: &mut Record,
        outcome: Outcome,
        policy: &BreakerPolicy,
        t: u64,
    ) -> Option<Transition> {
        record.recent.push(t, outcome == Outcome::Failure);
        match outcome {
            Outcome::Success => {
                record.consecutive_failures = 0;
                return None;
            }
            Outcome::Failure => {
                record.consecutive_failures = record.consecutive_failures.saturating_add(1);
            }
        }
        if policy.consecutive_failures > 0 && record.consecutive_failures >= policy.consecutive_failures {
            return Some(self.eject(record, EjectionReason::ConsecutiveFailures, policy, t));
        }
        let (total, failed) = record.recent.since(t.saturating_sub(nanos_of(policy.failure_rate_window)));
        if total >= policy.failure_rate_min_requests.max(1)
            && f64::from(failed) >= policy.failure_rate_threshold * f64::from(total)
        {
            return Some(self.eject(record, EjectionReason::FailureRate, policy, t));
        }
        None
    }

    fn eject(
        &self,
        record: &mut Record,
        reason: EjectionReason,
        policy: &BreakerPolicy,
        t: u64,
    ) -> Transition {
        let max = policy.max_ejection.max(policy.base_ejection);
        // Healthy for a whole max ejection since it last closed: the backoff starts over.
        let restored_for = t.saturating_sub(record.restored_at);
        if record.ejections > 0 && reason != EjectionReason::ProbeFailed && restored_for > nanos_of(max) {
            record.ejections = 0;
        }
        record.ejections = record.ejections.saturating_add(1);
        let doublings = record.ejections.saturating_sub(1).min(30);
        let duration = policy.base_ejection.saturating_mul(1u32 << doublings).min(max);
        record.consecutive_failures = 0;
        record.probe_successes = 0;
        record.recent = Recent::default();
        self.ejected_until.store(t.saturating_add(nanos_of(duration)), Ordering::Release);
        self.ejected.store(true, Ordering::Release);
        Transition::Ejected { reason, duration, ejections: record.ejections }
    }
}

fn nanos_of(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
