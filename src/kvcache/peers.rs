//! Speculative entries shared between epp replicas (`speculativePeers`, an epp extension).
//!
//! Every replica indexes every engine's KV events, so their indexes agree on what the engines report. What
//! they do not share is what each has just routed: a replica's speculative entries
//! ([`super::speculation`]) are its own. Under load an engine reports a prompt's blocks only once it has
//! computed them, which can be many seconds after routing, and in between a second replica sends the same
//! prompt wherever looks best to it: two replicas spread one prompt over more pods than one replica does,
//! and lose prefix hits to it (BENCHMARKS.md §8). With peers configured, each routing's speculative entry and
//! its first token (which starts the entry's TTL) are sent to the other replicas, which index them as if
//! they had routed the request themselves.
//!
//! The transport is UDP datagrams, one per message, best effort: a lost message costs what speculation
//! would have saved, never a wrong answer, since the engines' events remain the source of truth and every
//! entry still expires. An entry whose first-token message is lost stays pending up to the speculation's
//! guard ([`super::speculation`]'s `MAX_PENDING`). A datagram is accepted only from an address the peer list
//! resolves to, only if its block-key configuration matches this replica's (same block size, hash seed and
//! algorithm, so its keys mean the same blocks), and never from this replica itself (a headless Service
//! resolves to every replica, this one included).
//!
//! Wire format (little-endian): `"EPPS"`, version `1`, kind (`1` placed, `2` served), the block-key
//! fingerprint (u64), the sender's instance id (u64), the sender's dispatch id (u64); a placement then
//! carries the target's serving address (u8 length, then `ip:port` in UTF-8), a key count (u32) and the keys
//! (u64 each), at most [`MAX_KEYS`] of them (a prefix match reads keys from block 0, so a longer prompt's
//! tail is what is cut).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::{lock_index, KvEventPool};

const MAGIC: &[u8; 4] = b"EPPS";
const VERSION: u8 = 1;
const PLACED: u8 = 1;
const SERVED: u8 = 2;

/// The most keys one placement carries: a datagram stays under UDP's 65,507-byte limit.
pub(super) const MAX_KEYS: usize = 8_000;

/// What one replica tells the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerMessage {
    /// Request `dispatch` was routed to the endpoint serving at `endpoint`; its prompt's block keys.
    Placed { dispatch: u64, endpoint: SocketAddr, keys: Vec<u64> },
    /// Request `dispatch` got its first token (or ended): its entries' TTL starts.
    Served { dispatch: u64 },
}

/// A datagram, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerDatagram {
    /// The sender's block-key configuration ([`super::BlockKeyHasher::fingerprint`]).
    pub fingerprint: u64,
    /// The sending replica's instance id.
    pub origin: u64,
    pub message: PeerMessage,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PeerDecodeError {
    #[error("not an epp peer datagram")]
    Magic,
    #[error("peer protocol version {0}, expected 1")]
    Version(u8),
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("truncated datagram")]
    Truncated,
    #[error("the endpoint address is not ip:port")]
    Address,
    #[error("{0} bytes after the message")]
    Trailing(usize),
}

/// Writes `message` into `out` (cleared first).
pub fn encode(message: &PeerMessage, fingerprint: u64, origin: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    let (kind, dispatch) = match message {
        PeerMessage::Placed { dispatch, .. } => (PLACED, *dispatch),
        PeerMessage::Served { dispatch } => (SERVED, *dispatch),
    };
    out.push(kind);
    out.extend_from_slice(&fingerprint.to_le_bytes());
    out.extend_from_slice(&origin.to_le_bytes());
    out.extend_from_slice(&dispatch.to_le_bytes());
    if let PeerMessage::Placed { endpoint, keys, .. } = message {
        let address = endpoint.to_string();
        // An `ip:port` is well under 255 bytes, scope id included.
        out.push(address.len() as u8);
        out.extend_from_slice(address.as_bytes());
        let keys = &keys[..keys.len().min(MAX_KEYS)];
        out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        for key in keys {
            out.extend_from_slice(&key.to_le_bytes());
        }
    }
}

/// Reads one datagram.
pub fn decode(bytes: &[u8]) -> Result<PeerDatagram, PeerDecodeError> {
    let mut r = Reader(bytes);
    if r.take(4)? != MAGIC {
        return Err(PeerDecodeError::Magic);
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(PeerDecodeError::Version(version));
    }
    let kind = r.u8()?;
    let fingerprint = r.u64()?;
    let origin = r.u64()?;
    let dispatch = r.u64()?;
    let message = match kind {
        PLACED => {
            let len = usize::from(r.u8()?);
            let address = std::str::from_utf8(r.take(len)?).map_err(|_| PeerDecodeError::Address)?;
            let endpoint = address.parse().map_err(|_| PeerDecodeError::Address)?;
            let count = r.u32()? as usize;
            if count > MAX_KEYS || r.0.len() < count * 8 {
                return Err(PeerDecodeError::Truncated);
            }
            let keys = (0..count).map(|_| r.u64()).collect::<Result<_, _>>()?;
            PeerMessage::Placed { dispatch, endpoint, keys }
        }
        SERVED => PeerMessage::Served { dispatch },
        other => return Err(PeerDecodeError::Kind(other)),
    };
    if !r.0.is_empty() {
        return Err(PeerDecodeError::Trailing(r.0.len()));
    }
    Ok(PeerDatagram { fingerprint, origin, message })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PeerDecodeError> {
        if self.0.len() < n {
            return Err(PeerDecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, PeerDecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, PeerDecodeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, PeerDecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

/// The id a peer's request is pending under here: never one of this replica's own dispatch ids (those
/// count up from 0, and the top bit is set here), and distinct per sender.
fn peer_dispatch(origin: u64, dispatch: u64) -> u64 {
    let mut pair = [0u8; 16];
    pair[..8].copy_from_slice(&origin.to_le_bytes());
    pair[8..].copy_from_slice(&dispatch.to_le_bytes());
    xxhash_rust::xxh64::xxh64(&pair, 0) | 1 << 63
}

impl KvEventPool {
    /// Applies a peer's message at `now`, as this replica's own speculation would (a placement pending
    /// until its first token, then `ttl`). `false` when it named an endpoint this pool does not know.
    pub fn apply_peer(&self, origin: u64, message: &PeerMessage, now: Instant, ttl: Duration) -> bool {
        match message {
            PeerMessage::Placed { dispatch, endpoint, keys } => {
                let Some(id) = self.endpoint_id(*endpoint) else { return false };
                let mut index = lock_index(self.index());
                index.expire_speculation(now);
                index.speculate_pending(id, keys, peer_dispatch(origin, *dispatch), now);
                true
            }
            PeerMessage::Served { dispatch } => {
                lock_index(self.index()).served(peer_dispatch(origin, *dispatch), now + ttl);
                true
            }
        }
    }
}

#[cfg(test)]
#[path = "peers_tests.rs"]
mod tests;
