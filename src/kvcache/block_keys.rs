//! epp's own block keys: a chain of hashes over a request's token ids, one per full block of
//! `blockSizeTokens`, so that the key of block *i* stands for the whole prefix up to it. Keys are computed
//! from token ids on both sides, from each stored event's `token_ids` and from each request's tokens, so
//! they never depend on the engine's hash (which depends on its seed and algorithm) and epp's block size may
//! be a divisor of the engine's.
//!
//! The chain has llm-d's shape (llm-d/llm-d-router:pkg/kvcache, `tokenProcessorConfig`): a root from the
//! hash seed and the model name, then `key_i = H(key_{i-1}, tokens_i)`, with `hashAlgorithm` `cbor-fnv`
//! (FNV-64a over the canonical CBOR of `[parent, [tokens…], extras]`, llm-d's default) or `xxh64` (about
//! eight times cheaper). Bit-equality with llm-d's keys is not a goal: epp computes both sides.

use xxhash_rust::xxh64::Xxh64;

/// `tokenProcessorConfig.hashAlgorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashAlgorithm {
    #[default]
    CborFnv,
    Xxh64,
}

/// Computes block keys for one token-processor configuration.
#[derive(Debug, Clone)]
pub struct BlockKeyHasher {
    algorithm: HashAlgorithm,
    block_size: usize,
    seed: u64,
}

/// Blocks up to this many tokens hash in one shot from a stack buffer.
const XXH_BLOCK_TOKENS: usize = 64;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-64a, fed incrementally.
struct Fnv64a(u64);

impl Fnv64a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }

    /// A CBOR head (RFC 8949 §3): major type `major` (0 uint, 3 text, 4 array) with `value`.
    fn cbor_head(&mut self, major: u8, value: u64) {
        let (bytes, len) = cbor_head(major, value);
        self.write(&bytes[..len]);
    }
}

/// A CBOR head in its shortest form, as canonical CBOR requires: the bytes and how many are used.
fn cbor_head(major: u8, value: u64) -> ([u8; 9], usize) {
    let mut bytes = [0u8; 9];
    let m = major << 5;
    let len = match value {
        0..=23 => {
            bytes[0] = m | value as u8;
            1
        }
        24..=0xff => {
            bytes[..2].copy_from_slice(&[m | 24, value as u8]);
            2
        }
        0x100..=0xffff => {
            bytes[0] = m | 25;
            bytes[1..3].copy_from_slice(&(value as u16).to_be_bytes());
            3
        }
        0x1_0000..=0xffff_ffff => {
            bytes[0] = m | 26;
            bytes[1..5].copy_from_slice(&(value as u32).to_be_bytes());
            5
        }
        _ => {
            bytes[0] = m | 27;
            bytes[1..9].copy_from_slice(&value.to_be_bytes());
            9
        }
    };
    (bytes, len)
}

