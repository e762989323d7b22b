//! The real epp server in InferencePool mode against the fake API server: readiness waits for the
//! pool, routing follows the pods as they become ready, unready, deleted, and as the pool goes away
//! (503), and the per-endpoint series follow the set. Model servers are fake `/metrics` pages on
//! 127.0.0.2 and 127.0.0.3 (one target port for the pool, two pod IPs). Every check polls for the
//! expected state; nothing is timed.

use std::net::{IpAddr, SocketAddr};

use crate::discovery_support::{eventually, APP, NS, POOL};
use crate::grpc_support::{immediate_of, request_headers, routing_of};
use clap::Parser;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use epp::app::Server;
use epp::cli::Cli;
use epp_testkit::kube_api::objects::{inference_pool, pod};
use epp_testkit::kube_api::{inference_pools, FakeKubeApi, PODS};
use tokio_stream::wrappers::ReceiverStream;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const IP_A: &str = "127.0.0.2";
const IP_B: &str = "127.0.0.3";

/// A vLLM `/metrics` page on `ip:port` (port 0: any).
async fn model_server(ip: &str, port: u16) -> SocketAddr {
    use axum::{routing::get, Router};
    let app = Router::new().route("/metrics", get(|| async { epp_sim::VllmPage::new("m").render() }));
    let ip: IpAddr = ip.parse().expect("ip");
    let listener = tokio::net::TcpListener::bind((ip, port)).await.expect("bind the model server");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// One headers-only request through ext_proc: the destination, or the immediate status.
async fn route(epp: &Server) -> Result<String, i32> {
    let mut client =
        ExternalProcessorClient::connect(format!("http://{}", epp.grpc_addr)).await.expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut answers = client.process(ReceiverStream::new(rx)).await.expect("a stream").into_inner();
    tx.send(request_headers(&[(":method", "GET"), (":path", "/v1/models")], true, None)).await.expect("send");
    let answer = answers.message().await.expect("an answer").expect("not the end");
    match answer.response.as_ref() {
        Some(
            envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response::ImmediateResponse(
                _,
            ),
        ) => Err(immediate_of(answer.response.as_ref().expect("set")).0),
        _ => routing_of(&answer).set.get("x-gateway-destination-endpoint").cloned().ok_or(0),
    }
}

/// Ten requests all go to `want` (or all get `want`'s error status).
async fn all_route_to(epp: &Server, want: Result<&str, i32>) {
    for _ in 0..10 {
        assert_eq!(route(epp).await.as_deref().map_err(|s| *s), want);
    }
}

async fn readiness(epp: &Server) -> i32 {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", epp.health_addr)).expect("uri");
    let mut health = HealthClient::new(channel.connect().await.expect("health port"));
    let request = HealthCheckRequest { service: "envoy.service.ext_proc.v3.ExternalProcessor".into() };
    health.check(request).await.map_or(-1, |r| r.into_inner().status)
}

#[tokio::test]
async fn routing_follows_the_pods_of_the_pool() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let a = model_server(IP_A, 0).await;
    let b = model_server(IP_B, a.port()).await;
    let port = a.port();
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    api.apply(PODS, NS, pod("a", IP_A, &[APP], true));
    let args = epp_testkit::loopback_epp_args().into_iter().chain([
        "--refresh-metrics-interval=20ms".into(),
        "--refresh-prometheus-metrics-interval=20ms".into(),
        "--shutdown-grace-period=200ms".into(),
        format!("--pool-name={POOL}"),
        format!("--pool-namespace={NS}"),
        format!("--kubeconfig={}", kubeconfig.display()),
    ]);
    let epp = Server::start(Cli::parse_from(args)).await.expect("epp starts in InferencePool mode");

    // No pool yet: not ready, and a request has no endpoint.
    eventually("the pool watch opens", || api.requests().iter().any(|r| r.contains("inferencepools?&watch")))
        .await;
    assert_eq!(readiness(&epp).await, ServingStatus::NotServing as i32);
    all_route_to(&epp, Err(503)).await;

    api.apply(&inference_pools(epp::discovery::GROUP_V1), NS, inference_pool(POOL, &[APP], &[port]));
    let names = |epp: &Server| epp.datastore.endpoints().iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    eventually("a joins", || names(&epp) == ["a-rank-0"]).await;
    let ready = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while readiness(&epp).await != ServingStatus::Serving as i32 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    assert!(ready.await.is_ok(), "ready once the pool has synced");
    all_route_to(&epp, Ok(&a.to_string())).await;

    // Scale up, then a turns unready: everything goes to b, whose telemetry is scraped.
    api.apply(PODS, NS, pod("b", IP_B, &[APP], true));
    eventually("b joins", || names(&epp) == ["a-rank-0", "b-rank-0"]).await;
    api.apply(PODS, NS, pod("a", IP_A, &[APP], false));
    eventually("a leaves", || names(&epp) == ["b-rank-0"]).await;
    all_route_to(&epp, Ok(&b.to_string())).await;
    eventually("b is scraped", || {
        epp.datastore.endpoints().iter().all(|e| e.telemetry().update_time.is_some())
    })
    .await;
    let series = |pod: &str| epp.metrics.encode().contains(&format!("model_server_pod=\"{pod}\""));
    eventually("b's per-pod series appear", || series("b-rank-0")).await;

    // a is back and b is deleted: everything goes to a, and b's per-pod series go.
    api.apply(PODS, NS, pod("a", IP_A, &[APP], true));
    assert!(api.delete(PODS, NS, "b"));
    eventually("only a", || names(&epp) == ["a-rank-0"]).await;
    all_route_to(&epp, Ok(&a.to_string())).await;
    eventually("b's per-pod series are removed", || !series("b-rank-0") && series("a-rank-0")).await;

    // The pool is deleted: no endpoints, 503, no crash.
    assert!(api.delete(&inference_pools(epp::discovery::GROUP_V1), NS, POOL));
    eventually("the pool empties", || names(&epp).is_empty()).await;
    all_route_to(&epp, Err(503)).await;
    epp.shutdown().await;
}
