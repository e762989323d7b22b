use super::*;

fn policy() -> BreakerPolicy {
    BreakerPolicy {
        consecutive_failures: 3,
        failure_rate_threshold: 0.5,
        failure_rate_min_requests: 10,
        failure_rate_window: Duration::from_secs(10),
        base_ejection: Duration::from_secs(1),
        max_ejection: Duration::from_secs(4),
        probe_successes: 2,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn consecutive_failures_eject_and_a_success_resets_the_run() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = policy();
    assert_eq!(h.record(Outcome::Failure, false, &p, t0), None);
    assert_eq!(h.record(Outcome::Failure, false, &p, t0), None);
    assert_eq!(h.record(Outcome::Success, false, &p, t0), None);
    assert_eq!(h.record(Outcome::Failure, false, &p, t0), None);
    assert_eq!(h.record(Outcome::Failure, false, &p, t0), None);
    assert_eq!(h.state(t0), BreakerState::Closed);
    let t = h.record(Outcome::Failure, false, &p, t0);
    assert_eq!(
        t,
        Some(Transition::Ejected {
            reason: EjectionReason::ConsecutiveFailures,
            duration: Duration::from_secs(1),
            ejections: 1
        })
    );
    assert_eq!(h.state(t0), BreakerState::Open);
    assert_eq!(h.state(t0 + ms(999)), BreakerState::Open);
    assert_eq!(h.state(t0 + ms(1000)), BreakerState::HalfOpen);
}

#[test]
fn a_failure_rate_ejects_once_enough_requests_were_seen() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = BreakerPolicy { consecutive_failures: 0, ..policy() };
    // Alternating success and failure: never two failures in a row, 50 % failed.
    for i in 0..9 {
        let outcome = if i % 2 == 0 { Outcome::Failure } else { Outcome::Success };
        assert_eq!(h.record(outcome, false, &p, t0 + ms(i * 100)), None, "request {i}");
    }
    let t = h.record(Outcome::Success, false, &p, t0 + ms(900));
    assert_eq!(t, None, "successes never eject");
    let t = h.record(Outcome::Failure, false, &p, t0 + ms(1000));
    assert!(matches!(t, Some(Transition::Ejected { reason: EjectionReason::FailureRate, .. })), "{t:?}");
}

#[test]
fn old_outcomes_leave_the_window() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = BreakerPolicy { consecutive_failures: 0, failure_rate_min_requests: 4, ..policy() };
    for i in 0..3 {
        h.record(Outcome::Failure, false, &p, t0 + ms(i));
    }
    // 20 s later the three failures are out of the 10 s window: one more failure is 1 of 1, under the
    // minimum of 4 requests.
    assert_eq!(h.record(Outcome::Failure, false, &p, t0 + Duration::from_secs(20)), None);
    assert_eq!(h.state(t0 + Duration::from_secs(20)), BreakerState::Closed);
}

#[test]
fn one_probe_at_a_time_and_successes_close() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = policy();
    for _ in 0..3 {
        h.record(Outcome::Failure, false, &p, t0);
    }
    let later = t0 + ms(1500);
    assert_eq!(h.state(later), BreakerState::HalfOpen);
    assert!(h.on_dispatch(later), "the first dispatch is the probe");
    assert_eq!(h.state(later), BreakerState::Probing);
    assert!(!h.on_dispatch(later), "a second dispatch is not");
    assert_eq!(h.record(Outcome::Success, true, &p, later), None, "one of two successes");
    assert_eq!(h.state(later), BreakerState::HalfOpen, "the next probe may go");
    assert!(h.on_dispatch(later));
    assert_eq!(h.record(Outcome::Success, true, &p, later), Some(Transition::Restored));
    assert_eq!(h.state(later), BreakerState::Closed);
    assert!(!h.on_dispatch(later), "closed: no probe");
}

