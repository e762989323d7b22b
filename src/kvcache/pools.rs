//! The pools and peer links the plugins of one configuration built, for a caller that drives them in
//! process instead of over sockets: the lab.

use std::sync::Arc;

use super::peer_link::PeerLink;
use super::pool::KvEventPool;

/// The KV-event pools the plugins of one configuration built, for a caller that feeds them events in
/// process ([`KvEventPool::apply_in_process`]): the lab. Plugins register theirs as they are built.
/// Plugins with `speculativePeers` built outside a runtime register their [`PeerLink`] here instead of
/// starting a socket, for the caller to carry their messages.
#[derive(Debug, Clone, Default)]
pub struct KvPools {
    pools: Arc<std::sync::Mutex<Vec<Arc<KvEventPool>>>>,
    links: Arc<std::sync::Mutex<Vec<Arc<PeerLink>>>>,
}

impl KvPools {
    pub fn register(&self, pool: Arc<KvEventPool>) {
        self.pools.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(pool);
    }

    /// Every pool registered so far.
    pub fn all(&self) -> Vec<Arc<KvEventPool>> {
        self.pools.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn register_peer_link(&self, link: Arc<PeerLink>) {
        self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(link);
    }

    /// Every peer link registered so far, in the order the plugins were built.
    pub fn peer_links(&self) -> Vec<Arc<PeerLink>> {
        self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}
