//! Discovery against a fake API server that speaks the real list/watch protocol, through the real
//! kube-rs client: after each step — pods appearing, turning ready and unready, being deleted (also with
//! the Delete event lost), target ports changing, the pool deleted and recreated, watches compacted, the
//! API server going away (refusing, or accepting and never answering) and coming back — the endpoint set is exactly right. Every check polls for the
//! expected state under one generous deadline; nothing is timed.

use std::time::Duration;

use crate::discovery_support::*;
use epp::discovery::{PoolSource, PoolSpec, ACTIVE_PORTS_ANNOTATION, GROUP_X_K8S};
use epp_testkit::kube_api::objects::{annotated, inference_pool, inference_pool_v1alpha2, pod, terminating};
use epp_testkit::kube_api::{inference_pools, FakeKubeApi, PODS};

/// Long enough that only the event path (or a 410) can explain a change within a test.
const NO_RESYNC: Duration = Duration::from_secs(3600);

fn v1_pools() -> String {
    inference_pools(epp::discovery::GROUP_V1)
}

async fn api_with_pool(ports: &[u16]) -> FakeKubeApi {
    let api = FakeKubeApi::start().await.expect("fake API server");
    api.apply(&v1_pools(), NS, inference_pool(POOL, &[APP], ports));
    api
}

#[tokio::test]
async fn pods_and_the_pool_drive_the_endpoint_set() {
    let api = api_with_pool(&[8000]).await;
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP, ROLE], true));
    api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], false));
    api.apply(PODS, NS, pod("c", "10.0.0.3", &[("app", "other")], true));
    let h = Harness::start(api, config(pool_source(), NO_RESYNC));
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;
    eventually("ready after the first sync", || h.synced()).await;
    let a = h.datastore.endpoints().iter().find(|e| e.name == "a-rank-0").cloned().unwrap();
    assert_eq!(a.labels.get(ROLE.0).map(String::as_str), Some(ROLE.1), "pod labels reach the endpoint");
    assert_eq!((a.namespace.as_str(), a.metrics_url.as_str()), (NS, "http://10.0.0.1:8000/metrics"));

    // b turns ready; a turns unready; a comes back while b is being deleted (deletionTimestamp set).
    h.api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], true));
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("b-rank-0", "10.0.0.2:8000")]).await;
    h.api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP, ROLE], false));
    h.expect(&[("b-rank-0", "10.0.0.2:8000")]).await;
    h.api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP, ROLE], true));
    h.api.apply(PODS, NS, terminating(pod("b", "10.0.0.2", &[APP], true)));
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;

    // c is relabelled into the selector (the selector watch sends ADDED), then a is deleted.
    h.api.apply(PODS, NS, pod("c", "10.0.0.3", &[APP], true));
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("c-rank-0", "10.0.0.3:8000")]).await;
    assert!(h.api.delete(PODS, NS, "a"));
    h.expect(&[("c-rank-0", "10.0.0.3:8000")]).await;
    assert!(h.removed.lock().unwrap().contains(&"a-rank-0".to_string()), "the pipeline hears of removals");

    // targetPorts change: one endpoint per port, then the annotation narrows c to 8001 (rank 1 kept).
    h.api.apply(&v1_pools(), NS, inference_pool(POOL, &[APP], &[8000, 8001]));
    h.expect(&[("c-rank-0", "10.0.0.3:8000"), ("c-rank-1", "10.0.0.3:8001")]).await;
    h.api.apply(PODS, NS, annotated(pod("c", "10.0.0.3", &[APP], true), ACTIVE_PORTS_ANNOTATION, "8001"));
    h.expect(&[("c-rank-1", "10.0.0.3:8001")]).await;

    // The pool is deleted (no endpoints: requests get 503) and recreated with c's active port alone.
    assert!(h.api.delete(&v1_pools(), NS, POOL));
    h.expect(&[]).await;
    h.api.apply(&v1_pools(), NS, inference_pool(POOL, &[APP], &[8001]));
    h.expect(&[("c-rank-0", "10.0.0.3:8001")]).await;
    assert_eq!(h.metric("epp_discovery_errors_total", &[]), 0.0, "no call failed");
}

#[tokio::test]
async fn a_lost_delete_event_is_repaired_by_the_periodic_relist() {
    let api = api_with_pool(&[8000]).await;
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], true));
    let h = Harness::start(api, config(pool_source(), Duration::from_millis(300)));
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("b-rank-0", "10.0.0.2:8000")]).await;
    h.api.store().drop_next_events(1);
    assert!(h.api.delete(PODS, NS, "a"));
    h.expect(&[("b-rank-0", "10.0.0.2:8000")]).await;
    assert!(h.metric("epp_discovery_syncs_total", &["reason=\"periodic\""]) >= 1.0);
}

#[tokio::test]
async fn a_compacted_watch_gets_410_and_relists() {
    let api = api_with_pool(&[8000]).await;
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    let h = Harness::start(api, config(pool_source(), NO_RESYNC));
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;
    // b's ADDED is lost, the log is compacted past the client's resourceVersion, and the watches end:
    // the resumed watch gets 410 Gone, and only the relist that follows can show b.
    h.api.store().drop_next_events(1);
    h.api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], true));
    h.api.store().compact();
    h.api.store().close_watches();
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("b-rank-0", "10.0.0.2:8000")]).await;
    assert!(h.metric("epp_discovery_syncs_total", &["reason=\"expired\""]) >= 1.0);
    assert_eq!(h.metric("epp_discovery_errors_total", &[]), 0.0, "a 410 is not an error");
}

