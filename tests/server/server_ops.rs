//! The server's operational surface over real loopback sockets: gRPC health for every service name the
//! Go EPP answers, the Prometheus endpoint, TLS with provided certificates, and start-up errors.

use crate::grpc_support::*;
use clap::Parser;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use epp::app::Server;
use epp::cli::Cli;
use tokio_stream::wrappers::ReceiverStream;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[tokio::test]
async fn health_serves_liveness_readiness_and_the_ext_proc_name() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", epp.health_addr)).unwrap();
    let mut client = HealthClient::new(channel.connect().await.unwrap());
    for service in
        ["liveness", "readiness", "", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension"]
    {
        let r = client.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "service {service:?}");
    }
    let unknown = client.check(HealthCheckRequest { service: "nope".into() }).await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    epp.shutdown().await;
}

#[tokio::test]
async fn metrics_endpoint_serves_gie_and_llm_d_names() {
    let server = FakeModelServer::start(3, 0.5).await;
    let epp = start_epp(&[server.addr], &[]).await;
    let url = format!("http://{}/metrics", epp.metrics_addr);
    let mut text = String::new();
    wait_until(|| {
        text = epp.metrics.encode();
        text.contains("inference_pool_ready_pods{name=\"default-pool\"} 1")
    })
    .await;
    let response = reqwest::get(&url).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    for name in [
        "inference_pool_average_queue_size",
        "inference_pool_average_kv_cache_utilization",
        "llm_d_epp_ready_endpoints",
        "inference_extension_info",
        "llm_d_epp_info",
        // Every component's families are served even when it records nothing: flow control is off here.
        "# TYPE llm_d_epp_flow_control_queue_size gauge",
        "# TYPE inference_extension_flow_control_pool_saturation gauge",
        "# TYPE llm_d_epp_request_processing_duration_seconds histogram",
        "# TYPE inference_extension_prefix_indexer_size gauge",
    ] {
        assert!(body.contains(name), "{name} missing");
    }
    epp.shutdown().await;
}

#[tokio::test]
async fn tls_with_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.path().join("tls.crt"), ck.cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), ck.key_pair.serialize_pem()).unwrap();
    let cert_path = format!("--cert-path={}", dir.path().display());
    let args = [
        "epp",
        "--bind-address=127.0.0.1",
        "--grpc-port=0",
        "--grpc-health-port=0",
        "--metrics-port=0",
        "--secure-serving=true",
        &cert_path,
        "--shutdown-grace-period=200ms",
    ];
    let epp = Server::start(Cli::parse_from(args)).await.unwrap();
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ck.cert.pem()))
        .domain_name("localhost");
    let channel =
        tonic::transport::Channel::from_shared(format!("https://localhost:{}", epp.grpc_addr.port()))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut client = ExternalProcessorClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut responses = client.process(ReceiverStream::new(rx)).await.unwrap().into_inner();
    tx.send(request_headers(&[(":method", "GET"), (":path", "/v1/models")], true, None)).await.unwrap();
    // No endpoints: the answer is a 503, which proves the TLS stream carried a request both ways.
    let answer = responses.message().await.unwrap().unwrap().response.unwrap();
    assert_eq!(immediate_of(&answer).0, 503);
    epp.shutdown().await;
}

#[tokio::test]
async fn bad_configuration_is_a_startup_error_naming_the_field() {
    let config = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n\
                  - type: token-load-scorer\n  parameters:\n    queueThresholdToken: 5\n";
    let arg = format!("--config-text={config}");
    let args = [
        "epp",
        "--bind-address=127.0.0.1",
        "--grpc-port=0",
        "--grpc-health-port=0",
        "--metrics-port=0",
        &arg,
    ];
    let err = Server::start(Cli::parse_from(args)).await.unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("token-load-scorer") && text.contains("queueThresholdToken"), "{text}");
}

