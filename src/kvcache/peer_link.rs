//! How peer messages ([`super::peers`]) travel: the outbox the producer writes on the request path
//! (non-blocking, never I/O there), the UDP task that sends and receives them, and the in-process link the
//! lab hands between its replicas instead.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::peers::{decode, encode, PeerMessage};
use super::supervisor::PoolTask;
use super::KvEventPool;

/// Messages waiting to be sent, at most; past it they are dropped and counted (speculation is best
/// effort, and a stalled socket must not hold the request path).
const OUTBOX: usize = 4_096;

/// How often the peer names are resolved again (a headless Service's addresses follow the replicas).
const RESOLVE_EVERY: Duration = Duration::from_secs(10);

/// `speculativePeers`: where this replica listens, and the names of its peers (`host:port`, each
/// resolved to every address it has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub listen: SocketAddr,
    pub peers: Vec<String>,
}

/// The producer's end: hands a message to the transport without waiting.
#[derive(Debug, Clone)]
pub struct PeerOutbox {
    tx: mpsc::Sender<PeerMessage>,
    dropped: Counter,
}

impl PeerOutbox {
    /// An outbox and the receiving end its transport reads.
    pub fn channel(dropped: Counter) -> (Self, mpsc::Receiver<PeerMessage>) {
        let (tx, rx) = mpsc::channel(OUTBOX);
        (Self { tx, dropped }, rx)
    }

    pub fn send(&self, message: PeerMessage) {
        if self.tx.try_send(message).is_err() {
            self.dropped.inc();
        }
    }
}

/// The lab's transport: the messages one replica's producer sent, for the lab to apply to the others'
/// pools at the simulated instant (the network between replicas takes no time there).
#[derive(Debug)]
pub struct PeerLink {
    pub pool: Arc<KvEventPool>,
    /// The producer's `speculativeTTL`, which its peers' entries get too (they share one configuration).
    pub ttl: Duration,
    inbox: Mutex<mpsc::Receiver<PeerMessage>>,
}

impl PeerLink {
    pub fn new(pool: Arc<KvEventPool>, ttl: Duration, inbox: mpsc::Receiver<PeerMessage>) -> Self {
        Self { pool, ttl, inbox: Mutex::new(inbox) }
    }

    /// The messages sent since the last call, oldest first.
    pub fn drain(&self) -> Vec<PeerMessage> {
        let mut inbox = self.inbox.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::iter::from_fn(|| inbox.try_recv().ok()).collect()
    }
}

/// What the UDP task needs besides its socket.
#[derive(Debug)]
pub struct PeerTransport {
    pub pool: Arc<KvEventPool>,
    pub peers: Vec<String>,
    pub ttl: Duration,
}

/// Binds `listen` now, so a port in use is a startup error, not a silent gap.
pub fn bind(listen: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind(listen)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Runs the transport on the current runtime until the returned task is dropped.
pub fn spawn_peers(
    socket: std::net::UdpSocket,
    transport: PeerTransport,
    outbox: mpsc::Receiver<PeerMessage>,
) -> std::io::Result<PoolTask> {
    let socket = UdpSocket::from_std(socket)?;
    Ok(PoolTask::spawn(run(socket, transport, outbox)))
}

async fn run(socket: UdpSocket, t: PeerTransport, mut outbox: mpsc::Receiver<PeerMessage>) {
    let origin: u64 = rand::random();
    // Peers must key blocks as this replica's index does.
    let fingerprint = super::read_index(t.pool.index()).hasher().fingerprint();
    let stats = t.pool.stats().clone();
    let mut targets = resolve_all(&t.peers).await;
    let mut sources: HashSet<IpAddr> = targets.iter().map(SocketAddr::ip).collect();
    let mut resolve = tokio::time::interval_at(tokio::time::Instant::now() + RESOLVE_EVERY, RESOLVE_EVERY);
    let mut out = Vec::with_capacity(1024);
    let mut buf = vec![0u8; 65_536];
    loop {
        tokio::select! {
            message = outbox.recv() => {
                let Some(message) = message else { return };
                encode(&message, fingerprint, origin, &mut out);
                for peer in &targets {
                    match socket.send_to(&out, peer).await {
                        Ok(_) => {
                            stats.peer_sent.inc();
                        }
                        Err(e) => {
                            stats.peer_dropped.inc();
                            tracing::debug!(%peer, error = %e, "speculative peer send failed");
                        }
                    }
                }
            }
            received = socket.recv_from(&mut buf) => {
                let (len, from) = match received {
                    Ok(got) => got,
                    Err(e) => {
                        // Not expected on an unconnected socket; a pause keeps a persistent error from
                        // spinning the task.
                        tracing::debug!(error = %e, "speculative peer receive failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Some(bytes) = buf.get(..len) else { continue };
                receive(&t, (origin, fingerprint), &sources, bytes, from);
            }
            _ = resolve.tick() => {
                targets = resolve_all(&t.peers).await;
                sources = targets.iter().map(SocketAddr::ip).collect();
            }
        }
    }
}

/// Applies one datagram if it is a peer's, for this replica's block keys, and not this replica's own.
/// `own` is this replica's instance id and block-key fingerprint.
fn receive(t: &PeerTransport, own: (u64, u64), sources: &HashSet<IpAddr>, bytes: &[u8], from: SocketAddr) {
    let (origin, fingerprint) = own;
    let stats = t.pool.stats();
    let datagram = match decode(bytes) {
        Ok(d) if d.origin == origin => return,
        Ok(d) if sources.contains(&from.ip()) && d.fingerprint == fingerprint => d,
        Ok(_) | Err(_) => {
            stats.peer_dropped.inc();
            return;
        }
    };
    if t.pool.apply_peer(datagram.origin, &datagram.message, Instant::now(), t.ttl) {
        stats.peer_received.inc();
    } else {
        stats.peer_dropped.inc();
    }
}

async fn resolve_all(names: &[String]) -> HashSet<SocketAddr> {
    let mut all = HashSet::new();
    for name in names {
        match tokio::net::lookup_host(name.as_str()).await {
            Ok(addrs) => all.extend(addrs),
            Err(e) => tracing::warn!(peer = %name, error = %e, "speculative peer did not resolve"),
        }
    }
    all
}

#[cfg(test)]
#[path = "peer_link_tests.rs"]
mod tests;