#[tokio::test]
async fn a_bookmarked_watch_resumes_without_a_relist() {
    let api = api_with_pool(&[8000]).await;
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    let h = Harness::start(api, config(pool_source(), NO_RESYNC));
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;
    eventually("both watches open", || {
        h.api.requests().iter().filter(|r| r.contains("watch=true")).count() >= 2
    })
    .await;
    // Pods outside the selector move the resourceVersion on; the bookmark carries it to the client, so
    // after compaction and the watches' end the client resumes where the bookmark left it.
    h.api.apply(PODS, NS, pod("other", "10.0.0.9", &[("app", "other")], true));
    h.api.store().bookmark();
    let pod_lists = h.api.list_calls("/pods");
    h.api.store().compact();
    h.api.store().close_watches();
    h.api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], true));
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("b-rank-0", "10.0.0.2:8000")]).await;
    assert_eq!(h.metric("epp_discovery_syncs_total", &["reason=\"expired\""]), 0.0, "no 410");
    assert_eq!(h.api.list_calls("/pods"), pod_lists, "b came through the resumed watch, not a relist");
}

#[tokio::test]
async fn an_api_server_outage_keeps_the_last_pool_until_it_returns() {
    let api = api_with_pool(&[8000]).await;
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], true));
    let h = Harness::start(api, config(pool_source(), NO_RESYNC));
    let both = [("a-rank-0", "10.0.0.1:8000"), ("b-rank-0", "10.0.0.2:8000")];
    h.expect(&both).await;
    eventually("reachable", || h.metric("epp_discovery_api_reachable", &[]) == 1.0).await;

    h.api.stop();
    eventually("the outage is noticed", || h.metric("epp_discovery_errors_total", &[]) >= 2.0).await;
    assert_eq!(h.metric("epp_discovery_api_reachable", &[]), 0.0);
    assert_eq!(h.endpoints().len(), 2, "the last known pool keeps serving");
    // While the server is away a pod goes; when it is back the relist shows it.
    assert!(h.api.delete(PODS, NS, "a"));
    h.api.restart().await.expect("the fake comes back on its port");
    h.expect(&[("b-rank-0", "10.0.0.2:8000")]).await;
    eventually("reachable again", || h.metric("epp_discovery_api_reachable", &[]) == 1.0).await;
    assert!(h.metric("epp_discovery_syncs_total", &["reason=\"error\""]) >= 1.0);
}

#[tokio::test]
async fn an_api_server_that_never_answers_does_not_stall_discovery() {
    let api = api_with_pool(&[8000]).await;
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    let mut config = config(pool_source(), NO_RESYNC);
    config.call_timeout = Duration::from_millis(300);
    let h = Harness::start(api, config);
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;
    h.api.restart_unresponsive().await.expect("the fake comes back as a black hole");
    // Calls hang: each is cut at the call timeout and counted, and the last pool keeps serving.
    eventually("unanswered calls time out", || h.metric("epp_discovery_errors_total", &[]) >= 3.0).await;
    assert_eq!(h.endpoints().len(), 1, "the last known pool keeps serving");
    h.api.apply(PODS, NS, pod("b", "10.0.0.2", &[APP], true));
    h.api.restart().await.expect("the fake answers again");
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("b-rank-0", "10.0.0.2:8000")]).await;
}

#[tokio::test]
async fn not_synced_until_the_pool_exists() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    let h = Harness::start(api, config(pool_source(), NO_RESYNC));
    // The pool watch opens only after the pool list: by then the sync is done, and without a pool it is
    // not a ready one.
    eventually("the pool watch opens", || {
        h.api.requests().iter().any(|r| r.contains("inferencepools") && r.contains("watch=true"))
    })
    .await;
    assert!(!h.synced(), "no pool: not ready");
    assert!(h.endpoints().is_empty());
    h.api.apply(&v1_pools(), NS, inference_pool(POOL, &[APP], &[8000]));
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;
    eventually("ready once the pool exists", || h.synced()).await;
}

#[tokio::test]
async fn standalone_mode_needs_no_pool_object() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    api.apply(PODS, NS, pod("b", "10.0.0.2", &[("app", "other")], true));
    let spec = PoolSpec::standalone("app=vllm", "8000,8001").unwrap();
    let h = Harness::start(api, config(PoolSource::Standalone(spec), NO_RESYNC));
    h.expect(&[("a-rank-0", "10.0.0.1:8000"), ("a-rank-1", "10.0.0.1:8001")]).await;
    eventually("ready", || h.synced()).await;
    assert!(!h.api.requests().iter().any(|r| r.contains("inferencepools")), "no pool is read");
    assert!(h.api.delete(PODS, NS, "a"));
    h.expect(&[]).await;
}

#[tokio::test]
async fn the_older_pool_group_is_read_as_v1alpha2() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    api.apply(&inference_pools(GROUP_X_K8S), NS, inference_pool_v1alpha2(POOL, &[APP], 8000));
    api.apply(PODS, NS, pod("a", "10.0.0.1", &[APP], true));
    let source = PoolSource::inference_pool(GROUP_X_K8S, POOL).unwrap();
    let h = Harness::start(api, config(source, NO_RESYNC));
    h.expect(&[("a-rank-0", "10.0.0.1:8000")]).await;
    assert!(h.api.requests().iter().any(|r| r.contains("/apis/inference.networking.x-k8s.io/v1alpha2/")));
}
