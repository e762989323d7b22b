//! Who may read the metrics port, against the fake API server's TokenReview and SubjectAccessReview: in
//! a Kubernetes mode `/metrics` and the route probe need a bearer token the API server authenticates and
//! authorises (`get` / `post` on the path), as the Go EPP's `--metrics-endpoint-auth` does; the API
//! server down means 503, never open; `--metrics-endpoint-auth=false` opens them again.

use std::collections::BTreeMap;

use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;
use epp_testkit::kube_api::objects::{inference_pool, pod};
use epp_testkit::kube_api::{inference_pools, FakeKubeApi, PODS};

use crate::discovery_support::{APP, NS, POOL};

/// epp in InferencePool mode against `api`, with the route probe and `extra` flags.
async fn epp_in_pool_mode(api: &FakeKubeApi, dir: &std::path::Path, extra: &[&str]) -> Server {
    let kubeconfig = api.write_kubeconfig(dir).expect("kubeconfig");
    api.apply(&inference_pools(epp::discovery::GROUP_V1), NS, inference_pool(POOL, &[APP], &[8000]));
    api.apply(PODS, NS, pod("a", "127.0.0.2", &[APP], true));
    let args = epp_testkit::loopback_epp_args()
        .into_iter()
        .chain([
            "--shutdown-grace-period=200ms".into(),
            "--enable-route-probe".into(),
            format!("--pool-name={POOL}"),
            format!("--pool-namespace={NS}"),
            format!("--kubeconfig={}", kubeconfig.display()),
        ])
        .chain(extra.iter().map(|a| (*a).to_string()));
    Server::start(Cli::parse_from(args)).await.expect("epp starts in InferencePool mode")
}

/// `(status, body)` of GET /metrics (or POST to the probe when `probe`) with `token`.
async fn call(epp: &Server, path: &str, token: Option<&str>) -> (u16, String, Option<String>) {
    let client = reqwest::Client::new();
    let url = format!("http://{}{path}", epp.metrics_addr);
    let mut request = if path == "/metrics" {
        client.get(&url)
    } else {
        client.post(&url).body(r#"{"model":"m","prompt":"hi"}"#)
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the metrics port answers");
    let status = response.status().as_u16();
    let challenge =
        response.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).map(String::from);
    (status, response.text().await.unwrap_or_default(), challenge)
}

fn outcomes(epp: &Server) -> BTreeMap<String, f64> {
    epp.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("epp_metrics_endpoint_auth_total{"))
        .filter_map(|l| {
            let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?.to_string();
            Some((outcome, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

const PROBE: &str = "/debug/route/v1/completions";

#[tokio::test]
async fn in_a_kubernetes_mode_the_metrics_port_needs_a_reviewed_token() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    {
        let mut reviews = api.reviews();
        reviews.add_token("prometheus-token", "system:serviceaccount:monitoring:prometheus", &["monitoring"]);
        reviews.add_token("nobody-token", "nobody", &[]);
        reviews.add_token("operator-token", "alice", &["operators"]);
        reviews.grant("monitoring", "get", "/metrics");
        reviews.grant("operators", "post", "/debug/route*");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let epp = epp_in_pool_mode(&api, dir.path(), &[]).await;

    let (status, _, challenge) = call(&epp, "/metrics", None).await;
    assert_eq!((status, challenge.as_deref()), (401, Some("Bearer")), "no token");
    assert_eq!(call(&epp, "/metrics", Some("forged")).await.0, 401, "a token nobody issued");
    let (status, body, _) = call(&epp, "/metrics", Some("nobody-token")).await;
    assert_eq!(status, 403, "authenticated, not authorised: {body}");
    assert!(body.contains("no grant"), "the API server's reason: {body}");
    let (status, body, _) = call(&epp, "/metrics", Some("prometheus-token")).await;
    assert_eq!(status, 200);
    assert!(body.contains("inference_pool_ready_pods"), "{body}");

    // The route probe follows the same rules, with its own path and verb.
    assert_eq!(call(&epp, PROBE, None).await.0, 401);
    assert_eq!(call(&epp, PROBE, Some("prometheus-token")).await.0, 403, "may read metrics, not probe");
    assert_eq!(call(&epp, PROBE, Some("operator-token")).await.0, 200);

    // The API server goes away: a decision it made stays in force a while, a new token gets 503.
    let reviews_before = api.requests().iter().filter(|r| r.contains("reviews")).count();
    api.stop();
    assert_eq!(call(&epp, "/metrics", Some("prometheus-token")).await.0, 200, "the cached allow");
    let (status, body, _) = call(&epp, "/metrics", Some("operator-token")).await;
    assert_eq!(status, 503, "fails closed, not open: {body}");
    // One TokenReview for the forged token; a TokenReview and a SubjectAccessReview for each other
    // (token, path) pair: nobody and prometheus on /metrics, prometheus and the operator on the probe.
    assert_eq!(reviews_before, 1 + 2 * 4, "each decision asked once; repeats come from the cache");

    let counted = outcomes(&epp);
    assert_eq!(counted.get("allowed"), Some(&3.0), "{counted:?}");
    assert_eq!(counted.get("unauthenticated"), Some(&3.0), "{counted:?}");
    assert_eq!(counted.get("forbidden"), Some(&2.0), "{counted:?}");
    assert_eq!(counted.get("unavailable"), Some(&1.0), "{counted:?}");
    epp.shutdown().await;
}

#[tokio::test]
async fn metrics_endpoint_auth_false_opens_the_port_again() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let epp = epp_in_pool_mode(&api, dir.path(), &["--metrics-endpoint-auth=false"]).await;
    assert_eq!(call(&epp, "/metrics", None).await.0, 200);
    assert!(!api.requests().iter().any(|r| r.contains("reviews")), "no review asked");
    epp.shutdown().await;
}
