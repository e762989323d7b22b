//! A hot standby (deploy/envoy/envoy-standby.yaml): two epps on the same pool as the ext_proc cluster's
//! priorities 0 and 1. Steady traffic goes through Envoy while the primary is killed (SIGKILL), brought
//! back, and stopped (SIGTERM). Counted: requests that fail, by when they were sent relative to the kill.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::*;
use epp_testkit::*;

/// Sends one small completion every `gap` until `stop`; records (sent at, status).
async fn steady_load(url: String, gap: Duration, stop: Arc<Mutex<bool>>) -> Vec<(Instant, u16)> {
    let client = http_client();
    let mut sent = Vec::new();
    let mut n = 0u64;
    while !*stop.lock().unwrap() {
        n += 1;
        let body = json!({"model": MODEL, "prompt": format!("standby {n}"), "max_tokens": 3});
        let at = Instant::now();
        let status =
            match tokio::time::timeout(Duration::from_secs(10), post_json(&client, &url, &body)).await {
                Ok(response) => response.status().as_u16(),
                Err(_) => 0,
            };
        sent.push((at, status));
        tokio::time::sleep(gap).await;
    }
    sent
}

/// Load through Envoy while `disrupt` runs; returns the failures sent after `disrupt` started + 100 ms,
/// and those before.
async fn failures_around(url: &str, disrupt: impl FnOnce() -> Instant) -> (usize, usize, usize) {
    let stop = Arc::new(Mutex::new(false));
    let load = tokio::spawn(steady_load(url.to_string(), Duration::from_millis(10), stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at = tokio::task::block_in_place(disrupt);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    *stop.lock().unwrap() = true;
    let sent = load.await.expect("load task");
    let failed = |(_, s): &&(Instant, u16)| *s != 200;
    let late = sent.iter().filter(|(t, _)| *t > at + Duration::from_millis(100)).filter(failed).count();
    let early = sent.iter().filter(|(t, _)| *t <= at + Duration::from_millis(100)).filter(failed).count();
    (late, early, sent.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_primary_dies_or_stops() {
    let test_name = "the_standby_takes_over_when_the_primary_dies_or_stops";
    let Some(_envoy_bin) = envoy_or_skip(test_name) else { return };
    let backends = start_test_backends(2, &[]);
    let mut primary = start_epp_for(&backends.endpoints(), &[]);
    let standby = start_epp_for(&backends.endpoints(), &[]);
    let vars = [
        ("EXTPROC_PORT", primary.grpc_port.to_string()),
        ("HEALTH_PORT", primary.health_port.to_string()),
        ("STANDBY_EXTPROC_PORT", standby.grpc_port.to_string()),
        ("STANDBY_HEALTH_PORT", standby.health_port.to_string()),
    ];
    let envoy = start_envoy_on_free_ports("envoy-standby.yaml", &vars);
    let url = envoy.url("/v1/completions");
    let client = http_client();
    let body = json!({"model": MODEL, "prompt": "warm", "max_tokens": 3});
    for _ in 0..5 {
        assert_eq!(post_json(&client, &url, &body).await.status(), 200);
    }
    let routed =
        |epp: &Epp| metric_sum(&epp.metrics_text(), "inference_objective_request_total", &[]).unwrap_or(0.0);
    assert_eq!(routed(&standby), 0.0, "the standby serves nothing while the primary is up");
    assert_eq!(routed(&primary), 5.0);

    let (late, early, sent) = failures_around(&url, || {
        let at = Instant::now();
        primary.child.kill();
        at
    })
    .await;
    eprintln!("SIGKILL: {sent} requests, {early} failed up to 100 ms after the kill, {late} after");
    assert_eq!(late, 0, "requests sent after the primary died must be served by the standby");
    assert!(routed(&standby) > 0.0, "the standby took over");

    // The primary comes back; after its health check passes, a SIGTERM (graceful) costs nothing.
    primary.child = start_epp(&primary.args);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (late, early, sent) = failures_around(&url, || {
        let at = Instant::now();
        assert!(primary.child.terminate(), "SIGTERM sent");
        at
    })
    .await;
    eprintln!("SIGTERM: {sent} requests, {early} failed up to 100 ms after the signal, {late} after");
    assert_eq!(early + late, 0, "a graceful stop loses nothing");
}