#[tokio::test]
async fn while_streams_drain_readiness_is_not_serving_and_liveness_is() {
    let server = FakeModelServer::start(0, 0.0).await;
    let epp = start_epp(&[server.addr], &["--shutdown-grace-period=20s"]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", epp.health_addr)).unwrap();
    let mut health = HealthClient::new(channel.connect().await.unwrap());
    // An open stream keeps the drain going.
    let stream = Stream::open(&epp).await;
    let headers = [(":method", "POST"), (":path", "/v1/completions")];
    stream.send(request_headers(&headers, false, None)).await;
    let draining = tokio::spawn(epp.shutdown());
    let status = |service: &'static str| {
        let mut client = health.clone();
        async move {
            client.check(HealthCheckRequest { service: service.into() }).await.map(|r| r.into_inner().status)
        }
    };
    let mut readiness = None;
    for _ in 0..200 {
        readiness = status("readiness").await.ok();
        if readiness == Some(ServingStatus::NotServing as i32) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(readiness, Some(ServingStatus::NotServing as i32), "readiness during the drain");
    let ext_proc = status("envoy.service.ext_proc.v3.ExternalProcessor").await.ok();
    assert_eq!(ext_proc, Some(ServingStatus::NotServing as i32));
    assert_eq!(
        status("liveness").await.ok(),
        Some(ServingStatus::Serving as i32),
        "liveness during the drain"
    );
    assert!(!draining.is_finished(), "the open stream holds the drain");
    drop(stream);
    draining.await.expect("shutdown completes once the stream is gone");
    assert!(
        health.check(HealthCheckRequest { service: "liveness".into() }).await.is_err(),
        "health port closed"
    );
}

#[tokio::test]
async fn during_the_shutdown_delay_readiness_is_not_serving_and_new_streams_are_still_served() {
    let server = FakeModelServer::start(0, 0.0).await;
    // Long enough that the new stream below lands inside it on any machine; the test does not wait it out.
    let epp = start_epp(&[server.addr], &["--shutdown-delay=60s"]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", epp.health_addr)).unwrap();
    let mut health = HealthClient::new(channel.connect().await.unwrap());
    let grpc_addr = epp.grpc_addr;
    let _shutting_down = tokio::spawn(epp.shutdown());
    let mut readiness = None;
    for _ in 0..200 {
        readiness = health
            .check(HealthCheckRequest { service: "readiness".into() })
            .await
            .ok()
            .map(|r| r.into_inner().status);
        if readiness == Some(ServingStatus::NotServing as i32) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(readiness, Some(ServingStatus::NotServing as i32), "readiness during the delay");

    // A gateway that has not yet seen NOT_SERVING still gets its new streams answered.
    let mut client = ExternalProcessorClient::connect(format!("http://{grpc_addr}")).await.expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut answers = client.process(ReceiverStream::new(rx)).await.expect("a stream").into_inner();
    let headers = [(":method", "GET"), (":path", "/v1/models")];
    tx.send(request_headers(&headers, true, None)).await.expect("send");
    let answer = answers.message().await.expect("an answer").expect("not the end");
    let routing = routing_of(&answer);
    assert_eq!(routing.set.get("x-gateway-destination-endpoint"), Some(&server.addr.to_string()));
}

/// `--log-format json`: the binary writes one JSON object per line, for log collectors.
#[test]
fn json_logs_are_one_object_per_line() {
    let args = ["--endpoints", "127.0.0.1:9", "--secure-serving=false", "--log-format", "json"];
    let mut epp = epp_testkit::start_epp_on_free_ports(&args, &[]).child;
    // The gRPC port accepts before the startup line is written (the listeners are bound first), so a
    // kill right after the port opens can beat it: wait for the line, under a generous deadline.
    let started =
        epp_testkit::wait_until(std::time::Duration::from_secs(30), || epp.logs().contains("epp serving"));
    epp.kill();
    let logs = epp.logs();
    assert!(started, "epp never logged its startup line: {logs}");
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "epp logged nothing");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"]["message"].is_string(), "{line}");
    }
}

/// Every line about a request carries its id: JSON logs put it in the `request` span of each line.
#[tokio::test]
async fn json_log_lines_about_a_request_carry_its_id() {
    let args = ["--endpoints", "127.0.0.1:9", "--secure-serving=false", "--log-format", "json"];
    let epp = epp_testkit::start_epp_on_free_ports(&args, &[("EPP_LOG", "debug")]);
    let mut client = ExternalProcessorClient::connect(format!("http://127.0.0.1:{}", epp.grpc_port))
        .await
        .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut answers = client.process(ReceiverStream::new(rx)).await.expect("a stream").into_inner();
    let headers = [(":method", "GET"), (":path", "/v1/models"), ("x-request-id", "log-me-7")];
    tx.send(request_headers(&headers, true, None)).await.expect("send");
    answers.message().await.expect("an answer").expect("not the end");
    drop(tx);
    let mut child = epp.child;
    child.kill();
    let logs = child.logs();
    let about: Vec<&str> = logs.lines().filter(|l| l.contains("\"scheduled\"")).collect();
    assert!(!about.is_empty(), "no scheduling line at debug: {logs}");
    for line in about {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["span"]["request_id"], "log-me-7", "{line}");
    }
}
