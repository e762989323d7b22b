//! Real handshakes over loopback between a [`TlsIncoming`] server and a rustls client: rotation on disk,
//! the version policy, and client certificates.

use std::sync::Arc;

use epp_testkit::certs::{Issued, TestCa};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::*;

fn roots(ca: &TestCa) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add(ca.cert_der().into()).expect("root");
    roots
}

fn write_pair(dir: &Path, issued: &Issued) {
    std::fs::write(dir.join("tls.crt"), &issued.cert_pem).expect("write cert");
    std::fs::write(dir.join("tls.key"), &issued.key_pem).expect("write key");
}

/// Serves `tls` on loopback, echoing one line per connection; returns the address.
async fn serve(tls: &ServerTls) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mut incoming = TlsIncoming::new(listener, tls.server_config().expect("config")).expect("incoming");
    let addr = axum::serve::Listener::local_addr(&incoming).expect("addr");
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = axum::serve::Listener::accept(&mut incoming).await;
            tokio::spawn(async move {
                let mut buf = [0u8; 4];
                if stream.read_exact(&mut buf).await.is_ok() {
                    let _ = stream.write_all(&buf).await;
                }
            });
        }
    });
    addr
}

/// Connects and exchanges a message; returns the server's leaf certificate, or the error.
async fn connect(addr: std::net::SocketAddr, config: ClientConfig) -> Result<Vec<u8>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut tls = TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let leaf =
        tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default();
    // With TLS 1.3 a refused client certificate only shows once the server answers (or does not).
    tls.write_all(b"ping").await.map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    Ok(leaf)
}

fn client(roots: RootCertStore) -> ClientConfig {
    ClientConfig::builder_with_provider(Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

#[tokio::test]
async fn a_rotated_certificate_is_served_to_the_next_connection() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("dir");
    let (first, second) = (ca.issue(), ca.issue());
    write_pair(dir.path(), &first);
    let tls = ServerTls { cert_dir: Some(dir.path().to_path_buf()), ..Default::default() };
    let addr = serve(&tls).await;
    assert_eq!(connect(addr, client(roots(&ca))).await, Ok(first.der.clone()));
    write_pair(dir.path(), &second);
    assert_eq!(connect(addr, client(roots(&ca))).await, Ok(second.der.clone()), "the new pair");
    // A broken pair (half-written) keeps the last good one in service.
    std::fs::write(dir.path().join("tls.key"), "not a key").expect("write");
    assert_eq!(connect(addr, client(roots(&ca))).await, Ok(second.der), "the last good pair");
}

#[tokio::test]
async fn the_minimum_version_is_enforced() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("dir");
    write_pair(dir.path(), &ca.issue());
    let policy = TlsPolicy::parse(Some("VersionTLS13"), &[]).expect("policy");
    let addr =
        serve(&ServerTls { cert_dir: Some(dir.path().to_path_buf()), policy, ..Default::default() }).await;
    let tls12_only =
        ClientConfig::builder_with_provider(Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&tokio_rustls::rustls::version::TLS12])
            .expect("versions")
            .with_root_certificates(roots(&ca))
            .with_no_client_auth();
    assert!(connect(addr, tls12_only).await.is_err(), "a TLS 1.2 client is refused");
    assert!(connect(addr, client(roots(&ca))).await.is_ok(), "TLS 1.3 is served");
}

#[tokio::test]
async fn with_a_client_ca_only_its_clients_connect() {
    let (server_ca, client_ca, stranger_ca) = (TestCa::new(), TestCa::new(), TestCa::new());
    let dir = tempfile::tempdir().expect("dir");
    write_pair(dir.path(), &server_ca.issue());
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, client_ca.cert_pem()).expect("write");
    let tls = ServerTls {
        cert_dir: Some(dir.path().to_path_buf()),
        client_ca: Some(ca_file),
        ..Default::default()
    };
    let addr = serve(&tls).await;
    let with_cert = |ca: &TestCa| {
        let issued = ca.issue();
        let certs = vec![CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).expect("cert")];
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("key");
        ClientConfig::builder_with_provider(Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots(&server_ca))
            .with_client_auth_cert(certs, key)
            .expect("client cert")
    };
    assert!(connect(addr, client(roots(&server_ca))).await.is_err(), "no client certificate");
    assert!(connect(addr, with_cert(&stranger_ca)).await.is_err(), "a certificate of another CA");
    assert!(connect(addr, with_cert(&client_ca)).await.is_ok(), "the gateway's certificate");
}

#[test]
fn setup_errors_name_the_file() {
    let missing = ServerTls { cert_dir: Some(PathBuf::from("/nonexistent-dir")), ..Default::default() };
    let e = missing.server_config().expect_err("no files");
    assert!(e.to_string().contains("/nonexistent-dir/tls.crt"), "{e}");
    let dir = tempfile::tempdir().expect("dir");
    let empty = dir.path().join("ca.crt");
    std::fs::write(&empty, "").expect("write");
    let e = ServerTls { client_ca: Some(empty), ..Default::default() }.server_config().expect_err("empty CA");
    assert!(e.to_string().contains("no certificate in it"), "{e}");
    assert!(ServerTls::default().server_config().is_ok(), "self-signed");
}
