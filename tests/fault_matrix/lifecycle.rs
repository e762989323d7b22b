//! Streams cut and processes restarted: whatever ends a request — the backend dying mid-stream, the
//! client hanging up, epp or Envoy restarting — epp releases it, and serving resumes.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::load::{after, errors, last_all_ok, ClosedLoop};
use crate::{Fleet, MODEL};
use epp_testkit::*;

/// Long streams (40 chunks, 50 ms apart) on three replicas; one is killed while streams run on it.
/// Its clients see a cut stream; epp releases those requests, and new ones go to the two survivors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_dying_mid_stream_releases_its_requests() {
    let name = "a_backend_dying_mid_stream_releases_its_requests";
    let args = ["--chunks", "40", "--chunk-delay-ms", "50"];
    let Some(mut fleet) = Fleet::start(name, 3, &args, &[]).await else { return };
    let client = http_client();
    let url = fleet.stack.url("/v1/chat/completions");
    let streams: Vec<_> = (0..9)
        .map(|n| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let body = json!({"model": MODEL, "stream": true,
                    "messages": [{"role": "user", "content": format!("stream {n} {}", rand::random::<u64>())}]});
                let response = post_json(&client, &url, &body).await;
                let backend = header(&response, "x-backend-id");
                (backend, response.text().await.is_ok())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.kill(0);
    let mut cut = 0;
    for stream in streams {
        let (backend, complete) = stream.await.expect("stream task");
        if !complete {
            cut += 1;
            assert_eq!(backend, Some(fleet.id(0)), "a stream on a survivor was cut");
        }
    }
    eprintln!("FIGURE backend dying mid-stream: {cut} of 9 streams cut");
    fleet.assert_gauges_settle("backend died mid-stream").await;
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 4);
    let settled = load.wait_for(PROPAGATION_DEADLINE, |s| last_all_ok(s, 50)).await;
    let samples = load.stop().await;
    assert!(settled, "serving never settled after the kill: {} errors", errors(&samples));
    fleet.assert_gauges_settle("after the kill").await;
}

/// 300 requests, each abandoned by its client after 0–150 ms (before, during or after routing and
/// streaming): every one is released, and epp serves the next request normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancel_storm_leaves_nothing_in_flight() {
    let name = "a_client_cancel_storm_leaves_nothing_in_flight";
    let args = ["--chunks", "20", "--chunk-delay-ms", "10"];
    let Some(fleet) = Fleet::start(name, 3, &args, &[]).await else { return };
    let client = http_client();
    let url = fleet.stack.url("/v1/chat/completions");
    let mut storm = tokio::task::JoinSet::new();
    for n in 0..300u64 {
        let (client, url) = (client.clone(), url.clone());
        storm.spawn(async move {
            let body = json!({"model": MODEL, "stream": n % 2 == 0,
                "messages": [{"role": "user", "content": format!("cancel {n}")}]});
            let send = async {
                let response = post_json(&client, &url, &body).await;
                let _ = response.text().await;
            };
            let _ = tokio::time::timeout(Duration::from_millis(n % 150), send).await;
        });
    }
    while storm.join_next().await.is_some() {}
    fleet.assert_gauges_settle("cancel storm").await;
    let (status, _) = {
        let body = json!({"model": MODEL, "prompt": "after the storm", "max_tokens": 5});
        let response = post_json(&client, &fleet.stack.url("/v1/completions"), &body).await;
        (response.status().as_u16(), response.text().await.ok())
    };
    assert_eq!(status, 200);
}

/// epp restarts (SIGTERM, drain, start again on its ports) under load: with the shipped fail-closed
/// Envoy config, clients see errors only while no epp answers; after it is back every request succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epp_restart_under_load_recovers() {
    let name = "an_epp_restart_under_load_recovers";
    let Some(mut fleet) = Fleet::start(name, 3, &[], &[]).await else { return };
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 4);
    assert!(load.wait_for(PROPAGATION_DEADLINE, |s| s.len() >= 40).await, "the load never got going");
    let restart_at = Instant::now();
    fleet.stack.epp.restart();
    let back_at = Instant::now();
    let settled = load.wait_for(PROPAGATION_DEADLINE, |s| last_all_ok(&after(s, back_at), 100)).await;
    let samples = load.stop().await;
    let during = after(&samples, restart_at);
    let failed_after_back = errors(&after(&samples, back_at + Duration::from_secs(2)));
    let last_error = during.iter().filter(|s| !s.ok()).map(|s| s.at - restart_at).max();
    let first_error = during.iter().filter(|s| !s.ok()).map(|s| s.at - restart_at).min();
    eprintln!(
        "FIGURE epp restart: {} errors of {} requests from the SIGTERM on, from {first_error:?} to \
         {last_error:?} after it; the new epp listened {:?} after it",
        errors(&during),
        during.len(),
        back_at - restart_at
    );
    assert!(settled, "serving never settled after the restart");
    assert_eq!(failed_after_back, 0, "errors once the new epp had been up 2 s");
    fleet.assert_gauges_settle("epp restart").await;
}

/// Envoy is SIGKILLed under load and started again: its ext_proc streams die with it, epp releases every
/// request they carried, and serving resumes through the new Envoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_restart_releases_every_stream() {
    let name = "an_envoy_restart_releases_every_stream";
    let args = ["--chunks", "20", "--chunk-delay-ms", "20"];
    let Some(mut fleet) = Fleet::start(name, 3, &args, &[]).await else { return };
    let load = ClosedLoop::start(fleet.stack.url("/v1/completions"), 8);
    assert!(load.wait_for(PROPAGATION_DEADLINE, |s| s.len() >= 20).await, "the load never got going");
    fleet.stack.envoy.restart();
    let back_at = Instant::now();
    let settled = load.wait_for(PROPAGATION_DEADLINE, |s| last_all_ok(&after(s, back_at), 50)).await;
    let samples = load.stop().await;
    assert!(settled, "serving never settled after the Envoy restart: {} errors", errors(&samples));
    fleet.assert_gauges_settle("Envoy restart").await;
}
