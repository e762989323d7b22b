//! Which endpoints a request may go to: the pool, narrowed by the gateway's subset hint.
//!
//! The hint arrives as strings in Envoy's metadata and is parsed once, when the request arrives, into
//! addresses; the director and every flow-control dispatch cycle then match addresses, never strings. An
//! entry that is not an `ip:port` or a bare IP is the gateway's mistake, answered with a 400 that names
//! it (silently dropping it would turn a typo into a 503 or, worse, into a wider subset).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::Endpoint;

/// The gateway's `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset` value, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SubsetHint {
    /// No hint: every endpoint is a candidate.
    #[default]
    Absent,
    /// Only these entries; an empty list means no candidate at all.
    Only(Vec<SubsetEntry>),
}

/// One subset entry: an exact `ip:port`, or a bare IP matching every port of that IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubsetEntry {
    Exact(SocketAddr),
    Ip(IpAddr),
}

/// A subset entry that is neither `ip:port` nor a bare IP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid endpoint subset entry {entry:?}: expected ip:port or ip")]
pub struct InvalidSubsetEntry {
    pub entry: String,
}

/// How subset entries are matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SubsetMatch {
    /// `ip:port` entries match exactly; a bare `ip` matches every port of that IP.
    #[default]
    Exact,
    /// The Go EPP's behaviour: the port is ignored, so one entry selects every port of its IP.
    IpOnly,
    /// The hint is ignored (`--disable-endpoint-subset-filter`).
    Disabled,
}

impl SubsetEntry {
    /// Parses `ip:port`, `[v6]:port`, `ip` or `[v6]`.
    pub fn parse(raw: &str) -> Result<Self, InvalidSubsetEntry> {
        let raw = raw.trim();
        if let Ok(addr) = raw.parse::<SocketAddr>() {
            return Ok(SubsetEntry::Exact(addr));
        }
        let bare = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(raw);
        bare.parse::<IpAddr>().map(SubsetEntry::Ip).map_err(|_| InvalidSubsetEntry { entry: raw.to_string() })
    }

    fn matches(&self, endpoint: &Endpoint, mode: SubsetMatch) -> bool {
        match (self, mode) {
            (SubsetEntry::Exact(addr), SubsetMatch::Exact) => *addr == endpoint.addr,
            (SubsetEntry::Exact(addr), _) => addr.ip() == endpoint.addr.ip(),
            (SubsetEntry::Ip(ip), _) => *ip == endpoint.addr.ip(),
        }
    }
}

impl SubsetHint {
    /// A hint listing `entries`; the first malformed entry is the error.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, InvalidSubsetEntry> {
        entries.into_iter().map(SubsetEntry::parse).collect::<Result<_, _>>().map(SubsetHint::Only)
    }

    /// Whether the hint narrows the pool under `mode` (so a request's candidates differ from the pool's).
    pub fn narrows(&self, mode: SubsetMatch) -> bool {
        matches!(self, SubsetHint::Only(_)) && mode != SubsetMatch::Disabled
    }

    /// A hint that lists no endpoint at all: no candidate can ever match, so even flow control fails it
    /// at once rather than queueing it.
    pub fn is_explicitly_empty(&self, mode: SubsetMatch) -> bool {
        mode != SubsetMatch::Disabled && matches!(self, SubsetHint::Only(list) if list.is_empty())
    }
}

/// The endpoints of `pool` allowed by `hint`, in pool order.
pub fn locate(pool: &[Arc<Endpoint>], hint: &SubsetHint, mode: SubsetMatch) -> Vec<Arc<Endpoint>> {
    let entries = match (hint, mode) {
        (SubsetHint::Absent, _) | (_, SubsetMatch::Disabled) => return pool.to_vec(),
        (SubsetHint::Only(entries), _) => entries,
    };
    pool.iter().filter(|ep| entries.iter().any(|e| e.matches(ep, mode))).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Vec<Arc<Endpoint>> {
        ["10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "[fd00::1]:8000"]
            .iter()
            .map(|a| Arc::new(Endpoint::new(*a, a.parse().unwrap())))
            .collect()
    }

    fn names(v: &[Arc<Endpoint>]) -> Vec<&str> {
        v.iter().map(|e| e.host_port.as_str()).collect()
    }

    fn hint(entries: &[&str]) -> SubsetHint {
        SubsetHint::parse(entries.iter().copied()).unwrap()
    }

    #[test]
    fn absent_hint_keeps_all() {
        assert_eq!(locate(&pool(), &SubsetHint::Absent, SubsetMatch::Exact).len(), 4);
    }

    #[test]
    fn empty_list_keeps_none() {
        let empty = hint(&[]);
        assert!(locate(&pool(), &empty, SubsetMatch::Exact).is_empty());
        assert!(empty.is_explicitly_empty(SubsetMatch::Exact));
        assert!(!empty.is_explicitly_empty(SubsetMatch::Disabled));
    }

    #[test]
    fn port_matches_exactly_unless_ip_only() {
        let hint = hint(&["10.0.0.1:8001"]);
        assert_eq!(names(&locate(&pool(), &hint, SubsetMatch::Exact)), vec!["10.0.0.1:8001"]);
        assert_eq!(
            names(&locate(&pool(), &hint, SubsetMatch::IpOnly)),
            vec!["10.0.0.1:8000", "10.0.0.1:8001"]
        );
        assert_eq!(locate(&pool(), &hint, SubsetMatch::Disabled).len(), 4);
        assert!(hint.narrows(SubsetMatch::Exact) && !hint.narrows(SubsetMatch::Disabled));
    }

    #[test]
    fn bare_ip_and_ipv6() {
        let hint = hint(&["10.0.0.2", "[fd00::1]:8000", " [fd00::2] "]);
        assert_eq!(
            names(&locate(&pool(), &hint, SubsetMatch::Exact)),
            vec!["10.0.0.2:8000", "[fd00::1]:8000"]
        );
    }

    #[test]
    fn a_malformed_entry_is_an_error_naming_it() {
        let err = SubsetHint::parse(["10.0.0.1:8000", "garbage"]).unwrap_err();
        assert_eq!(err.entry, "garbage");
        assert!(err.to_string().contains("\"garbage\""), "{err}");
        assert!(SubsetEntry::parse("10.0.0.1:99999").is_err());
        assert!(SubsetEntry::parse("[10.0.0.1]:80").is_err());
    }
}
