//! Legacy admission (no `flowControl` gate), end to end: while the configured detector says the pool is
//! saturated, a sheddable request gets Envoy's 429 with epp's exact body, everything else is still
//! served, and shedding stops once the held load completes. Nothing ever queues in epp.

use crate::*;
use epp_testkit::held_backend::HeldBackends;
use epp_testkit::*;

const SHED_BODY: &str = "inference error: ResourceExhausted - system saturated, sheddable request dropped";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_a_saturated_pool_sheds_sheddable_requests_and_serves_the_rest() {
    let test_name = "without_the_gate_a_saturated_pool_sheds_sheddable_requests_and_serves_the_rest";
    let backends = HeldBackends::start(1);
    let detector = Detector { max_concurrency: 2, in_profile: false };
    let Some(front) = start_front(test_name, &backends, &detector_config(detector, false, "")) else {
        return;
    };
    let client = http_client();

    // Below saturation nothing is shed.
    let reply = send(&client, &front, Some("batch"), false).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    // Two held requests fill maxConcurrency 2: saturation 1.0.
    let held = spawn_held(&client, &front, 2);
    wait_held(&backends, 2).await;

    let shed = send(&client, &front, Some("batch"), false).await;
    assert_eq!((shed.status, shed.body.as_str(), shed.backend.as_deref()), (429, SHED_BODY, None));
    let interactive = send(&client, &front, Some("interactive"), false).await;
    assert_eq!(interactive.status, 200, "priority 10 is never shed: {interactive:?}");
    assert_eq!(interactive.backend, Some(backends.id(0)));
    let default_priority = send(&client, &front, None, false).await;
    assert_eq!(default_priority.status, 200, "priority 0 is never shed: {default_priority:?}");

    let text = front.epp.metrics_text();
    let exhausted = [("model_name", MODEL), ("error_code", "ResourceExhausted")];
    assert_eq!(metric_sum(&text, "llm_d_epp_request_error_total", &exhausted), Some(1.0), "{text}");
    assert_eq!(pool_saturation(&text), None, "no flow-control gauges without the gate");
    assert_eq!(queued(&text), 0.0);

    // The held load completes: saturation falls below 1 and sheddable requests are served again. Each try
    // is either shed (epp has not seen both completions yet) or served, never anything else.
    backends.release_all();
    for reply in replies(held).await {
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    let started = std::time::Instant::now();
    loop {
        let reply = send(&client, &front, Some("batch"), false).await;
        match reply.status {
            200 => break,
            429 if started.elapsed() < PROPAGATION_DEADLINE => assert_eq!(reply.body, SHED_BODY),
            _ => panic!("a sheddable request after the load: {reply:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
