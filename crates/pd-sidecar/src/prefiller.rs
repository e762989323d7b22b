//! The prefiller epp names: one well-formed `host:port` in exactly one `x-prefiller-host-port` header, and
//! a member of the pool. llm-d's sidecar also takes comma lists and calls any host unless its SSRF
//! allow-list (off by default) is on; this one refuses anything else with a 502 naming the problem.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::http::HeaderMap;

use crate::error::SidecarError;

/// The header epp sets (llm-d/llm-d-router:pkg/common/routing/common.go), from epp's wire contract.
pub use epp::wire::PREFILLER_HEADER;

/// The prefiller a request names, if any: `Ok(None)` when the header is absent (decode locally).
pub fn named(headers: &HeaderMap) -> Result<Option<SocketAddr>, SidecarError> {
    let mut values = headers.get_all(PREFILLER_HEADER).iter();
    let Some(first) = values.next() else { return Ok(None) };
    let text = first.to_str().map_err(|_| SidecarError::InvalidEppMetadata("<not text>".into()))?;
    if values.next().is_some() {
        return Err(SidecarError::InvalidEppMetadata(format!("{text} (header repeated)")));
    }
    let trimmed = text.trim();
    // A literal IP and port only: epp names pods by address, and a name would need a DNS lookup the
    // allow-list could not vouch for.
    trimmed.parse::<SocketAddr>().map(Some).map_err(|_| SidecarError::InvalidEppMetadata(text.to_string()))
}

/// Who may be named as a prefiller.
#[derive(Debug, Clone)]
pub enum AllowList {
    /// Every address in the set (from `--allowed-prefillers` or the pool's endpoints file).
    Members(Arc<RwLock<HashSet<SocketAddr>>>),
    /// The endpoints of the InferencePool, as discovery last saw them (`--inference-pool`).
    Pool(Arc<epp::datastore::Datastore>),
    /// Anyone (`--allow-any-prefiller`): llm-d's default, for trusted networks only.
    Anyone,
}

impl AllowList {
    pub fn members(members: impl IntoIterator<Item = SocketAddr>) -> Self {
        Self::Members(Arc::new(RwLock::new(members.into_iter().collect())))
    }

    /// Replaces the members (a reloaded endpoints file).
    pub fn replace(&self, members: impl IntoIterator<Item = SocketAddr>) {
        if let Self::Members(set) = self {
            *set.write().unwrap_or_else(std::sync::PoisonError::into_inner) = members.into_iter().collect();
        }
    }

    pub fn check(&self, addr: SocketAddr) -> Result<(), SidecarError> {
        match self {
            Self::Anyone => Ok(()),
            Self::Members(set) => {
                if set.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&addr) {
                    Ok(())
                } else {
                    Err(SidecarError::PrefillerNotAllowed(addr.to_string()))
                }
            }
            Self::Pool(datastore) => {
                if datastore.endpoints().iter().any(|e| e.addr == addr) {
                    Ok(())
                } else {
                    Err(SidecarError::PrefillerNotAllowed(addr.to_string()))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(PREFILLER_HEADER, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn exactly_one_address_is_accepted() {
        assert_eq!(named(&headers(&[])).unwrap(), None);
        assert_eq!(named(&headers(&["10.0.0.1:8000"])).unwrap(), Some("10.0.0.1:8000".parse().unwrap()));
        assert_eq!(named(&headers(&["[fd00::1]:8000"])).unwrap(), Some("[fd00::1]:8000".parse().unwrap()));
        for bad in ["", "10.0.0.1", "10.0.0.1:8000,10.0.0.2:8000", "pod-a:8000", "10.0.0.1:0x50"] {
            let e = named(&headers(&[bad])).unwrap_err();
            assert_eq!(e.code(), "invalid_epp_metadata", "{bad}");
        }
        let e = named(&headers(&["10.0.0.1:8000", "10.0.0.2:8000"])).unwrap_err();
        assert!(e.to_string().contains("repeated"), "{e}");
    }

    #[test]
    fn only_members_may_prefill() {
        let list = AllowList::members(["10.0.0.1:8000".parse().unwrap()]);
        assert!(list.check("10.0.0.1:8000".parse().unwrap()).is_ok());
        let e = list.check("169.254.169.254:80".parse().unwrap()).unwrap_err();
        assert_eq!((e.code(), e.status().as_u16()), ("prefiller_not_allowed", 502));
        list.replace(["169.254.169.254:80".parse().unwrap()]);
        assert!(list.check("169.254.169.254:80".parse().unwrap()).is_ok());
        assert!(AllowList::Anyone.check("1.2.3.4:5".parse().unwrap()).is_ok());
    }
}
