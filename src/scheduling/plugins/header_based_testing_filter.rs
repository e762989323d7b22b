//! `header-based-testing-filter`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/test/filter/request_header_based_filter.go):
//! keeps only the endpoints named in the request header `test-epp-endpoint-selection`, for conformance tests
//! that need a deterministic target.
//!
//! The header is a comma list of `IP`, `IP:port`, `[IPv6]` or `[IPv6]:port`. With a port, only that exact
//! address matches; without one, every endpoint on that IP matches. Kept endpoints follow header order.
//! A missing or blank header keeps nothing (GIE behaviour).
//!
//! Differences from GIE, for multi-port pods: GIE maps a bare IP to one arbitrary endpoint on that IP and
//! de-duplicates by IP (so `ip:8000,ip:8001` yields one endpoint); here a bare IP selects all of them and
//! de-duplication is per endpoint. Addresses are compared parsed, so `fd00::01` matches `fd00::1`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::expect_no_params;
use crate::scheduling::{BuiltPlugin, Candidate, FactoryContext, Filter, PluginError, SchedulingRequest};

pub(crate) const TYPE_NAME: &str = "header-based-testing-filter";

/// The request header naming the endpoints to keep.
use crate::wire::TEST_SELECTION_HEADER as SELECTION_HEADER;

#[derive(Debug, Default, Clone, Copy)]
pub struct HeaderBasedTestingFilter;

enum Selector {
    Exact(SocketAddr),
    Host(IpAddr),
}

fn parse_selector(item: &str) -> Option<Selector> {
    if let Ok(addr) = item.parse::<SocketAddr>() {
        return Some(Selector::Exact(addr));
    }
    let host = item.strip_prefix('[').and_then(|s| s.strip_suffix(']')).unwrap_or(item);
    host.parse::<IpAddr>().ok().map(Selector::Host)
}

impl Filter for HeaderBasedTestingFilter {
    fn filter(&self, req: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        let Some(value) = req.headers.get(SELECTION_HEADER) else {
            kept.clear();
            return;
        };
        let before = std::mem::take(kept);
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some(selector) = parse_selector(item) else { continue };
            for &i in &before {
                let addr = candidates[i].endpoint.addr;
                let matches = match selector {
                    Selector::Exact(a) => addr == a,
                    Selector::Host(ip) => addr.ip() == ip,
                };
                if matches && !kept.contains(&i) {
                    kept.push(i);
                }
            }
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).filter(Arc::new(HeaderBasedTestingFilter)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn run(header: Option<&str>) -> Vec<usize> {
        let c: Vec<Candidate> = ["10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "[fd00::1]:8000"]
            .iter()
            .enumerate()
            .map(|(i, a)| Candidate::new(endpoint_at(&format!("e{i}"), a)))
            .collect();
        let mut f = RequestFixture::empty();
        if let Some(h) = header {
            f.headers.push(SELECTION_HEADER, h);
        }
        let mut kept: Vec<usize> = (0..c.len()).collect();
        HeaderBasedTestingFilter.filter(&f.request(), &c, &mut kept);
        kept
    }

    #[test]
    fn absent_or_blank_header_keeps_nothing() {
        assert!(run(None).is_empty());
        assert!(run(Some("  ")).is_empty());
    }

    #[test]
    fn port_means_exact_match() {
        assert_eq!(run(Some("10.0.0.1:8001")), vec![1]);
        assert!(run(Some("10.0.0.2:9999")).is_empty());
    }

    #[test]
    fn bare_ip_matches_every_port_and_header_order_is_kept() {
        assert_eq!(run(Some("10.0.0.2, 10.0.0.1")), vec![2, 0, 1]);
        assert_eq!(run(Some("10.0.0.1:8000,10.0.0.1")), vec![0, 1]);
    }

    #[test]
    fn ipv6_with_and_without_brackets() {
        assert_eq!(run(Some("[fd00::1]:8000")), vec![3]);
        assert_eq!(run(Some("[fd00::1]")), vec![3]);
        assert_eq!(run(Some("fd00::01")), vec![3]);
        assert!(run(Some("[fd00::1]:1")).is_empty());
    }

    #[test]
    fn garbage_is_ignored() {
        assert_eq!(run(Some("pod-a,,10.0.0.2:8000")), vec![2]);
    }

    #[test]
    fn rejects_parameters() {
        assert_rejects(factory, json!({"header": "x"}), "header");
        assert_rejects(factory, json!(true), "parameters");
    }
}
