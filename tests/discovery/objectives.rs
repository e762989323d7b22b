//! InferenceObjective and InferenceModelRewrite read from the cluster: the real epp server in
//! InferencePool mode against the fake API server, through the real kube-rs client. Objects that
//! reference the pool appear in epp's policy store (laid over the config's own `objectives:`), follow
//! changes and deletions (a lost Delete event too, through the periodic relist), and ignore other pools;
//! a kind whose CRD is not installed (404) is simply not used, does not hold the pool back, and is
//! picked up once the CRD appears. Every check polls for the expected state; nothing is timed.

use crate::discovery_support::{eventually, APP, NS, POOL};
use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;
use epp::discovery::{GROUP_LLM_D, GROUP_V1, GROUP_X_K8S};
use epp_testkit::kube_api::objects::{inference_model_rewrite, inference_objective, inference_pool, pod};
use epp_testkit::kube_api::{
    inference_model_rewrites, inference_objectives, inference_pools, FakeKubeApi, PODS,
};

/// The default config plus one objective of its own, so the layering shows.
const CONFIG: &str = "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
objectives:
- {name: batch, priority: -1}
- {name: critical, priority: 10}
";

async fn start(api: &FakeKubeApi, dir: &tempfile::TempDir, resync: &str) -> Server {
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    api.apply(&inference_pools(GROUP_V1), NS, inference_pool(POOL, &[APP], &[8000]));
    api.apply(PODS, NS, pod("a", "127.0.0.2", &[APP], true));
    let args = epp_testkit::loopback_epp_args().into_iter().chain([
        "--shutdown-grace-period=200ms".into(),
        format!("--config-text={CONFIG}"),
        format!("--pool-name={POOL}"),
        format!("--pool-namespace={NS}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--discovery-resync-period={resync}"),
    ]);
    Server::start(Cli::parse_from(args)).await.expect("epp starts in InferencePool mode")
}

fn priority(epp: &Server, objective: &str) -> Option<i32> {
    epp.policies.load().priority(objective)
}

/// The targets `model` is rewritten to, as `(model, weight)`.
fn rewrite_of(epp: &Server, model: &str) -> Option<Vec<(String, f64)>> {
    epp.policies.load().rewrite_for(model).map(|r| r.targets.clone())
}

fn targets(pairs: &[(&str, f64)]) -> Option<Vec<(String, f64)>> {
    Some(pairs.iter().map(|(m, w)| (m.to_string(), *w)).collect())
}

#[tokio::test]
async fn objectives_and_rewrites_follow_the_cluster_over_the_config() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let objectives = inference_objectives(GROUP_X_K8S);
    api.apply(&objectives, NS, inference_objective(GROUP_X_K8S, "critical", POOL, Some(100)));
    api.apply(&objectives, NS, inference_objective(GROUP_X_K8S, "other-pools", "other-pool", Some(7)));
    let epp = start(&api, &dir, "1h").await;
    assert_eq!(priority(&epp, "batch"), Some(-1), "the config's objectives hold from the start");

    // The cluster's objective replaces the config's of the same name; another pool's is ignored.
    eventually("critical comes from the cluster", || priority(&epp, "critical") == Some(100)).await;
    assert_eq!(priority(&epp, "other-pools"), None);

    // Created, changed (through the watch), with an unset priority meaning 0; llm-d.ai's group too.
    api.apply(&objectives, NS, inference_objective(GROUP_X_K8S, "interactive", POOL, Some(5)));
    eventually("interactive appears", || priority(&epp, "interactive") == Some(5)).await;
    api.apply(&objectives, NS, inference_objective(GROUP_X_K8S, "interactive", POOL, None));
    eventually("interactive's priority unset: 0", || priority(&epp, "interactive") == Some(0)).await;
    let llm_d = inference_objectives(GROUP_LLM_D);
    api.apply(&llm_d, NS, inference_objective(GROUP_LLM_D, "llm-d-objective", POOL, Some(3)));
    eventually("llm-d.ai's objective appears", || priority(&epp, "llm-d-objective") == Some(3)).await;

    // Rewrites: an exact match and a catch-all.
    let rewrites = inference_model_rewrites(GROUP_X_K8S);
    let exact =
        inference_model_rewrite(GROUP_X_K8S, "canary", POOL, Some("m"), &[("m-v1", 90), ("m-v2", 10)]);
    api.apply(&rewrites, NS, exact);
    api.apply(&rewrites, NS, inference_model_rewrite(GROUP_X_K8S, "any", POOL, None, &[("base", 1)]));
    eventually("the rewrites appear", || {
        rewrite_of(&epp, "m") == targets(&[("m-v1", 90.0), ("m-v2", 10.0)])
            && rewrite_of(&epp, "other") == targets(&[("base", 1.0)])
    })
    .await;

    // Deleted: the cluster's entries go, and the config's "critical" is back.
    assert!(api.delete(&objectives, NS, "critical"));
    assert!(api.delete(&rewrites, NS, "any"));
    eventually("deletions are followed", || {
        priority(&epp, "critical") == Some(10) && rewrite_of(&epp, "other").is_none()
    })
    .await;
    assert_eq!(rewrite_of(&epp, "m"), targets(&[("m-v1", 90.0), ("m-v2", 10.0)]));
    epp.shutdown().await;
}

