//! `--tls-min-version` and `--tls-cipher-suites`: which TLS versions and TLS 1.2 cipher suites every
//! server of epp accepts. The names are Go's (`crypto/tls`), as llm-d-router's flags take them
//! (`llm-d/llm-d-router:pkg/epp/server/options.go`), so a Deployment's args keep working; an unknown or
//! unsupported value stops epp at start-up, naming it and what is supported.
//!
//! epp's TLS is rustls, which implements TLS 1.2 and 1.3 with ECDHE and AEAD suites only: TLS 1.0/1.1,
//! RSA key exchange and CBC suites are refused by name. As in Go, the TLS 1.3 suites are not
//! configurable (listing them is accepted and changes nothing).

use std::sync::Arc;

use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// The lowest TLS version accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    #[default]
    Tls12,
    Tls13,
}

/// What the servers accept; the default is TLS 1.2 and 1.3 with every suite rustls offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsPolicy {
    pub min_version: TlsVersion,
    /// The TLS 1.2 suites allowed, by rustls name; empty: all of them.
    pub tls12_suites: Vec<String>,
}

/// A value the flags cannot be honoured with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TlsPolicyError {
    #[error("--tls-min-version {0:?}: epp's TLS (rustls) implements TLS 1.2 and 1.3 only; use VersionTLS12 or VersionTLS13")]
    VersionTooLow(String),
    #[error("--tls-min-version {0:?}: unknown; use VersionTLS12 or VersionTLS13")]
    UnknownVersion(String),
    #[error("--tls-cipher-suites {name:?}: not supported (epp's TLS implements the ECDHE AEAD suites only: {supported})")]
    UnknownSuite { name: String, supported: String },
}

impl TlsPolicy {
    /// Parses the flags' values (`None`: the default).
    pub fn parse(min_version: Option<&str>, suites: &[String]) -> Result<Self, TlsPolicyError> {
        let min_version = match min_version.map(str::trim) {
            None | Some("") => TlsVersion::Tls12,
            Some(v) => parse_version(v)?,
        };
        let available = ring::default_provider().cipher_suites;
        let mut tls12_suites = Vec::new();
        for name in suites.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            let found = available.iter().find(|s| suite_matches(s, name));
            match found {
                Some(SupportedCipherSuite::Tls12(_)) => tls12_suites.push(suite_name(found)),
                // TLS 1.3's suites are always on, as in Go.
                Some(SupportedCipherSuite::Tls13(_)) => {}
                None => {
                    let supported = available
                        .iter()
                        .map(|s| suite_name(Some(s)).replacen("TLS13_", "TLS_", 1))
                        .collect::<Vec<_>>();
                    return Err(TlsPolicyError::UnknownSuite {
                        name: name.to_string(),
                        supported: supported.join(", "),
                    });
                }
            }
        }
        Ok(Self { min_version, tls12_suites })
    }

    /// The versions a server built with this policy speaks.
    pub fn versions(&self) -> &'static [&'static SupportedProtocolVersion] {
        static BOTH: [&SupportedProtocolVersion; 2] =
            [&tokio_rustls::rustls::version::TLS13, &tokio_rustls::rustls::version::TLS12];
        static TLS13: [&SupportedProtocolVersion; 1] = [&tokio_rustls::rustls::version::TLS13];
        match self.min_version {
            TlsVersion::Tls12 => &BOTH,
            TlsVersion::Tls13 => &TLS13,
        }
    }

    /// ring's provider with only the allowed TLS 1.2 suites (and every TLS 1.3 one).
    pub fn provider(&self) -> Arc<CryptoProvider> {
        let mut provider = ring::default_provider();
        if !self.tls12_suites.is_empty() {
            provider.cipher_suites.retain(|s| match s {
                SupportedCipherSuite::Tls13(_) => true,
                SupportedCipherSuite::Tls12(_) => self.tls12_suites.contains(&suite_name(Some(s))),
            });
        }
        Arc::new(provider)
    }
}

fn parse_version(v: &str) -> Result<TlsVersion, TlsPolicyError> {
    let normal = v.to_ascii_lowercase().replace(['.', '_', ' '], "");
    match normal.trim_start_matches("version").trim_start_matches("tlsv").trim_start_matches("tls") {
        "12" => Ok(TlsVersion::Tls12),
        "13" => Ok(TlsVersion::Tls13),
        "10" | "11" | "ssl30" => Err(TlsPolicyError::VersionTooLow(v.to_string())),
        _ => Err(TlsPolicyError::UnknownVersion(v.to_string())),
    }
}

fn suite_name(suite: Option<&SupportedCipherSuite>) -> String {
    suite.map(|s| format!("{:?}", s.suite())).unwrap_or_default()
}

/// Go's name for a rustls suite: rustls names the TLS 1.3 suites `TLS13_…` where Go (and IANA) write
/// `TLS_…`, and Go also knows the ChaCha20 suites without their hash (`…_CHACHA20_POLY1305`).
fn suite_matches(suite: &SupportedCipherSuite, name: &str) -> bool {
    let own = suite_name(Some(suite)).replacen("TLS13_", "TLS_", 1);
    own.eq_ignore_ascii_case(name)
        || own.strip_suffix("_SHA256").is_some_and(|short| short.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn go_names_parse() {
        assert_eq!(TlsPolicy::parse(None, &[]).map(|p| p.min_version), Ok(TlsVersion::Tls12));
        for v in ["VersionTLS13", "1.3", "TLS13", "tlsv1.3"] {
            assert_eq!(TlsPolicy::parse(Some(v), &[]).map(|p| p.min_version), Ok(TlsVersion::Tls13), "{v}");
        }
        let p = TlsPolicy::parse(
            Some("VersionTLS12"),
            &names(&[
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                "TLS_AES_128_GCM_SHA256",
            ]),
        )
        .expect("valid");
        assert_eq!(
            p.tls12_suites,
            names(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"])
        );
        let provider = p.provider();
        let tls12 =
            provider.cipher_suites.iter().filter(|s| matches!(s, SupportedCipherSuite::Tls12(_))).count();
        assert_eq!(tls12, 2, "only the listed TLS 1.2 suites");
        assert!(provider.cipher_suites.iter().any(|s| matches!(s, SupportedCipherSuite::Tls13(_))));
    }

    #[test]
    fn unsupported_values_are_refused_by_name() {
        assert_eq!(
            TlsPolicy::parse(Some("VersionTLS10"), &[]),
            Err(TlsPolicyError::VersionTooLow("VersionTLS10".into()))
        );
        assert!(matches!(
            TlsPolicy::parse(Some("VersionTLS14"), &[]),
            Err(TlsPolicyError::UnknownVersion(_))
        ));
        let err = TlsPolicy::parse(None, &names(&["TLS_RSA_WITH_AES_128_CBC_SHA"])).expect_err("CBC");
        let text = err.to_string();
        assert!(
            text.contains("TLS_RSA_WITH_AES_128_CBC_SHA")
                && text.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "{text}"
        );
    }
}
