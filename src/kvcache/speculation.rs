//! Speculative entries (llm-d's `speculativeIndexing`): when a request is routed, its blocks are indexed
//! on the chosen endpoint at once, so that a burst of one prompt lands together before the engine's first
//! event for it arrives. They sit in a tier of their own, counted at the best weight; the engine's events
//! confirm (or never confirm) them, and they expire either way. Time is what the caller says it is (the
//! scheduling request's clock, or the response's), never read here.
//!
//! When they expire differs from llm-d, which counts `speculativeTTL` (2 s) from routing
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/preciseprefixcache/prerequest.go).
//! An engine can only report blocks once it has computed them, at the request's first token; a request that
//! waits longer than the TTL in the engine's queue (an overloaded pool) would lose its entries before the
//! engine could confirm them, and the next requests of its prompt would go elsewhere although that queue is
//! about to compute it. So an entry is *pending* while its request waits for its first token, and its TTL
//! starts then (or when the request ends without one). Without load the two agree to within the queue and
//! prefill time. A pending entry whose request never reports back is dropped after [`MAX_PENDING`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::{EndpointId, KvIndex};

/// The tier speculative holders are kept in: past any configured one (255 is "unknown").
pub(super) const SPECULATIVE_TIER: u8 = u8::MAX - 1;

/// The longest an entry stays pending: a guard against a request whose end is never reported (the
/// pipeline reports every dispatched request's end, so only a bug would need it), not a tuning parameter.
pub(super) const MAX_PENDING: Duration = Duration::from_secs(600);

/// One request's entries: where, and which blocks.
#[derive(Debug)]
struct Entry {
    endpoint: EndpointId,
    keys: Vec<u64>,
}

#[derive(Debug, Default)]
pub(super) struct Speculation {
    /// Entries whose TTL runs, in the order they expire (one TTL for all, so the order they started).
    expiring: VecDeque<(Instant, Entry)>,
    /// Entries waiting for their request's first token, by the request's dispatch id.
    pending: HashMap<u64, Entry>,
    /// Pending dispatch ids in the order they were routed, for [`MAX_PENDING`]; ids that already left
    /// `pending` are skipped when they reach the front.
    pending_order: VecDeque<(Instant, u64)>,
}

impl KvIndex {
    /// Indexes `keys` on `endpoint` until `expires`, with no request to wait for (tests of expiry).
    #[cfg(test)]
    pub fn speculate(&mut self, endpoint: EndpointId, keys: &[u64], expires: Instant) {
        if self.hold_speculative(endpoint, keys) {
            self.speculation.expiring.push_back((expires, Entry { endpoint, keys: keys.to_vec() }));
        }
    }

    /// `endpoint` was just chosen (at `now`) for request `dispatch`, whose block keys are `keys`: index
    /// them there until [`KvIndex::served`] starts their TTL.
    pub fn speculate_pending(&mut self, endpoint: EndpointId, keys: &[u64], dispatch: u64, now: Instant) {
        if self.hold_speculative(endpoint, keys) {
            let entry = Entry { endpoint, keys: keys.to_vec() };
            if let Some(old) = self.speculation.pending.insert(dispatch, entry) {
                self.unhold(old.endpoint, SPECULATIVE_TIER, &old.keys);
            }
            self.speculation.pending_order.push_back((now, dispatch));
        }
    }

    /// Request `dispatch` got its first token, or ended: its pending entries (if any) expire at
    /// `expires`. `false` when it had none.
    pub fn served(&mut self, dispatch: u64, expires: Instant) -> bool {
        let Some(entry) = self.speculation.pending.remove(&dispatch) else { return false };
        self.speculation.expiring.push_back((expires, entry));
        true
    }

    /// Whether request `dispatch` has entries waiting for its first token.
    pub fn is_pending(&self, dispatch: u64) -> bool {
        self.speculation.pending.contains_key(&dispatch)
    }

    fn hold_speculative(&mut self, endpoint: EndpointId, keys: &[u64]) -> bool {
        if keys.is_empty() || self.blocks.len() >= self.max_keys {
            return false;
        }
        let slot = self.slots.slot(endpoint);
        for &key in keys {
            self.hold(endpoint, slot, SPECULATIVE_TIER, key);
        }
        true
    }

    /// Drops the entries expired at `now`, and pending ones older than [`MAX_PENDING`]; returns how many
    /// requests' entries that was.
    pub fn expire_speculation(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while let Some((expires, entry)) = self.speculation.expiring.pop_front() {
            if expires > now {
                self.speculation.expiring.push_front((expires, entry));
                break;
            }
            self.unhold(entry.endpoint, SPECULATIVE_TIER, &entry.keys);
            expired += 1;
        }
        while let Some(&(routed, dispatch)) = self.speculation.pending_order.front() {
            let still_pending = self.speculation.pending.contains_key(&dispatch);
            if still_pending && routed + MAX_PENDING > now {
                break;
            }
            self.speculation.pending_order.pop_front();
            if let Some(entry) = self.speculation.pending.remove(&dispatch) {
                self.unhold(entry.endpoint, SPECULATIVE_TIER, &entry.keys);
                expired += 1;
            }
        }
        expired
    }

    /// When the next entry expires, if any: the oldest running TTL, or the oldest pending entry's
    /// [`MAX_PENDING`] (an id already served may stand in for it, which only costs one early look).
    pub fn next_expiry(&self) -> Option<Instant> {
        let expiring = self.speculation.expiring.front().map(|(expires, _)| *expires);
        let pending = self.speculation.pending_order.front().map(|(routed, _)| *routed + MAX_PENDING);
        expiring.into_iter().chain(pending).min()
    }

    /// Requests whose entries wait for their first token.
    #[cfg(test)]
    pub fn pending_speculation(&self) -> usize {
        self.speculation.pending.len()
    }

    /// Drops `endpoint`'s entries (it left, or its cache was cleared).
    pub(super) fn forget_speculation(&mut self, endpoint: EndpointId) {
        let expiring = std::mem::take(&mut self.speculation.expiring);
        for (expires, entry) in expiring {
            if entry.endpoint == endpoint {
                self.unhold(endpoint, SPECULATIVE_TIER, &entry.keys);
            } else {
                self.speculation.expiring.push_back((expires, entry));
            }
        }
        let mut dropped = Vec::new();
        self.speculation.pending.retain(|_, entry| {
            let keep = entry.endpoint != endpoint;
            if !keep {
                dropped.push(std::mem::take(&mut entry.keys));
            }
            keep
        });
        for keys in dropped {
            self.unhold(endpoint, SPECULATIVE_TIER, &keys);
        }
    }
}
