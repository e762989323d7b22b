//! The centralised socket (`kvEventsConfig.zmqEndpoint`): epp binds one SUB socket and every engine's
//! publisher connects to it (vLLM connects wherever its `endpoint` names a host, not `*`), as llm-d's
//! "global socket" mode runs it (llm-d/llm-d-router:pkg/kvevents/zmq_subscriber.go, `remote` false).
//!
//! One socket carries every pod's messages, so the pod is read from the topic, `kv@<pod>@<model>`, where
//! `<pod>` is the endpoint's serving address (`ip:port`, as llm-d keys its index:
//! llm-d/llm-d-router:pkg/kvevents/engineadapter/common.go). A message from a pod that is not in the pool
//! (or whose topic names none) is counted and skipped: its blocks would match no endpoint. Sequence
//! numbers are watched per pod as a dialled subscriber watches them; there is no replay (the engines
//! connect to epp, so a restarted epp cannot reach their replay sockets), so a gap or a restart drops the
//! pod's entries. Not highly available: one epp binds the address, and an engine publishing to it reaches
//! that epp only, which is why llm-d recommends `discoverPods` for several replicas; both may run at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use zeromq::{Socket, SocketRecv, SubSocket};

use super::index::EndpointId;
use super::pool::KvEventPool;
use super::subscriber::{apply_message, Sequence, Subscription};

const REBIND_DELAY: Duration = Duration::from_secs(1);

/// Binds `address` and applies every pod's messages until the task is aborted; a failed bind is counted
/// and retried.
pub(crate) async fn run(pool: Arc<KvEventPool>, address: String) {
    let stats = pool.stats().clone();
    loop {
        let mut socket = SubSocket::new();
        let bound = socket.bind(&address).await.is_ok()
            && socket.subscribe(&pool.config().topic_filter).await.is_ok();
        if !bound {
            stats.connect_failures.inc();
            tracing::warn!(%address, "cannot bind the KV-event socket (kvEventsConfig.zmqEndpoint)");
            tokio::time::sleep(REBIND_DELAY).await;
            continue;
        }
        tracing::info!(%address, "KV-event socket bound: engines publish here");
        let mut pods = Pods::default();
        while let Ok(message) = socket.recv().await {
            pods.apply(&pool, &message.into_vec());
        }
        tokio::time::sleep(REBIND_DELAY).await;
    }
}

/// Where each pod is in its publisher's sequence, under the id the pool gave it.
#[derive(Debug, Default)]
pub(crate) struct Pods(HashMap<SocketAddr, (Subscription, Sequence)>);

impl Pods {
    /// Applies one message from the central socket to the pod its topic names.
    pub(crate) fn apply(&mut self, pool: &KvEventPool, frames: &[Bytes]) {
        let stats = pool.stats();
        let Some((addr, id)) = frames
            .first()
            .and_then(|topic| topic_pod(topic))
            .and_then(|addr| pool.endpoint_id(addr).map(|id| (addr, id)))
        else {
            stats.messages.inc();
            stats.unknown_pods.inc();
            return;
        };
        // An endpoint that left and came back has a new id: its sequence starts over.
        if self.0.get(&addr).is_none_or(|(sub, _)| sub.endpoint != id) {
            if self.0.len() >= 2 * pool.endpoints_known() + 16 {
                self.0.retain(|addr, (sub, _)| pool.endpoint_id(*addr) == Some(sub.endpoint));
            }
            self.0.insert(addr, (subscription(pool, id), Sequence::default()));
        }
        if let Some((sub, sequence)) = self.0.get_mut(&addr) {
            apply_message(sub, frames, sequence, pool.index(), stats, false);
        }
    }
}

fn subscription(pool: &KvEventPool, endpoint: EndpointId) -> Subscription {
    Subscription {
        endpoint,
        publisher: String::new(),
        topic_filter: pool.config().topic_filter.clone(),
        default_model: String::new(),
        replay: None,
    }
}

/// The pod a topic names, `kv@<ip:port>@<model>`, as a serving address; `None` without a model segment
/// (not llm-d's form: the model is what keys the blocks).
pub(crate) fn topic_pod(topic: &[u8]) -> Option<SocketAddr> {
    let (_prefix, rest) = std::str::from_utf8(topic).ok()?.split_once('@')?;
    let (pod, model) = rest.split_once('@')?;
    if model.is_empty() {
        return None;
    }
    pod.parse().ok()
}

/// `zmqEndpoint` as a bind address: `tcp://*:5557` (llm-d's and vLLM's wildcard) binds every interface.
pub(crate) fn bind_address(zmq_endpoint: &str) -> Result<String, String> {
    let rest = zmq_endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| format!("{zmq_endpoint:?}: expected tcp://<host>:<port>"))?;
    let (host, port) =
        rest.rsplit_once(':').ok_or_else(|| format!("{zmq_endpoint:?}: expected tcp://<host>:<port>"))?;
    let port: u16 =
        port.parse().map_err(|_| format!("{zmq_endpoint:?}: the port is not a number 0-65535"))?;
    let host = match host {
        "*" | "" => "0.0.0.0",
        host => host,
    };
    Ok(format!("tcp://{host}:{port}"))
}

#[cfg(test)]
#[path = "central_tests.rs"]
mod tests;
