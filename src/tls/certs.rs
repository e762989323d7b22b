//! The server's certificate: `tls.crt` and `tls.key` from a directory, read again when they change on
//! disk (cert-manager and mounted Secrets rotate them in place), or self-signed for `localhost` when no
//! directory is given.
//!
//! The files are looked at (two `stat`s) at each TLS handshake; when either changed, both are read and
//! the new pair serves that handshake and the next ones. Connections already open keep the certificate
//! they were made with. A pair that does not load (half-written, key and certificate not matching) is
//! logged and the previous one kept, and it is tried again at the next handshake.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

use super::TlsError;

/// The PEM certificate and key from `dir/tls.crt` and `dir/tls.key`, or self-signed for `localhost` when
/// `dir` is `None`.
pub fn pem_pair(dir: Option<&Path>) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    match dir {
        Some(dir) => {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read(&path)
                    .map_err(|source| TlsError::Read { path: path.display().to_string(), source })
            };
            Ok((read("tls.crt")?, read("tls.key")?))
        }
        None => {
            let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
            Ok((ck.cert.pem().into_bytes(), ck.key_pair.serialize_pem().into_bytes()))
        }
    }
}

/// The pair in `dir` (or self-signed), checked: a certificate, a key, and the two matching.
pub(super) fn certified_key(dir: Option<&Path>, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let (cert, key) = pem_pair(dir)?;
    let where_ = dir.map_or_else(|| "self-signed".to_string(), |d| d.display().to_string());
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&cert).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::Pem { path: format!("{where_}/tls.crt"), what: "certificate" });
    }
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|_| TlsError::Pem { path: format!("{where_}/tls.key"), what: "private key" })?;
    let signing = provider.key_provider.load_private_key(key)?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match()?;
    Ok(certified)
}

/// When and how large each file was when last read: a change in either means a new pair.
type Stamp = [Option<(SystemTime, u64)>; 2];

fn stamp(dir: &Path) -> Stamp {
    let of =
        |name: &str| std::fs::metadata(dir.join(name)).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
    [of("tls.crt"), of("tls.key")]
}

/// Serves the current pair, reading the files again when they change.
#[derive(Debug)]
pub(super) struct ReloadingCert {
    dir: Option<PathBuf>,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
    stamp: Mutex<Stamp>,
}

impl ReloadingCert {
    pub(super) fn new(dir: Option<&Path>, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let stamp = dir.map(stamp).unwrap_or_default();
        let current = ArcSwap::from_pointee(certified_key(dir, &provider)?);
        Ok(Self { dir: dir.map(Path::to_path_buf), provider, current, stamp: Mutex::new(stamp) })
    }

    fn reload_if_changed(&self) {
        let Some(dir) = &self.dir else { return };
        let now = stamp(dir);
        let mut seen = self.stamp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *seen == now {
            return;
        }
        match certified_key(Some(dir), &self.provider) {
            Ok(pair) => {
                self.current.store(Arc::new(pair));
                *seen = now;
                tracing::info!(dir = %dir.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "TLS certificate changed but does not load; keeping the previous one");
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.reload_if_changed();
        Some(self.current.load_full())
    }
}
