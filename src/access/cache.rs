//! Recent access decisions, so a scrape every few seconds does not cost two API calls each: a decision
//! for (token, verb, path) is kept for a while — an allow longer than a refusal, as controller-runtime's
//! delegating authorizer keeps them (`kubernetes-sigs/controller-runtime:pkg/metrics/filters/filters.go`)
//! — and reviewed again after. Errors are never kept: the next scrape asks again.
//!
//! Pure: the caller passes the time, so expiry is tested without waiting.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The most decisions kept; past it the expired ones go, then (a flood of distinct tokens) all.
const MAX_ENTRIES: usize = 4096;

/// A decision the API server made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// TokenReview did not authenticate the token.
    Unauthenticated,
    /// SubjectAccessReview said no, with its reason.
    Forbidden(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    token: String,
    verb: String,
    path: String,
}

/// The decisions, each with when it expires.
#[derive(Debug)]
pub struct DecisionCache {
    allow_ttl: Duration,
    deny_ttl: Duration,
    entries: HashMap<Key, (Decision, Instant)>,
}

impl DecisionCache {
    pub fn new(allow_ttl: Duration, deny_ttl: Duration) -> Self {
        Self { allow_ttl, deny_ttl, entries: HashMap::new() }
    }

    /// The decision for `token` on `verb path`, if one was made and has not expired at `now`.
    pub fn get(&self, token: &str, verb: &str, path: &str, now: Instant) -> Option<Decision> {
        let key = Key { token: token.to_string(), verb: verb.to_string(), path: path.to_string() };
        self.entries.get(&key).filter(|(_, expires)| now < *expires).map(|(d, _)| d.clone())
    }

    /// Keeps `decision`, made at `now`.
    pub fn put(&mut self, token: &str, verb: &str, path: &str, decision: Decision, now: Instant) {
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.retain(|_, (_, expires)| now < *expires);
            if self.entries.len() >= MAX_ENTRIES {
                self.entries.clear();
            }
        }
        let ttl = if decision == Decision::Allowed { self.allow_ttl } else { self.deny_ttl };
        let key = Key { token: token.to_string(), verb: verb.to_string(), path: path.to_string() };
        self.entries.insert(key, (decision, now + ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOW: Duration = Duration::from_secs(60);
    const DENY: Duration = Duration::from_secs(10);

    #[test]
    fn a_decision_is_kept_for_its_ttl_then_expires() {
        let mut cache = DecisionCache::new(ALLOW, DENY);
        let t0 = Instant::now();
        cache.put("good", "get", "/metrics", Decision::Allowed, t0);
        cache.put("bad", "get", "/metrics", Decision::Forbidden("no".into()), t0);
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(cache.get("good", "get", "/metrics", at(59)), Some(Decision::Allowed));
        assert_eq!(cache.get("good", "get", "/metrics", at(60)), None, "an allow expires after 60 s");
        assert_eq!(cache.get("bad", "get", "/metrics", at(9)), Some(Decision::Forbidden("no".into())));
        assert_eq!(cache.get("bad", "get", "/metrics", at(10)), None, "a refusal after 10 s");
    }

    #[test]
    fn a_decision_is_for_one_token_verb_and_path() {
        let mut cache = DecisionCache::new(ALLOW, DENY);
        let now = Instant::now();
        cache.put("t", "get", "/metrics", Decision::Allowed, now);
        assert_eq!(cache.get("t", "get", "/debug/route", now), None);
        assert_eq!(cache.get("t", "post", "/metrics", now), None);
        assert_eq!(cache.get("u", "get", "/metrics", now), None);
    }

    #[test]
    fn a_flood_of_tokens_stays_bounded() {
        let mut cache = DecisionCache::new(ALLOW, DENY);
        let now = Instant::now();
        for i in 0..MAX_ENTRIES + 10 {
            cache.put(&format!("t{i}"), "get", "/metrics", Decision::Unauthenticated, now);
        }
        assert!(cache.len() <= MAX_ENTRIES);
    }
}
