//! `--inference-pool`: the allow-list follows the pool's pods, read through the real kube-rs client from
//! the fake API server (no registry ships a Kubernetes API server; what a real one would add is RBAC and
//! its own watch timing, which epp's discovery tests cover the same way).

use std::time::Duration;

use clap::Parser;
use epp_pd_sidecar::cli::Cli;
use epp_testkit::kube_api::objects::{inference_pool, pod};
use epp_testkit::kube_api::{inference_pools, FakeKubeApi, PODS};

const NS: &str = "llm";
const APP: (&str, &str) = ("app", "vllm");

#[tokio::test]
async fn only_the_pools_ready_pods_may_be_named_and_one_that_leaves_no_longer_may() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let pools = inference_pools(epp::discovery::GROUP_V1);
    api.apply(&pools, NS, inference_pool("vllm-pool", &[APP], &[8000]));
    api.apply(PODS, NS, pod("prefill-0", "10.0.0.7", &[APP], true));
    api.apply(PODS, NS, pod("stranger", "10.0.0.9", &[("app", "other")], true));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    let cli = Cli::parse_from([
        "epp-pd-sidecar",
        "--inference-pool",
        "llm/vllm-pool",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    let (allow, watch) = cli.allow_list().unwrap_or_else(|e| panic!("{e}"));
    let watch = watch.expect("a pool watch");
    assert!(watch.synced_within(Duration::from_secs(60)).await, "the pool is read");
    assert!(allow.check("10.0.0.7:8000".parse().unwrap()).is_ok());
    assert!(allow.check("10.0.0.7:9000".parse().unwrap()).is_err(), "not a target port");
    assert!(allow.check("10.0.0.9:8000".parse().unwrap()).is_err(), "not selected by the pool");
    assert!(api.delete(PODS, NS, "prefill-0"));
    for _ in 0..600 {
        if allow.check("10.0.0.7:8000".parse().unwrap()).is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("a pod that left the pool is still allowed");
}

#[test]
fn the_pool_flag_excludes_the_static_lists_and_ssrf_protection_off_allows_anyone() {
    assert!(
        Cli::try_parse_from(["s", "--inference-pool", "p", "--allowed-prefillers", "10.0.0.1:80"]).is_err()
    );
    let (allow, watch) = Cli::parse_from(["s", "--enable-ssrf-protection=false"]).allow_list().unwrap();
    assert!(watch.is_none() && allow.check("1.2.3.4:5".parse().unwrap()).is_ok());
}
