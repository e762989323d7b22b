//! Flow control end to end (`featureGates: [flowControl]`): the excess over capacity waits in epp, shows in
//! the queue and saturation gauges, and is dispatched one for one as held requests complete, none lost;
//! a full queue answers 429, an expired wait 503; the deprecated env var turns the gate on; and a request
//! sent while no model server is up waits until one is (scale from zero).

use crate::*;
use epp_testkit::held_backend::HeldBackends;
use epp_testkit::*;

/// 2 backends × maxConcurrency 2.
const CAPACITY: i64 = 4;
const SENT: i64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_are_dispatched_one_for_one_as_held_requests_complete_and_none_is_lost() {
    let test_name = "queued_requests_are_dispatched_one_for_one_as_held_requests_complete_and_none_is_lost";
    let backends = HeldBackends::start(2);
    let config = detector_config(Detector { max_concurrency: 2, in_profile: true }, true, "");
    let Some(front) = start_front(test_name, &backends, &config) else { return };
    let client = http_client();

    let sent = spawn_held(&client, &front, SENT as usize);
    wait_held(&backends, CAPACITY).await;
    let excess = (SENT - CAPACITY) as f64;
    let text = wait_for_metrics(&front.epp, "the excess queued, the pool saturated", |text| {
        queued(text) == excess && pool_saturation(text).is_some_and(|s| s >= 1.0)
    })
    .await;
    assert_eq!((backends.held_on(0), backends.held_on(1)), (2, 2), "the detector's filter spreads the load");
    let running = metric_sum(&text, "llm_d_epp_request_running", &[("model_name", MODEL)]);
    assert_eq!(running, Some(CAPACITY as f64), "{text}");
    let inflight_tokens =
        metric_sum(&text, "llm_d_epp_inflight_tokens", &[("producer_name", "inflight-load-producer")]);
    assert!(inflight_tokens.is_some_and(|t| t > 0.0), "{text}");

    // Each completion frees one slot, which the next queued request takes.
    for done in 1..=SENT {
        backends.release(1);
        let (held, queue) = ((SENT - done).min(CAPACITY), (SENT - CAPACITY - done).max(0) as f64);
        let ok = wait_until_async(PROPAGATION_DEADLINE, || {
            let at_step = backends.served() == done as u64 && backends.held() == held;
            let text = front.epp.metrics_text();
            async move { at_step && queued(&text) == queue }
        })
        .await;
        assert!(
            ok,
            "after {done} completions: served {}, held {} (want {held}), /metrics:\n{}",
            backends.served(),
            backends.held(),
            front.epp.metrics_text()
        );
    }

    let replies = replies(sent).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok as i64, SENT, "every request served: {replies:?}");
    assert!(replies.iter().all(|r| r.body.contains("released") && r.backend.is_some()), "{replies:?}");
    assert_eq!(backends.max_held(), CAPACITY, "never more than capacity at the backends");
    let text = wait_for_metrics(&front.epp, "queue empty, saturation back to 0", |text| {
        queued(text) == 0.0 && pool_saturation(text) == Some(0.0)
    })
    .await;
    assert_eq!(outcomes(&text, "Dispatched"), SENT as f64, "{text}");
    let running = metric_sum(&text, "llm_d_epp_request_running", &[("model_name", MODEL)]);
    assert_eq!(running, Some(0.0), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_and_the_queued_requests_still_complete() {
    let test_name = "a_full_queue_answers_429_and_the_queued_requests_still_complete";
    let backends = HeldBackends::start(1);
    let detector = Detector { max_concurrency: 1, in_profile: true };
    let config = detector_config(detector, true, "flowControl:\n  maxRequests: 2\n");
    let Some(front) = start_front(test_name, &backends, &config) else { return };
    let client = http_client();

    let mut held = spawn_held(&client, &front, 1);
    wait_held(&backends, 1).await;
    held.extend(spawn_held(&client, &front, 2));
    wait_for_metrics(&front.epp, "two queued", |text| queued(text) == 2.0).await;

    let rejected = send(&client, &front, None, false).await;
    assert_eq!(rejected.status, 429, "{rejected:?}");
    assert_eq!(rejected.dropped.as_deref(), Some("rejected-saturated"), "{rejected:?}");
    assert!(
        rejected.body.starts_with("inference error: ResourceExhausted - request rejected by flow control"),
        "{rejected:?}"
    );
    let text = front.epp.metrics_text();
    assert_eq!(outcomes(&text, "RejectedCapacity"), 1.0, "{text}");

    backends.release_all();
    for reply in replies(held).await {
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    wait_for_metrics(&front.epp, "queue empty", |text| {
        queued(text) == 0.0 && outcomes(text, "Dispatched") == 3.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_outlives_its_ttl_in_the_queue_gets_503() {
    let test_name = "a_request_that_outlives_its_ttl_in_the_queue_gets_503";
    let backends = HeldBackends::start(1);
    let detector = Detector { max_concurrency: 1, in_profile: true };
    let config = detector_config(detector, true, "flowControl:\n  defaultRequestTTL: 500ms\n");
    let Some(front) = start_front(test_name, &backends, &config) else { return };
    let client = http_client();

    let held = spawn_held(&client, &front, 1);
    wait_held(&backends, 1).await;
    // The pool stays full until after this answer, so it can only time out.
    let expired = send(&client, &front, None, false).await;
    assert_eq!(
        (expired.status, expired.body.as_str(), expired.backend.as_deref()),
        (503, "inference error: ServiceUnavailable - request timed out in queue", None)
    );
    assert_eq!(expired.dropped.as_deref(), Some("rejected-ttl-expired"));
    let text = front.epp.metrics_text();
    assert_eq!(outcomes(&text, "EvictedTTL"), 1.0, "{text}");
    let dropped = metric_sample(&text, "epp_requests_dropped_total", &[("reason", "rejected-ttl-expired")]);
    assert_eq!(dropped, Some(1.0), "{text}");
    assert_eq!(queued(&text), 0.0, "{text}");

    backends.release_all();
    assert_eq!(replies(held).await[0].status, 200);
}

/// `ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER=true` with no gate in the config: a priority-0 request that
/// legacy admission would route at once waits in the queue instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deprecated_env_var_turns_flow_control_on() {
    let test_name = "the_deprecated_env_var_turns_flow_control_on";
    let backends = HeldBackends::start(1);
    let config = detector_config(Detector { max_concurrency: 1, in_profile: false }, false, "");
    let env = [("ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER", "true")];
    let Some(front) = start_front_for(test_name, &backends.endpoints(), &config, &env) else { return };
    let client = http_client();

    let held = spawn_held(&client, &front, 1);
    wait_held(&backends, 1).await;
    let waiting = spawn_send(&client, &front, None, false);
    wait_for_metrics(&front.epp, "queued, not routed", |text| queued(text) == 1.0).await;
    assert!(!waiting.is_finished());

    backends.release_all();
    assert_eq!(replies(held).await[0].status, 200);
    assert_eq!(waiting.await.expect("send task").status, 200);
}

/// No model server is up: the utilization detector sees the endpoint as stale (saturated), so the request
/// waits in epp, visible as queue size 1 (KEDA's activation signal), until a server comes up on that port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_while_no_server_is_up_waits_and_is_served_once_one_is() {
    let test_name = "a_request_sent_while_no_server_is_up_waits_and_is_served_once_one_is";
    let port = free_port();
    let config = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n\
         featureGates: [flowControl]\nplugins:\n- name: detector\n  type: utilization-detector\n  \
         parameters: {metricsStalenessThreshold: 1s}\nsaturationDetector:\n  pluginRef: detector\n";
    let Some(front) = start_front_for(test_name, &format!("127.0.0.1:{port}"), config, &[]) else {
        return;
    };
    let client = http_client();

    let waiting = spawn_send(&client, &front, None, false);
    let text = wait_for_metrics(&front.epp, "queued while the pool is empty", |text| {
        queued(text) == 1.0 && pool_saturation(text) == Some(1.0)
    })
    .await;
    let stale = metric_sample(&text, "llm_d_epp_flow_control_stale_endpoints", &[("detector", "detector")]);
    assert_eq!(stale, Some(1.0), "{text}");
    assert!(!waiting.is_finished());

    let backends = HeldBackends::start_on(&[port]);
    let reply = waiting.await.expect("send task");
    assert_eq!((reply.status, reply.backend), (200, Some(backends.id(0))));
    wait_for_metrics(&front.epp, "queue empty", |text| queued(text) == 0.0).await;
}

/// Bands are strict: an interactive request (priority 10) queued after two batch ones (-1) is the next to
/// go when a slot frees, and the batch ones follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_request_overtakes_queued_sheddable_ones() {
    let test_name = "a_higher_priority_request_overtakes_queued_sheddable_ones";
    let backends = HeldBackends::start(1);
    let config = detector_config(Detector { max_concurrency: 1, in_profile: true }, true, "");
    let Some(front) = start_front(test_name, &backends, &config) else { return };
    let client = http_client();

    let occupier = spawn_held(&client, &front, 1);
    wait_held(&backends, 1).await;
    let mut batch = Vec::new();
    for n in 1..=2 {
        batch.push(spawn_send(&client, &front, Some("batch"), true));
        wait_for_metrics(&front.epp, "batch queued, not shed", |text| queued(text) == f64::from(n)).await;
    }
    let interactive = spawn_send(&client, &front, Some("interactive"), true);
    wait_for_metrics(&front.epp, "interactive queued", |text| queued(text) == 3.0).await;

    // Frees the occupier's slot: the interactive request takes it, then completes on the next release.
    // Were a batch request dispatched first, it would take the second release and the interactive one
    // would stay held: hence the deadline.
    backends.release(2);
    let reply = tokio::time::timeout(PROPAGATION_DEADLINE, interactive)
        .await
        .unwrap_or_else(|_| {
            panic!("the interactive request was not served first; {} served", backends.served())
        })
        .expect("send task");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(batch.iter().all(|b| !b.is_finished()), "a batch request went before the interactive one");
    backends.release_all();
    for reply in replies(occupier.into_iter().chain(batch).collect()).await {
        assert_eq!(reply.status, 200, "{reply:?}");
    }
}

/// A client that gives up while queued leaves the queue (Envoy resets the ext_proc stream) and takes no
/// capacity with it: the next request is served once the slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_while_queued_leaves_the_queue_and_leaks_nothing() {
    let test_name = "a_client_that_gives_up_while_queued_leaves_the_queue_and_leaks_nothing";
    let backends = HeldBackends::start(1);
    let config = detector_config(Detector { max_concurrency: 1, in_profile: true }, true, "");
    let Some(front) = start_front(test_name, &backends, &config) else { return };
    let client = http_client();

    let held = spawn_held(&client, &front, 1);
    wait_held(&backends, 1).await;
    let gives_up = spawn_send(&client, &front, None, false);
    wait_for_metrics(&front.epp, "queued", |text| queued(text) == 1.0).await;
    gives_up.abort();
    let text = wait_for_metrics(&front.epp, "left the queue", |text| {
        queued(text) == 0.0 && outcomes(text, "EvictedContextCancelled") == 1.0
    })
    .await;
    let bytes = metric_sum(&text, "llm_d_epp_flow_control_queue_bytes", &[("model_name", MODEL)]);
    assert_eq!(bytes, Some(0.0), "{text}");

    backends.release_all();
    assert_eq!(replies(held).await[0].status, 200);
    let next = send(&client, &front, None, false).await;
    assert_eq!(next.status, 200, "{next:?}");
    assert_eq!(backends.served(), 2, "the abandoned request never reached a backend");
}