#[test]
fn a_failed_probe_doubles_the_ejection_up_to_the_cap() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = policy();
    for _ in 0..3 {
        h.record(Outcome::Failure, false, &p, t0);
    }
    let mut now = t0;
    for (n, secs) in [(2, 2), (3, 4), (4, 4)] {
        now += Duration::from_secs(5);
        assert!(h.on_dispatch(now));
        let t = h.record(Outcome::Failure, true, &p, now);
        assert_eq!(
            t,
            Some(Transition::Ejected {
                reason: EjectionReason::ProbeFailed,
                duration: Duration::from_secs(secs),
                ejections: n
            })
        );
        assert_eq!(
            h.state((now + Duration::from_secs(secs)).checked_sub(ms(1)).expect("after the epoch")),
            BreakerState::Open
        );
        assert_eq!(h.state(now + Duration::from_secs(secs)), BreakerState::HalfOpen);
    }
}

#[test]
fn a_released_probe_lets_another_go() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = policy();
    for _ in 0..3 {
        h.record(Outcome::Failure, false, &p, t0);
    }
    let later = t0 + Duration::from_secs(2);
    assert!(h.on_dispatch(later));
    h.release_probe();
    assert_eq!(h.state(later), BreakerState::HalfOpen);
}

#[test]
fn outcomes_while_open_are_ignored() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = policy();
    for _ in 0..3 {
        h.record(Outcome::Failure, false, &p, t0);
    }
    assert_eq!(h.record(Outcome::Success, false, &p, t0 + ms(10)), None);
    assert_eq!(h.record(Outcome::Failure, false, &p, t0 + ms(10)), None);
    assert_eq!(h.state(t0 + ms(10)), BreakerState::Open);
}

#[test]
fn the_backoff_starts_over_after_a_healthy_spell() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = policy();
    let eject = |now| (0..3).filter_map(|_| h.record(Outcome::Failure, false, &p, now)).next();
    assert!(matches!(eject(t0), Some(Transition::Ejected { ejections: 1, .. })));
    let t1 = t0 + Duration::from_secs(2);
    h.record(Outcome::Success, false, &p, t1);
    assert_eq!(h.record(Outcome::Success, false, &p, t1), Some(Transition::Restored));
    // Ejected again soon after: the backoff continues.
    let t2 = t1 + Duration::from_secs(1);
    assert!(matches!(eject(t2), Some(Transition::Ejected { ejections: 2, .. })));
    let t3 = t2 + Duration::from_secs(3);
    h.record(Outcome::Success, false, &p, t3);
    assert_eq!(h.record(Outcome::Success, false, &p, t3), Some(Transition::Restored));
    // Healthy for longer than the 4 s max ejection: it starts over at the base.
    let t4 = t3 + Duration::from_secs(10);
    assert_eq!(
        eject(t4),
        Some(Transition::Ejected {
            reason: EjectionReason::ConsecutiveFailures,
            duration: Duration::from_secs(1),
            ejections: 1
        })
    );
}

#[test]
fn a_long_healthy_past_does_not_hide_a_replica_that_starts_failing() {
    let t0 = Instant::now();
    let h = EndpointHealth::new(t0);
    let p = BreakerPolicy {
        consecutive_failures: 0,
        failure_rate_threshold: 0.3,
        failure_rate_min_requests: 20,
        ..policy()
    };
    // 2,000 successes in the last second: far more than the 64 outcomes the rate is taken over.
    for i in 0..2000 {
        h.record(Outcome::Success, false, &p, t0 + Duration::from_micros(i * 500));
    }
    let start = t0 + Duration::from_secs(1);
    let ejected_after = (0..200u64).find(|i| {
        let outcome = if i % 2 == 0 { Outcome::Failure } else { Outcome::Success };
        h.record(outcome, false, &p, start + Duration::from_micros(i * 500)).is_some()
    });
    let n = ejected_after.expect("ejected");
    assert!(n < 64, "ejected only after {n} requests");
}
