//! A real server dying under a stream: epp stops routing to it and releases everything it held.

use super::*;

/// epp's in-flight gauges: each must return to 0 once the requests are over.
const IN_FLIGHT_GAUGES: [&str; 3] =
    ["inference_objective_running_requests", "llm_d_epp_inflight_requests", "llm_d_epp_inflight_tokens"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_stream_is_excluded_and_nothing_leaks() {
    let name = "a_server_killed_mid_stream_is_excluded_and_nothing_leaks";
    let Some(mut fleet) = RealFleet::start(name, 2) else { return };
    let client = http_client();
    let url = fleet.url("/v1/completions");
    let stream = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            let response = post_json(&client, &url, &long_stream_body(2_000)).await;
            let status = response.status().as_u16();
            (status, response.text().await)
        })
    };
    let deadline = tokio::time::Instant::now() + PROPAGATION_DEADLINE;
    let victim = loop {
        if let Some(index) = fleet.busy_server() {
            break index;
        }
        assert!(tokio::time::Instant::now() < deadline, "no server ever decoded the stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (dead, survivor) = (fleet.servers[victim].address(), fleet.servers[1 - victim].address());
    fleet.servers[victim].child.kill();

    // The client sees the stream cut: headers were 200, the body ends without [DONE].
    let (status, body) = stream.await.expect("stream task");
    assert_eq!(status, 200, "the stream had started");
    assert!(!body.as_deref().unwrap_or("").contains("[DONE]"), "the stream was cut, not finished");

    // epp takes the dead server out (its scrapes fail), then every request goes to the survivor.
    let probe = wait_for_probe(&fleet, &client, |probe| probe_candidate(probe, &dead).is_none()).await;
    assert!(probe_candidate(&probe, &dead).is_none(), "{dead} is still a candidate: {probe:#}");
    assert_eq!(probe["pick"]["address"], survivor.as_str());
    for _ in 0..4 {
        let body = json!({"model": CLIENT_MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0});
        let response = post_json(&client, &url, &body).await;
        assert_eq!(response.status(), 200, "after the kill");
    }

    let settled = wait_for_gauges_zero(|| fleet.epp_metrics(), &IN_FLIGHT_GAUGES).await;
    assert!(settled.is_ok(), "in-flight gauges never returned to 0: {settled:?}");
}
