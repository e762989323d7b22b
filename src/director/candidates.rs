//! Which endpoints a request may go to: the pool, narrowed by the gateway's subset hint.

use std::net::IpAddr;
use std::sync::Arc;

use crate::datastore::Endpoint;

/// The gateway's `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SubsetHint {
    /// No hint: every endpoint is a candidate.
    #[default]
    Absent,
    /// Only these `ip:port` (or bare `ip`) entries; an empty list means no candidate at all.
    Only(Vec<String>),
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

enum Entry {
    Exact(std::net::SocketAddr),
    Ip(IpAddr),
}

fn parse_entry(raw: &str, mode: SubsetMatch) -> Option<Entry> {
    let raw = raw.trim();
    if let Ok(addr) = raw.parse::<std::net::SocketAddr>() {
        return Some(match mode {
            SubsetMatch::IpOnly => Entry::Ip(addr.ip()),
            _ => Entry::Exact(addr),
        });
    }
    let bare = raw.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().ok().map(Entry::Ip)
}

/// The endpoints of `pool` allowed by `hint`, in pool order.
pub fn locate(pool: &[Arc<Endpoint>], hint: &SubsetHint, mode: SubsetMatch) -> Vec<Arc<Endpoint>> {
    let list = match (hint, mode) {
        (SubsetHint::Absent, _) | (_, SubsetMatch::Disabled) => return pool.to_vec(),
        (SubsetHint::Only(list), _) => list,
    };
    let entries: Vec<Entry> = list.iter().filter_map(|e| parse_entry(e, mode)).collect();
    pool.iter()
        .filter(|ep| {
            entries.iter().any(|e| match e {
                Entry::Exact(a) => *a == ep.addr,
                Entry::Ip(ip) => *ip == ep.addr.ip(),
            })
        })
        .cloned()
        .collect()
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

    #[test]
    fn absent_hint_keeps_all() {
        assert_eq!(locate(&pool(), &SubsetHint::Absent, SubsetMatch::Exact).len(), 4);
    }

    #[test]
    fn empty_list_keeps_none() {
        assert!(locate(&pool(), &SubsetHint::Only(vec![]), SubsetMatch::Exact).is_empty());
    }

    #[test]
    fn port_matches_exactly_unless_ip_only() {
        let hint = SubsetHint::Only(vec!["10.0.0.1:8001".into()]);
        assert_eq!(names(&locate(&pool(), &hint, SubsetMatch::Exact)), vec!["10.0.0.1:8001"]);
        assert_eq!(
            names(&locate(&pool(), &hint, SubsetMatch::IpOnly)),
            vec!["10.0.0.1:8000", "10.0.0.1:8001"]
        );
        assert_eq!(locate(&pool(), &hint, SubsetMatch::Disabled).len(), 4);
    }

    #[test]
    fn bare_ip_and_ipv6() {
        let hint = SubsetHint::Only(vec!["10.0.0.2".into(), "[fd00::1]:8000".into(), "garbage".into()]);
        assert_eq!(
            names(&locate(&pool(), &hint, SubsetMatch::Exact)),
            vec!["10.0.0.2:8000", "[fd00::1]:8000"]
        );
    }
}
