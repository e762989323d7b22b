//! TLS on the ext_proc port through a real Envoy: mutual TLS (`--grpc-client-ca-file` with
//! deploy/envoy/envoy-mtls.yaml presenting the gateway's certificate) lets Envoy route while an Envoy
//! without a client certificate cannot open a stream; and a certificate rotated on disk under load is
//! served to the next connection with no request failing.

use std::sync::Arc;

use serde_json::json;

use crate::*;
use epp_testkit::certs::TestCa;
use epp_testkit::*;

fn chat() -> serde_json::Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2})
}

/// The certificate epp's ext_proc port presents to a new connection now.
async fn served_certificate(port: u16, ca: &TestCa) -> Vec<u8> {
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der().into()).expect("root");
    let config =
        ClientConfig::builder_with_provider(Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).expect("a certificate")
}

#[tokio::test]
async fn with_a_client_ca_only_the_gateways_certificate_opens_streams() {
    let test_name = "with_a_client_ca_only_the_gateways_certificate_opens_streams";
    if envoy_or_skip(test_name).is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let ca = TestCa::new();
    let (server_dir, client_dir, ca_file) =
        (dir.path().join("epp"), dir.path().join("gateway"), dir.path().join("ca.crt"));
    ca.issue_into(&server_dir);
    ca.issue_into(&client_dir);
    std::fs::write(&ca_file, ca.cert_pem()).expect("write the CA");
    let backends = start_test_backends(1, &[]);
    let (cert_path, client_ca) = (server_dir.display().to_string(), ca_file.display().to_string());
    let args = ["--cert-path", &cert_path, "--grpc-client-ca-file", &client_ca];
    let epp = start_epp_for(&backends.endpoints(), &args);
    let ports =
        vec![("EXTPROC_PORT", epp.grpc_port.to_string()), ("HEALTH_PORT", epp.health_port.to_string())];
    let mut mtls_vars = ports.clone();
    mtls_vars.push(("EXTPROC_CLIENT_CERT_DIR", client_dir.display().to_string()));
    mtls_vars.push(("EXTPROC_SERVER_CA", client_ca.clone()));
    let gateway = start_envoy_on_free_ports("envoy-mtls.yaml", &mtls_vars);
    let stranger = start_envoy_on_free_ports(FULL_DUPLEX, &ports);

    let client = http_client();
    let routed = post_json(&client, &gateway.url("/v1/chat/completions"), &chat()).await;
    assert_eq!(routed.status(), 200, "Envoy with the gateway's certificate routes");
    let refused = post_json(&client, &stranger.url("/v1/chat/completions"), &chat()).await;
    // No stream can open: the shipped configs fail closed.
    assert_eq!(refused.status(), 500, "Envoy without a client certificate gets no stream");
    assert_eq!(post_json(&client, &gateway.url("/v1/chat/completions"), &chat()).await.status(), 200);
}

#[tokio::test]
async fn a_certificate_rotated_under_load_serves_new_connections_and_fails_nothing() {
    let test_name = "a_certificate_rotated_under_load_serves_new_connections_and_fails_nothing";
    let dir = tempfile::tempdir().expect("dir");
    let ca = TestCa::new();
    let first = ca.issue_into(dir.path());
    let cert_path = dir.path().display().to_string();
    let Some(stack) = start_stack(test_name, FULL_DUPLEX, 1, &[], &["--cert-path", &cert_path]) else {
        return;
    };
    assert_eq!(served_certificate(stack.epp.grpc_port, &ca).await, first);

    // Eight clients send requests back to back while the pair is replaced on disk.
    let client = http_client();
    let url = stack.url("/v1/chat/completions");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..8)
        .map(|_| {
            let (client, url, stop) = (client.clone(), url.clone(), stop.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || statuses.len() < 20 {
                    statuses.push(post_json(&client, &url, &chat()).await.status().as_u16());
                }
                statuses
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let second = ca.issue_into(dir.path());
    assert_eq!(
        served_certificate(stack.epp.grpc_port, &ca).await,
        second,
        "the next connection gets the new pair"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut statuses = Vec::new();
    for task in load {
        statuses.extend(task.await.expect("load task"));
    }
    let failed = statuses.iter().filter(|s| **s != 200).count();
    assert_eq!(failed, 0, "{failed} of {} requests failed during the rotation", statuses.len());
}
