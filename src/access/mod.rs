//! Who may read epp's HTTP endpoints: `/metrics` and the route probe (`/debug/route`) sit behind one
//! [`Gate`], as the Go EPP's `--metrics-endpoint-auth` puts its metrics server behind controller-runtime's
//! filter: a bearer token, authenticated by TokenReview and authorised by SubjectAccessReview (`get` on
//! the non-resource URL), decisions kept briefly ([`cache`]).
//!
//! When the gate is on:
//! - no bearer token, or one nobody recognises → 401;
//! - a token whose user may not `get` the path → 403, with the API server's reason;
//! - the API server unreachable, slow or misconfigured → 503: the endpoints fail closed, never open;
//! - a token listed in `--metrics-token-file` → allowed without asking the API server (a scraper outside
//!   the cluster, or static mode with no API server at all).
//!
//! Each outcome is counted in `epp_metrics_endpoint_auth_total{outcome}`.

pub mod cache;
mod review;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

pub use cache::{Decision, DecisionCache};
pub use review::{ReviewError, Reviewer};

use crate::discovery::ClientSource;
use crate::metrics::MetricsRegistry;

/// How the gate is built (resolved from the flags: `--metrics-endpoint-auth`, `--metrics-token-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessConfig {
    /// Review tokens with the API server this client reaches; `None`: no Kubernetes reviews.
    pub kubernetes: Option<ClientSource>,
    /// Bearer tokens allowed as they are, one per line.
    pub token_file: Option<PathBuf>,
    /// How long an allow is kept.
    pub allow_ttl: Duration,
    /// How long a refusal (401 or 403) is kept.
    pub deny_ttl: Duration,
    /// How long one review may take before the request is answered 503.
    pub review_timeout: Duration,
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            kubernetes: None,
            token_file: None,
            allow_ttl: Duration::from_secs(60),
            deny_ttl: Duration::from_secs(10),
            review_timeout: Duration::from_secs(5),
        }
    }
}

/// Why the gate could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("--metrics-token-file {path}: {source}", path = path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--metrics-token-file {}: no token in it", .0.display())]
    NoToken(PathBuf),
}

/// Why a request was refused, as the HTTP status and body it is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    Unauthenticated,
    Forbidden(String),
    Unavailable(String),
}

