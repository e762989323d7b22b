//! Keys for per-endpoint plugin state, and a cheap hasher for the maps that hold it.
//!
//! Plugin state is keyed by the endpoint's `Arc` identity, not its address: the datastore replaces an
//! endpoint whose name or labels changed with a new `Arc` at the same address, and state must follow the
//! identity the removal notice names. Holders keep a strong `Arc` beside the key, so the allocation (and so
//! the key) cannot be reused while state exists for it.
//!
//! The maps are keyed by pointers or by xxhash values; SipHash's flood resistance buys nothing there and
//! costs a measurable share of a 1,000-endpoint cycle, so they use a folded multiply instead.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::datastore::Endpoint;

/// Identity of an endpoint for plugin state.
pub(crate) type EndpointKey = usize;

pub(crate) fn endpoint_key(endpoint: &Arc<Endpoint>) -> EndpointKey {
    Arc::as_ptr(endpoint) as usize
}

/// A hasher for keys that are integers: one folded 64×64→128 multiply, so both the low bits (bucket index)
/// and the high bits (control byte) depend on every input bit, even for 16-byte-aligned pointers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IntHasher(u64);

const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let product = u128::from(self.0 ^ n) * u128::from(MULTIPLIER);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type IntBuildHasher = BuildHasherDefault<IntHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_keys_spread_over_low_bits() {
        let b = IntBuildHasher::default();
        let mut buckets = [0u32; 16];
        for i in 0..1600u64 {
            buckets[(b.hash_one(i * 64) & 15) as usize] += 1;
        }
        assert!(buckets.iter().all(|&c| c > 50), "{buckets:?}");
    }
}