#[tokio::test]
async fn a_missing_crd_is_not_used_and_is_picked_up_once_installed() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let llm_d = inference_objectives(GROUP_LLM_D);
    for resource in [&llm_d, &inference_model_rewrites(GROUP_LLM_D)] {
        api.store().set_installed(resource, false);
    }
    let epp = start(&api, &dir, "300ms").await;
    let llm_d_path = format!("/apis/{GROUP_LLM_D}/v1alpha2/namespaces/{NS}/inferenceobjectives");
    eventually("the missing kind's list answered 404", || {
        api.requests()
            .iter()
            .any(|r| r.contains("/apis/llm-d.ai/v1alpha2/") && r.contains("inferenceobjectives"))
    })
    .await;
    // Ready regardless: the pool synced, the missing CRD is no error.
    eventually("the pool synced", || epp.datastore.endpoints().len() == 1).await;
    let before = api.list_calls(&llm_d_path);
    eventually("asked again each resync period", || api.list_calls(&llm_d_path) > before + 1).await;
    assert!(
        !api.requests().iter().any(|r| r.contains("/apis/llm-d.ai/") && r.contains("watch=true")),
        "no watch on a collection that does not exist"
    );

    api.store().set_installed(&llm_d, true);
    api.apply(&llm_d, NS, inference_objective(GROUP_LLM_D, "late", POOL, Some(42)));
    eventually("the objective of the CRD installed later", || priority(&epp, "late") == Some(42)).await;
    // And the CRD uninstalled again: its objects are no longer used.
    api.store().set_installed(&llm_d, false);
    eventually("the uninstalled kind's objectives go", || priority(&epp, "late").is_none()).await;
    epp.shutdown().await;
}

#[tokio::test]
async fn a_lost_delete_event_is_repaired_by_the_periodic_relist() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let objectives = inference_objectives(GROUP_X_K8S);
    api.apply(&objectives, NS, inference_objective(GROUP_X_K8S, "gone", POOL, Some(9)));
    let epp = start(&api, &dir, "300ms").await;
    eventually("the objective is read", || priority(&epp, "gone") == Some(9)).await;
    let path = format!("/apis/{GROUP_X_K8S}/v1alpha2/namespaces/{NS}/inferenceobjectives");
    eventually("its watch is open", || {
        api.requests().iter().any(|r| r.contains(&path) && r.contains("watch=true"))
    })
    .await;
    // The Delete event never reaches the watch: only the next relist can show it.
    api.store().drop_next_events(1);
    assert!(api.delete(&objectives, NS, "gone"));
    eventually("the relist drops it", || priority(&epp, "gone").is_none()).await;
    epp.shutdown().await;
}

#[tokio::test]
async fn a_cluster_rewrite_and_objective_apply_to_requests() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let rewrites = inference_model_rewrites(GROUP_X_K8S);
    api.apply(&rewrites, NS, inference_model_rewrite(GROUP_X_K8S, "canary", POOL, Some("m"), &[("m-v2", 1)]));
    // The config makes "batch" sheddable (-1): with no telemetry it would be dropped; the cluster says 5.
    let objectives = inference_objectives(GROUP_X_K8S);
    api.apply(&objectives, NS, inference_objective(GROUP_X_K8S, "batch", POOL, Some(5)));
    let epp = start(&api, &dir, "1h").await;
    eventually("the rewrite is read", || rewrite_of(&epp, "m").is_some()).await;
    eventually("the objective is read", || priority(&epp, "batch") == Some(5)).await;
    eventually("the pod is an endpoint", || epp.datastore.endpoints().len() == 1).await;
    let mut s = crate::grpc_support::Stream::open(&epp).await;
    let h = crate::grpc_support::post_headers("/v1/completions");
    let mut refs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    refs.push(("x-gateway-inference-objective", "batch"));
    s.send(crate::grpc_support::request_headers(&refs, false, None)).await;
    s.send(crate::grpc_support::body(br#"{"model":"m","prompt":"hi"}"#, true)).await;
    let first = s.recv_full().await;
    let _ = crate::grpc_support::routing_of(&first);
    let (bytes, _) = crate::grpc_support::streamed_of(&s.recv().await);
    assert_eq!(bytes, br#"{"model":"m-v2","prompt":"hi"}"#.to_vec(), "{}", String::from_utf8_lossy(&bytes));
    let text = epp.metrics.encode();
    assert!(text.lines().any(|l| l.contains("rewrite") && l.contains("canary")), "{text}");
    epp.shutdown().await;
}