impl Denied {
    pub fn status(&self) -> u16 {
        match self {
            Denied::Unauthenticated => 401,
            Denied::Forbidden(_) => 403,
            Denied::Unavailable(_) => 503,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Denied::Unauthenticated => {
                "Unauthorized: a bearer token the API server authenticates is required".into()
            }
            Denied::Forbidden(reason) if reason.is_empty() => "Forbidden".into(),
            Denied::Forbidden(reason) => format!("Forbidden: {reason}"),
            Denied::Unavailable(why) => format!("cannot check access now: {why}"),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Checks each request's bearer token.
#[derive(Debug)]
pub struct Gate {
    static_tokens: Vec<String>,
    reviewer: Option<Reviewer>,
    cache: Mutex<DecisionCache>,
    outcomes: Family<OutcomeLabels, Counter>,
}

impl Gate {
    /// The gate `config` describes, or `None` when it describes none (the endpoints are open).
    pub fn build(
        config: &AccessConfig,
        registry: &MetricsRegistry,
    ) -> Result<Option<Arc<Self>>, AccessError> {
        if config.kubernetes.is_none() && config.token_file.is_none() {
            return Ok(None);
        }
        let static_tokens = match &config.token_file {
            Some(path) => read_tokens(path)?,
            None => Vec::new(),
        };
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        for outcome in ["allowed", "unauthenticated", "forbidden", "unavailable"] {
            outcomes.get_or_create(&OutcomeLabels { outcome }).inc_by(0);
        }
        registry.register(
            "epp_metrics_endpoint_auth",
            "Requests to the metrics port's endpoints (/metrics, /debug/route) by access outcome: allowed, \
             unauthenticated (401), forbidden (403), unavailable (503: the API server could not be asked)",
            outcomes.clone(),
        );
        Ok(Some(Arc::new(Self {
            static_tokens,
            reviewer: config.kubernetes.clone().map(|source| Reviewer::new(source, config.review_timeout)),
            cache: Mutex::new(DecisionCache::new(config.allow_ttl, config.deny_ttl)),
            outcomes,
        })))
    }

    /// Whether a request with `authorization` (its `Authorization` header) may `verb` `path`.
    pub async fn check(&self, authorization: Option<&str>, verb: &str, path: &str) -> Result<(), Denied> {
        let result = self.decide(authorization, verb, path).await;
        let outcome = match &result {
            Ok(()) => "allowed",
            Err(Denied::Unauthenticated) => "unauthenticated",
            Err(Denied::Forbidden(_)) => "forbidden",
            Err(Denied::Unavailable(_)) => "unavailable",
        };
        self.outcomes.get_or_create(&OutcomeLabels { outcome }).inc();
        result
    }

    async fn decide(&self, authorization: Option<&str>, verb: &str, path: &str) -> Result<(), Denied> {
        let token = authorization.and_then(bearer_token).ok_or(Denied::Unauthenticated)?;
        if self.static_tokens.iter().any(|t| constant_time_eq(t.as_bytes(), token.as_bytes())) {
            return Ok(());
        }
        let Some(reviewer) = &self.reviewer else { return Err(Denied::Unauthenticated) };
        let cached = self.lock_cache().get(token, verb, path, Instant::now());
        let decision = match cached {
            Some(decision) => decision,
            None => {
                let decision = reviewer.review(token, verb, path).await.map_err(|e| {
                    tracing::warn!(error = %e, path, "metrics endpoint auth: the API server could not be asked");
                    Denied::Unavailable(e.to_string())
                })?;
                self.lock_cache().put(token, verb, path, decision.clone(), Instant::now());
                decision
            }
        };
        match decision {
            Decision::Allowed => Ok(()),
            Decision::Unauthenticated => Err(Denied::Unauthenticated),
            Decision::Forbidden(reason) => Err(Denied::Forbidden(reason)),
        }
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, DecisionCache> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The token of `Bearer <token>` (the scheme in any case, as RFC 7235 says).
fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn read_tokens(path: &Path) -> Result<Vec<String>, AccessError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| AccessError::TokenFile { path: path.to_path_buf(), source })?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if tokens.is_empty() {
        return Err(AccessError::NoToken(path.to_path_buf()));
    }
    Ok(tokens)
}

/// Compares without an early exit, so the time taken says nothing about how much of a token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_rfc_7235_writes_them() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[tokio::test]
    async fn static_tokens_allow_without_an_api_server() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# scrapers\nsecret-1\n\nsecret-2\n").expect("write");
        let config = AccessConfig { token_file: Some(path.clone()), ..Default::default() };
        let registry = MetricsRegistry::new("test");
        let gate = Gate::build(&config, &registry).expect("builds").expect("a gate");
        assert_eq!(gate.check(Some("Bearer secret-2"), "get", "/metrics").await, Ok(()));
        assert_eq!(
            gate.check(Some("Bearer secret-3"), "get", "/metrics").await,
            Err(Denied::Unauthenticated)
        );
        assert_eq!(gate.check(None, "get", "/metrics").await, Err(Denied::Unauthenticated));
        let text = registry.encode();
        assert!(text.contains("epp_metrics_endpoint_auth_total{outcome=\"allowed\"} 1"), "{text}");
        assert!(text.contains("epp_metrics_endpoint_auth_total{outcome=\"unauthenticated\"} 2"), "{text}");

        std::fs::write(&path, "\n# none\n").expect("write");
        let err = Gate::build(&config, &registry).expect_err("no token");
        assert!(err.to_string().contains("no token in it"), "{err}");
    }

    #[test]
    fn no_gate_when_nothing_asks_for_one() {
        let registry = MetricsRegistry::new("test");
        assert!(Gate::build(&AccessConfig::default(), &registry).expect("builds").is_none());
    }
}
