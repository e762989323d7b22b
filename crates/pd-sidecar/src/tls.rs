//! `--secure-proxy` (llm-d's default): the listener speaks TLS, with `tls.crt` and `tls.key` from
//! `--cert-path`, or a self-signed certificate made at start-up (as llm-d's sidecar and epp's ext_proc
//! port do). A handshake that fails or takes over ten seconds drops that connection only.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Why TLS could not be set up; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--cert-path: {0}")]
    Files(#[from] epp::extproc::tls::TlsError),
    #[error("--cert-path: {path} holds no usable PEM {what}")]
    Pem { path: String, what: &'static str },
    #[error("TLS configuration: {0}")]
    Config(#[from] tokio_rustls::rustls::Error),
}

/// The server configuration for `dir` (`None`: self-signed).
pub fn server_config(dir: Option<&Path>) -> Result<Arc<ServerConfig>, TlsError> {
    let (cert, key) = epp::extproc::tls::pem_pair(dir)?;
    let where_ = dir.map_or_else(|| "self-signed".to_string(), |d| d.display().to_string());
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&cert).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::Pem { path: format!("{where_}/tls.crt"), what: "certificate" });
    }
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|_| TlsError::Pem { path: format!("{where_}/tls.key"), what: "private key" })?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(Arc::new(config))
}

/// A TCP listener whose connections are TLS, for `axum::serve`.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        Self { tcp, acceptor: TlsAcceptor::from(config) }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.tcp.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match tokio::time::timeout(Duration::from_secs(10), self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::debug!(peer = %addr, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(peer = %addr, "TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
