//! The Helm chart grants exactly the Kubernetes API calls epp makes: epp runs with InferencePool
//! discovery, leader election and a reviewed scrape (every feature that calls the API) against the fake
//! API server, which
//! records each request; the calls, as RBAC sees them (API group, resource, verb), must be exactly those
//! `deploy/helm/epp/api-calls.yaml` lists. The chart builds its Role from that file and
//! `scripts/helm-check.py` checks every rendered Role against it, so a new call in the code without a
//! new rule (a pod forbidden in the cluster), or a rule nothing calls, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;
use epp_testkit::kube_api::objects::{inference_pool, pod};
use epp_testkit::kube_api::{inference_pools, FakeKubeApi, PODS};
use serde::Deserialize;

const NS: &str = "llm";
const POOL: &str = "vllm-pool";
const APP: (&str, &str) = ("app", "vllm");

#[derive(Debug, Deserialize)]
struct Call {
    group: String,
    resource: String,
    verbs: Vec<String>,
}

/// `(group, resource, verb)` of every call api-calls.yaml lists, `POOL_GROUP` resolved to `pool_group`.
fn listed_calls(pool_group: &str) -> BTreeSet<(String, String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/helm/epp/api-calls.yaml");
    let text = std::fs::read_to_string(path).expect("deploy/helm/epp/api-calls.yaml");
    let features: BTreeMap<String, Vec<Call>> =
        serde_yaml_ng::from_str(&text).expect("api-calls.yaml parses");
    let mut calls = BTreeSet::new();
    for call in features.into_values().flatten() {
        let group = if call.group == "POOL_GROUP" { pool_group.to_string() } else { call.group };
        for verb in call.verbs {
            calls.insert((group.clone(), call.resource.clone(), verb));
        }
    }
    calls
}

/// A recorded request (`METHOD path?query`) as RBAC sees it: `(group, resource, verb)`.
fn as_rbac(request: &str) -> Option<(String, String, String)> {
    let (method, uri) = request.split_once(' ')?;
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", "namespaces", _, rest @ ..] => ("", rest),
        ["apis", group, _, "namespaces", _, rest @ ..] => (*group, rest),
        // Cluster-scoped: TokenReview and SubjectAccessReview.
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
    let (resource, verb) = match (method, rest) {
        ("GET", [resource]) if watch => (resource, "watch"),
        ("GET", [resource]) => (resource, "list"),
        ("GET", [resource, _]) => (resource, "get"),
        ("POST", [resource]) => (resource, "create"),
        ("PUT", [resource, _]) => (resource, "update"),
        ("PATCH", [resource, _]) => (resource, "patch"),
        ("DELETE", [resource, ..]) => (resource, "delete"),
        _ => return None,
    };
    Some((group.to_string(), resource.to_string(), verb.to_string()))
}

#[tokio::test]
async fn epp_calls_exactly_what_the_chart_grants() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    let group = epp::discovery::GROUP_V1;
    api.apply(&inference_pools(group), NS, inference_pool(POOL, &[APP], &[8000]));
    api.apply(PODS, NS, pod("a", "127.0.0.2", &[APP], true));
    let args = epp_testkit::loopback_epp_args().into_iter().chain([
        "--shutdown-grace-period=200ms".into(),
        format!("--pool-name={POOL}"),
        format!("--pool-namespace={NS}"),
        format!("--pool-group={group}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--ha-enable-leader-election".into(),
        "--ha-retry-period=50ms".into(),
    ]);
    let epp = Server::start(Cli::parse_from(args)).await.expect("epp starts");
    // A scrape with a token: the metrics port's reviews (on by default in this mode).
    api.reviews().add_token("scraper", "prometheus", &[]);
    api.reviews().grant("prometheus", "get", "/metrics");
    let scrape =
        reqwest::Client::new().get(format!("http://{}/metrics", epp.metrics_addr)).bearer_auth("scraper");
    assert_eq!(scrape.send().await.expect("a scrape").status(), 200);
    // Every kind of call shows up: the lease created, then renewed (get, update), the pool and its pods
    // listed and watched.
    let wanted = listed_calls(group);
    let seen = || api.requests().iter().filter_map(|r| as_rbac(r)).collect::<BTreeSet<_>>();
    let all_seen = tokio::time::timeout(Duration::from_secs(60), async {
        while !wanted.is_subset(&seen()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let result = all_seen.await;
    epp.shutdown().await;
    let seen = seen();
    assert!(
        result.is_ok(),
        "calls never made although the chart grants them: {:?}",
        wanted.difference(&seen)
    );
    assert_eq!(seen, wanted, "epp's calls (left) != api-calls.yaml (right)");
    let unmapped: Vec<String> = api.requests().into_iter().filter(|r| as_rbac(r).is_none()).collect();
    assert!(unmapped.is_empty(), "requests outside any resource: {unmapped:?}");
}