impl BlockKeyHasher {
    /// `block_size` is `blockSizeTokens` (at least 1); `hash_seed` is `hashSeed`.
    pub fn new(algorithm: HashAlgorithm, block_size: usize, hash_seed: &str) -> Self {
        let seed = match algorithm {
            HashAlgorithm::CborFnv => {
                let mut fnv = Fnv64a(FNV_OFFSET);
                fnv.write(hash_seed.as_bytes());
                fnv.0
            }
            HashAlgorithm::Xxh64 => xxhash_rust::xxh64::xxh64(hash_seed.as_bytes(), 0),
        };
        Self { algorithm, block_size: block_size.max(1), seed }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The configuration as one number (algorithm, block size, seed): two hashers with the same fingerprint
    /// key every block alike, so replicas can exchange keys ([`super::peers`]).
    pub fn fingerprint(&self) -> u64 {
        let mut bytes = [0u8; 17];
        bytes[0] = self.algorithm as u8;
        bytes[1..9].copy_from_slice(&(self.block_size as u64).to_le_bytes());
        bytes[9..].copy_from_slice(&self.seed.to_le_bytes());
        xxhash_rust::xxh64::xxh64(&bytes, 0)
    }

    /// The parent of a prompt's first block: the seed and the model (or LoRA adapter) name.
    pub fn root(&self, model: &str) -> u64 {
        self.hash(self.seed, &[], Some(model))
    }

    /// Appends the keys of every full block of `tokens`, chained from `parent`, to `out`; a trailing partial
    /// block has no key.
    pub fn extend_keys(&self, mut parent: u64, tokens: &[u32], out: &mut Vec<u64>) {
        for block in tokens.chunks_exact(self.block_size) {
            parent = self.hash(parent, block, None);
            out.push(parent);
        }
    }

    fn hash(&self, parent: u64, tokens: &[u32], extra: Option<&str>) -> u64 {
        match self.algorithm {
            HashAlgorithm::CborFnv => {
                let mut fnv = Fnv64a(FNV_OFFSET);
                fnv.cbor_head(4, 3);
                fnv.cbor_head(0, parent);
                fnv.cbor_head(4, tokens.len() as u64);
                for &token in tokens {
                    fnv.cbor_head(0, u64::from(token));
                }
                match extra {
                    Some(text) => {
                        fnv.cbor_head(3, text.len() as u64);
                        fnv.write(text.as_bytes());
                    }
                    None => fnv.write(&[0xf6]),
                }
                fnv.0
            }
            HashAlgorithm::Xxh64 if extra.is_none() && tokens.len() <= XXH_BLOCK_TOKENS => {
                // One-shot over a stack buffer: streaming 4 bytes at a time costs ~4x as much.
                let mut buf = [0u8; 8 + 4 * XXH_BLOCK_TOKENS];
                buf[..8].copy_from_slice(&parent.to_le_bytes());
                for (slot, token) in buf[8..].chunks_exact_mut(4).zip(tokens) {
                    slot.copy_from_slice(&token.to_le_bytes());
                }
                xxhash_rust::xxh64::xxh64(&buf[..8 + 4 * tokens.len()], 0)
            }
            HashAlgorithm::Xxh64 => {
                let mut xxh = Xxh64::new(0);
                xxh.update(&parent.to_le_bytes());
                for &token in tokens {
                    xxh.update(&token.to_le_bytes());
                }
                if let Some(text) = extra {
                    xxh.update(&(text.len() as u64).to_le_bytes());
                    xxh.update(text.as_bytes());
                }
                xxh.digest()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_tells_configurations_apart() {
        let base = BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, "s").fingerprint();
        assert_eq!(base, BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, "s").fingerprint());
        for other in [
            BlockKeyHasher::new(HashAlgorithm::CborFnv, 16, "s"),
            BlockKeyHasher::new(HashAlgorithm::Xxh64, 32, "s"),
            BlockKeyHasher::new(HashAlgorithm::Xxh64, 16, "t"),
        ] {
            assert_ne!(other.fingerprint(), base, "{other:?}");
        }
    }

    fn keys(hasher: &BlockKeyHasher, model: &str, tokens: &[u32]) -> Vec<u64> {
        let mut out = Vec::new();
        hasher.extend_keys(hasher.root(model), tokens, &mut out);
        out
    }

    #[test]
    fn one_key_per_full_block_each_standing_for_its_prefix() {
        for algorithm in [HashAlgorithm::CborFnv, HashAlgorithm::Xxh64] {
            let hasher = BlockKeyHasher::new(algorithm, 4, "");
            let tokens: Vec<u32> = (0..10).collect();
            let all = keys(&hasher, "m", &tokens);
            assert_eq!(all.len(), 2, "the trailing partial block has no key");
            assert_eq!(keys(&hasher, "m", &tokens[..8]), all, "same prefix, same keys");
            let mut other = tokens.clone();
            other[1] = 99;
            let changed = keys(&hasher, "m", &other);
            assert!(changed[0] != all[0] && changed[1] != all[1], "a change early changes every later key");
            assert_ne!(keys(&hasher, "other-model", &tokens), all, "the model is in the root");
            assert_ne!(keys(&BlockKeyHasher::new(algorithm, 4, "seed"), "m", &tokens), all, "and the seed");
            // Chaining in pieces equals chaining at once: events extend a stored parent's chain.
            let mut pieces = vec![];
            hasher.extend_keys(hasher.root("m"), &tokens[..4], &mut pieces);
            hasher.extend_keys(pieces[0], &tokens[4..8], &mut pieces);
            assert_eq!(pieces, all);
        }
    }

    /// The one-shot path (blocks of up to 64 tokens) hashes the same bytes as the streaming one.
    #[test]
    fn xxh64_one_shot_equals_streaming() {
        let tokens: Vec<u32> = (0..200u32).map(|t| t.wrapping_mul(2_654_435_761)).collect();
        let small = BlockKeyHasher::new(HashAlgorithm::Xxh64, 64, "");
        let large = BlockKeyHasher::new(HashAlgorithm::Xxh64, 65, "");
        for (hasher, len) in [(&small, 64), (&large, 65)] {
            let mut streamed = Xxh64::new(0);
            streamed.update(&7u64.to_le_bytes());
            tokens[..len].iter().for_each(|t| streamed.update(&t.to_le_bytes()));
            assert_eq!(hasher.hash(7, &tokens[..len], None), streamed.digest());
        }
    }

    /// FNV-64a's published test vector, and the CBOR heads at each width boundary (RFC 8949 appendix A).
    #[test]
    fn fnv_and_cbor_heads() {
        let mut fnv = Fnv64a(FNV_OFFSET);
        fnv.write(b"a");
        assert_eq!(fnv.0, 0xaf63_dc4c_8601_ec8c);
        let head = |major, value| {
            let (bytes, len) = cbor_head(major, value);
            bytes[..len].to_vec()
        };
        assert_eq!(head(0, 23), [0x17]);
        assert_eq!(head(0, 24), [0x18, 0x18]);
        assert_eq!(head(0, 256), [0x19, 0x01, 0x00]);
        assert_eq!(head(0, 1_000_000), [0x1a, 0x00, 0x0f, 0x42, 0x40]);
        assert_eq!(head(0, 1_000_000_000_000), [0x1b, 0x00, 0x00, 0x00, 0xe8, 0xd4, 0xa5, 0x10, 0x00]);
        assert_eq!(head(4, 3), [0x83]);
        assert_eq!(head(3, 5), [0x65]);
    }
}
