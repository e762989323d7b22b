//! TLS for every server epp runs: the ext_proc port (`--secure-serving`, `--cert-path`), the metrics
//! port (`--metrics-cert-dir`) and epp-pd-sidecar's listener. One [`ServerTls`] recipe per server: where
//! the certificate comes from ([`certs`]: files read again when they rotate, or self-signed), the
//! [`TlsPolicy`] (`--tls-min-version`, `--tls-cipher-suites`), and optionally a client CA whose
//! certificates alone may connect (mutual TLS: `--grpc-client-ca-file`, `--metrics-client-ca-file`).
//! [`TlsIncoming`] accepts with it for tonic and axum alike.
//!
//! rustls with ring, which tonic, kube and reqwest already link: no OpenSSL.

mod certs;
mod listener;
mod policy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

pub use certs::pem_pair;
pub use listener::{TlsIncoming, HANDSHAKE_TIMEOUT};
pub use policy::{TlsPolicy, TlsPolicyError, TlsVersion};

/// Why a server's TLS could not be set up; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path} holds no usable PEM {what}")]
    Pem { path: String, what: &'static str },
    #[error("TLS configuration: {0}")]
    Config(#[from] tokio_rustls::rustls::Error),
    #[error("client CA {path}: {why}")]
    ClientCa { path: String, why: String },
}

/// How one server speaks TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerTls {
    /// `tls.crt` and `tls.key` in this directory, reloaded when they change; `None`: self-signed.
    pub cert_dir: Option<PathBuf>,
    /// Only clients with a certificate this CA bundle signed may connect.
    pub client_ca: Option<PathBuf>,
    pub policy: TlsPolicy,
    /// ALPN protocols offered (`h2` for gRPC; `h2` and `http/1.1` for HTTP).
    pub alpn: Vec<Vec<u8>>,
}

impl ServerTls {
    /// The rustls server configuration.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = self.policy.provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(self.policy.versions())?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(client_roots(path)?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| TlsError::ClientCa { path: path.display().to_string(), why: e.to_string() })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let resolver = certs::ReloadingCert::new(self.cert_dir.as_deref(), provider)?;
        let mut config = builder.with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols.clone_from(&self.alpn);
        Ok(Arc::new(config))
    }
}

fn client_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let bad = |why: String| TlsError::ClientCa { path: path.display().to_string(), why };
    let pem =
        std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests;
