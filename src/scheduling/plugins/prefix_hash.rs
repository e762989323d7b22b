//! Prefix block hashing for the approximate prefix cache
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/).
//!
//! The prompt's bytes are cut into blocks of `block_chars` bytes; each block's hash chains the previous
//! one, so equal hashes mean equal prefixes up to and including that block:
//!
//! ```text
//! h0  = xxh3(target_model), or xxh3(cache_salt, seed h0) with a cache salt
//! h_i = xxh3(block_i, seed h_{i−1})
//! ```
//!
//! GIE chains xxh64 over the block and the previous hash's bytes; the hashes never leave epp (each
//! replica's index is its own), so epp chains XXH3 through its seed instead: one call per block, with
//! no streaming state, about a third of the time for 64-byte blocks (BENCHMARKS.md §2).
//!
//! A trailing partial block is hashed too; input shorter than one block yields no hashes; the input is
//! truncated to `max_blocks` blocks.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Characters per token assumed when converting a block size in tokens to bytes of prompt.
pub const CHARS_PER_TOKEN: usize = 4;

/// Computes the chained block hashes of `text` into `out` (cleared first). `out` is a caller-owned buffer so
/// the hot path reuses its capacity instead of allocating per request.
pub fn prefix_block_hashes(
    target_model: &str,
    cache_salt: Option<&str>,
    text: &[u8],
    block_chars: usize,
    max_blocks: usize,
    out: &mut Vec<u64>,
) {
    out.clear();
    if block_chars == 0 || max_blocks == 0 || text.len() < block_chars {
        return;
    }
    let limit = text.len().min(block_chars.saturating_mul(max_blocks));
    let text = &text[..limit];

    let mut prev = xxh3_64(target_model.as_bytes());
    if let Some(salt) = cache_salt.filter(|salt| !salt.is_empty()) {
        prev = xxh3_64_with_seed(salt.as_bytes(), prev);
    }
    out.reserve(text.len().div_ceil(block_chars));
    for block in text.chunks(block_chars) {
        prev = xxh3_64_with_seed(block, prev);
        out.push(prev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(model: &str, salt: Option<&str>, text: &str, block: usize, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        prefix_block_hashes(model, salt, text.as_bytes(), block, max, &mut out);
        out
    }

    #[test]
    fn chain_matches_the_formula() {
        let h0 = xxh3_64(b"m");
        let h1 = xxh3_64_with_seed(b"abcd", h0);
        let h2 = xxh3_64_with_seed(b"ef", h1);
        // The trailing partial block "ef" is hashed too.
        assert_eq!(hashes("m", None, "abcdef", 4, 10), vec![h1, h2]);
    }

    #[test]
    fn salt_chains_after_the_model() {
        let h0 = xxh3_64_with_seed(b"salt", xxh3_64(b"m"));
        assert_eq!(hashes("m", Some("salt"), "abcd", 4, 10), vec![xxh3_64_with_seed(b"abcd", h0)]);
        assert_ne!(hashes("m", Some("salt"), "abcd", 4, 10), hashes("m", Some("other"), "abcd", 4, 10));
        // An empty salt is the same as none.
        assert_eq!(hashes("m", Some(""), "abcd", 4, 10), hashes("m", None, "abcd", 4, 10));
    }

    #[test]
    fn short_input_has_no_hashes() {
        assert!(hashes("m", None, "abc", 4, 10).is_empty());
        assert!(hashes("m", None, "", 4, 10).is_empty());
        assert!(hashes("m", None, "abcd", 0, 10).is_empty());
    }

    #[test]
    fn truncates_to_max_blocks() {
        let full = hashes("m", None, "aaaabbbbccccdddd", 4, 100);
        assert_eq!(full.len(), 4);
        assert_eq!(hashes("m", None, "aaaabbbbccccdddd", 4, 2), full[..2]);
        // A partial block after truncation is not created: 2 blocks of 4 = 8 bytes exactly.
        assert_eq!(hashes("m", None, "aaaabbbbcc", 4, 2).len(), 2);
    }

    #[test]
    fn shared_prefix_gives_shared_hashes_and_models_differ() {
        let a = hashes("m", None, "aaaabbbbcccc", 4, 100);
        let b = hashes("m", None, "aaaabbbbxxxx", 4, 100);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
        assert_ne!(hashes("other", None, "aaaabbbb", 4, 100)[0], a[0]);
    }

    #[test]
    fn large_blocks_use_the_same_chain() {
        let text = "y".repeat(5000);
        let got = hashes("m", None, &text, 2000, 10);
        let mut prev = xxh3_64(b"m");
        let mut expected = Vec::new();
        for block in text.as_bytes().chunks(2000) {
            prev = xxh3_64_with_seed(block, prev);
            expected.push(prev);
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn buffer_is_reused() {
        let mut out = Vec::with_capacity(64);
        let cap = out.capacity();
        prefix_block_hashes("m", None, &[b'x'; 100], 4, 64, &mut out);
        assert_eq!(out.len(), 25);
        assert_eq!(out.capacity(), cap);
    }
}
