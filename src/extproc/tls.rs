//! Optional TLS on the ext_proc port: certificate files (`tls.crt`/`tls.key` in `--cert-path`), or a
//! self-signed certificate generated at start-up, as the Go EPP does with `--secure-serving`.

use std::path::Path;

use tonic::transport::{Identity, ServerTlsConfig};

/// Why the certificate could not be had; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The PEM certificate and key from `dir/tls.crt` and `dir/tls.key`, or self-signed for `localhost` when
/// `dir` is `None` (epp's ext_proc port, and epp-pd-sidecar's listener).
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

/// TLS config from `dir/tls.crt` and `dir/tls.key`, or self-signed when `dir` is `None`.
pub(crate) fn server_tls(dir: Option<&Path>) -> Result<ServerTlsConfig, TlsError> {
    let (cert, key) = pem_pair(dir)?;
    Ok(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_is_generated() {
        assert!(server_tls(None).is_ok());
    }

    #[test]
    fn missing_files_name_the_path() {
        let e = server_tls(Some(Path::new("/nonexistent-dir"))).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/tls.crt"), "{e}");
    }
}
