//! Replicas that die or fail: the breaker and the staleness check must take them out of the candidates,
//! and a replica that comes back must get traffic again.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::load::{after, errors, last_all_ok, served_by, ClosedLoop};
use crate::{Fleet, FAULT_WINDOW};
use epp_testkit::PROPAGATION_DEADLINE;

/// SIGKILL one of three replicas under a closed-loop load of 8: errors stop (a bounded count: the
/// requests in flight on it, and the few that fail before the breaker opens), the dead replica then gets
/// nothing, and once restarted on its port it is probed and serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_stops_drawing_traffic_and_returns_when_restarted() {
    let name = "a_killed_replica_stops_drawing_traffic_and_returns_when_restarted";
    let Some(mut fleet) = Fleet::start(name, 3, &[], &[]).await else { return };
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 8);
    assert!(load.wait_for(PROPAGATION_DEADLINE, |s| s.len() >= 100).await, "the load never got going");
    assert_eq!(errors(&load.snapshot()), 0, "errors before the fault");

    let killed_at = Instant::now();
    fleet.kill(1);
    let settled = load.wait_for(Duration::from_secs(30), |s| last_all_ok(&after(s, killed_at), 200)).await;
    let post = after(&load.snapshot(), killed_at);
    let failed = errors(&post);
    let last_error = post.iter().filter(|s| !s.ok()).map(|s| s.at - killed_at).max();
    eprintln!(
        "FIGURE killed replica: {failed} errors of {} requests after the kill; last error {last_error:?} after it",
        post.len()
    );
    assert!(settled, "errors never stopped: {failed} of {}", post.len());
    assert!(failed <= 40, "{failed} errors after the kill (the breaker should open after 5)");

    let quiet_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet = after(&load.snapshot(), quiet_from);
    assert_eq!(errors(&quiet), 0, "errors while the replica is dead");
    assert_eq!(served_by(&quiet, &fleet.id(1)), 0);

    let restarted_at = Instant::now();
    fleet.restart(1);
    let dead_id = fleet.id(1);
    let back =
        load.wait_for(PROPAGATION_DEADLINE, |s| served_by(&after(s, restarted_at), &dead_id) >= 10).await;
    let samples = load.stop().await;
    let since_restart = after(&samples, restarted_at);
    eprintln!(
        "FIGURE restarted replica: served {} of {} requests after the restart, {} errors",
        served_by(&since_restart, &dead_id),
        since_restart.len(),
        errors(&since_restart)
    );
    assert!(back, "the restarted replica never got traffic again");
    assert_eq!(errors(&since_restart), 0, "errors after the restart");
    fleet.assert_gauges_settle("killed replica").await;
}

/// A replica failing every other request (500) draws well under its fair third once the failure-rate
/// check ejects it, and the errors clients see drop accordingly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_failing_half_its_requests_draws_less_than_its_share() {
    let name = "a_replica_failing_half_its_requests_draws_less_than_its_share";
    let Some(fleet) = Fleet::start(name, 3, &[], &[]).await else { return };
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 8);
    assert!(load.wait_for(PROPAGATION_DEADLINE, |s| s.len() >= 50).await, "the load never got going");

    fleet.set_faults(1, &json!({"fail_every": 2})).await;
    let fault_at = Instant::now();
    fleet.wait_for_state(1, "ejected").await;
    tokio::time::sleep(FAULT_WINDOW).await;
    let samples = load.stop().await;
    let during = after(&samples, fault_at);
    let share = served_by(&during, &fleet.id(1)) as f64 / during.len().max(1) as f64;
    let error_rate = errors(&during) as f64 / during.len().max(1) as f64;
    eprintln!(
        "FIGURE 50%-failing replica: drew {:.1}% of {} requests, {:.1}% errors",
        share * 100.0,
        during.len(),
        error_rate * 100.0
    );
    assert!(share < 0.2, "the failing replica drew {:.1}% (fair share 33%)", share * 100.0);
    assert!(error_rate < 0.1, "{:.1}% of requests failed", error_rate * 100.0);
    fleet.assert_gauges_settle("failing replica").await;
}
