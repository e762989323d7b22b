//! Speculative entries (llm-d's `speculativeIndexing`): when a request is routed, its blocks are indexed
//! on the chosen endpoint at once, for a short time (`speculativeTTL`, 2 s by default), so that a burst of
//! one prompt lands together before the engine's first event for it arrives. They sit in a tier of their
//! own, counted at the best weight; the engine's events confirm (or never confirm) them, and they expire
//! either way. Time is what the caller says it is (the scheduling request's clock), never read here.

use std::collections::VecDeque;
use std::time::Instant;

use super::{EndpointId, KvIndex};

/// The tier speculative holders are kept in: past any configured one (255 is "unknown").
pub(super) const SPECULATIVE_TIER: u8 = u8::MAX - 1;

/// Entries in the order they expire (one TTL for all, so the order they were made).
#[derive(Debug, Default)]
pub(super) struct Speculation {
    entries: VecDeque<(Instant, EndpointId, Vec<u64>)>,
}

impl KvIndex {
    /// `endpoint` was just chosen for a request whose block keys are `keys`: index them there until
    /// `expires`.
    pub fn speculate(&mut self, endpoint: EndpointId, keys: &[u64], expires: Instant) {
        if keys.is_empty() || self.blocks.len() >= self.max_keys {
            return;
        }
        let slot = self.slots.slot(endpoint);
        for &key in keys {
            self.hold(endpoint, slot, SPECULATIVE_TIER, key);
        }
        self.speculation.entries.push_back((expires, endpoint, keys.to_vec()));
    }

    /// Drops the entries expired at `now`; returns how many requests' entries that was.
    pub fn expire_speculation(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while let Some((expires, endpoint, keys)) = self.speculation.entries.pop_front() {
            if expires > now {
                self.speculation.entries.push_front((expires, endpoint, keys));
                break;
            }
            self.unhold(endpoint, SPECULATIVE_TIER, &keys);
            expired += 1;
        }
        expired
    }

    /// When the oldest entry expires, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.speculation.entries.front().map(|(expires, _, _)| *expires)
    }

    /// Drops `endpoint`'s entries (it left, or its cache was cleared).
    pub(super) fn forget_speculation(&mut self, endpoint: EndpointId) {
        let entries = std::mem::take(&mut self.speculation.entries);
        for (expires, owner, keys) in entries {
            if owner == endpoint {
                self.unhold(owner, SPECULATIVE_TIER, &keys);
            } else {
                self.speculation.entries.push_back((expires, owner, keys));
            }
        }
    }
}
