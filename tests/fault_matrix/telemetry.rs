//! Broken `/metrics`: a replica whose telemetry froze looks idle forever, so without the staleness check
//! every load-aware scorer prefers it. A hung or garbage page takes it out until a scrape succeeds again;
//! a merely slow page does not.

use std::time::Instant;

use serde_json::json;

use crate::load::{after, errors, served_by, ClosedLoop};
use crate::{Fleet, FAULT_WINDOW};
use epp_testkit::PROPAGATION_DEADLINE;

/// A hung and then a garbage `/metrics` on one of three replicas: stale, it draws nothing; once its
/// page is fixed it is healthy and draws traffic again. No request fails: the replica itself serves fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_hung_or_garbage_metrics_draws_nothing_until_its_page_recovers() {
    let name = "a_replica_with_hung_or_garbage_metrics_draws_nothing_until_its_page_recovers";
    let Some(fleet) = Fleet::start(name, 3, &[], &[]).await else { return };
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 8);
    let id = fleet.id(1);
    for fault in ["hang", "garbage"] {
        fleet.set_faults(1, &json!({"metrics": fault})).await;
        fleet.wait_for_state(1, "stale").await;
        let stale_at = Instant::now();
        tokio::time::sleep(FAULT_WINDOW).await;
        let during = after(&load.snapshot(), stale_at);
        let share = served_by(&during, &id) as f64 / during.len().max(1) as f64;
        eprintln!(
            "FIGURE {fault} /metrics: the replica drew {:.1}% of {} requests",
            share * 100.0,
            during.len()
        );
        assert!(!during.is_empty(), "{fault}: no traffic");
        assert_eq!(served_by(&during, &id), 0, "{fault}: the stale replica still drew traffic");
        assert_eq!(errors(&during), 0, "{fault}: errors");

        fleet.set_faults(1, &json!({"metrics": "ok"})).await;
        fleet.wait_for_state(1, "healthy").await;
        let recovered_at = Instant::now();
        let back =
            load.wait_for(PROPAGATION_DEADLINE, |s| served_by(&after(s, recovered_at), &id) >= 5).await;
        assert!(back, "{fault}: the recovered replica never drew traffic again");
    }
    let samples = load.stop().await;
    assert_eq!(errors(&samples), 0, "errors");
    fleet.assert_gauges_settle("broken metrics").await;
}

/// A slow page (300 ms per scrape) keeps the telemetry fresh enough: the replica stays healthy and keeps
/// a real share of the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_slow_metrics_stays_in_the_pool() {
    let name = "a_replica_with_slow_metrics_stays_in_the_pool";
    let Some(fleet) = Fleet::start(name, 3, &[], &[]).await else { return };
    fleet.set_faults(1, &json!({"metrics_delay_ms": 300})).await;
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 8);
    let started = Instant::now();
    tokio::time::sleep(FAULT_WINDOW).await;
    let samples = load.stop().await;
    let during = after(&samples, started);
    let share = served_by(&during, &fleet.id(1)) as f64 / during.len().max(1) as f64;
    eprintln!("FIGURE slow /metrics: the replica drew {:.1}% of {} requests", share * 100.0, during.len());
    fleet.wait_for_state(1, "healthy").await;
    assert!(share > 0.1, "the slow-scraping replica drew only {:.1}%", share * 100.0);
    assert_eq!(errors(&samples), 0, "errors");
    fleet.assert_gauges_settle("slow metrics").await;
}
