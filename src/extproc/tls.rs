//! Optional TLS on the ext_proc port: certificate files (`tls.crt`/`tls.key` in `--cert-path`), or a
//! self-signed certificate generated at start-up, as the Go EPP does with `--secure-serving`.

use std::path::Path;

use tonic::transport::{Identity, ServerTlsConfig};

#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// TLS config from `dir/tls.crt` and `dir/tls.key`, or self-signed when `dir` is `None`.
pub(crate) fn server_tls(dir: Option<&Path>) -> Result<ServerTlsConfig, TlsError> {
    let (cert, key) = match dir {
        Some(dir) => {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read(&path)
                    .map_err(|source| TlsError::Read { path: path.display().to_string(), source })
            };
            (read("tls.crt")?, read("tls.key")?)
        }
        None => {
            let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
            (ck.cert.pem().into_bytes(), ck.key_pair.serialize_pem().into_bytes())
        }
    };
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
