//! 64-byte blocks of a JSON string's bytes as bit masks, so a long string is skipped and validated a
//! block at a time instead of a byte at a time.
//!
//! The approach is simdjson's stage 1 (Langdale and Lemire, "Parsing Gigabytes of JSON per Second",
//! VLDB Journal 2019, §3.1): classify every byte of a block with vector compares, turn each class into a
//! `u64` with one bit per byte, and find the escaped characters arithmetically, with no branch per
//! backslash. On x86_64 the compares are SSE2 (part of the x86_64 baseline, so no runtime detection),
//! through `safe_arch`'s safe wrappers; elsewhere a portable loop computes the same masks.

/// Bytes per block: one bit of a `u64` each.
pub(super) const BLOCK: usize = 64;

/// The classes of a block's bytes that matter inside a JSON string, one bit per byte (bit `i` is byte
/// `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Masks {
    /// `"`
    pub(super) quote: u64,
    /// `\`
    pub(super) backslash: u64,
    /// A control character (below 0x20), which JSON forbids unescaped inside a string.
    pub(super) control: u64,
}

impl Masks {
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(super) fn of(block: &[u8; BLOCK]) -> Masks {
        use safe_arch::{cmp_eq_mask_i8_m128i, m128i, min_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i};
        let quote = set_splat_i8_m128i(b'"' as i8);
        let backslash = set_splat_i8_m128i(b'\\' as i8);
        let below_space = set_splat_i8_m128i(0x1f);
        let mut masks = Masks { quote: 0, backslash: 0, control: 0 };
        for (lane, bytes) in block.chunks_exact(16).enumerate() {
            let mut sixteen = [0u8; 16];
            sixteen.copy_from_slice(bytes);
            let v = m128i::from(sixteen);
            let shift = 16 * lane;
            let bits = |m: m128i| u64::from(move_mask_i8_m128i(m) as u16) << shift;
            masks.quote |= bits(cmp_eq_mask_i8_m128i(v, quote));
            masks.backslash |= bits(cmp_eq_mask_i8_m128i(v, backslash));
            // An unsigned byte is at most 0x1f exactly when min(byte, 0x1f) is the byte itself.
            masks.control |= bits(cmp_eq_mask_i8_m128i(min_u8_m128i(v, below_space), v));
        }
        masks
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    pub(super) fn of(block: &[u8; BLOCK]) -> Masks {
        Masks::portable(block)
    }

    /// The same masks a byte at a time: the definition the vector version is tested against, and the
    /// version used where there is no vector one.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    pub(super) fn portable(block: &[u8; BLOCK]) -> Masks {
        let mut masks = Masks { quote: 0, backslash: 0, control: 0 };
        for (i, &byte) in block.iter().enumerate() {
            masks.quote |= u64::from(byte == b'"') << i;
            masks.backslash |= u64::from(byte == b'\\') << i;
            masks.control |= u64::from(byte < 0x20) << i;
        }
        masks
    }
}

/// The characters a backslash escapes in this block, given its backslashes.
///
/// `carry` is 1 when the block's first byte is escaped by a backslash that ended the previous block,
/// and is updated for the next block. A backslash escapes the next byte unless it is itself escaped, so
/// in a run of backslashes every other byte is escaped, starting with the run's second. The run's
/// parity comes from adding the run starts that sit on odd bits to the backslash mask: the carry of
/// that addition flows through each run and lands on the byte after it (simdjson's
/// `find_escaped_branchless`, simdjson/simdjson:src/generic/stage1/json_escape_scanner.h).
#[inline]
pub(super) fn find_escaped(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN_BITS: u64 = 0x5555_5555_5555_5555;
    // A backslash escaped from the previous block escapes nothing itself.
    let backslash = backslash & !*carry;
    let follows_escape = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN_BITS & !follows_escape;
    let (even_started, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    let invert = even_started << 1;
    (EVEN_BITS ^ invert) & follows_escape
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Escaped positions the slow way: walk the bytes, a backslash escapes the next one unless it is
    /// itself escaped.
    fn escaped_by_walking(bytes: &[u8]) -> Vec<bool> {
        let mut escaped = vec![false; bytes.len()];
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'\\' && i + 1 < bytes.len() {
                escaped[i + 1] = true;
                i += 2;
            } else {
                i += 1;
            }
        }
        escaped
    }

    fn random_bytes(rng: &mut SmallRng, len: usize, alphabet: &[u8]) -> Vec<u8> {
        (0..len).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect()
    }

    #[test]
    fn vector_masks_equal_the_portable_definition() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..2_000 {
            let bytes: Vec<u8> = (0..BLOCK).map(|_| rng.random()).collect();
            let block: &[u8; BLOCK] = bytes.as_slice().try_into().unwrap();
            assert_eq!(Masks::of(block), Masks::portable(block), "{bytes:?}");
        }
        let edges: [u8; BLOCK] =
            std::array::from_fn(|i| [0x00, 0x1f, 0x20, b'"', b'\\', 0x7f, 0x80, 0xff][i % 8]);
        assert_eq!(Masks::of(&edges), Masks::portable(&edges));
    }

    #[test]
    fn escapes_match_a_byte_walk_across_blocks() {
        let mut rng = SmallRng::seed_from_u64(11);
        for round in 0..3_000 {
            // Dense backslashes (runs of every length, across block edges) and a sparse mix.
            let alphabet: &[u8] = if round % 2 == 0 { b"\\\\\\a" } else { b"\\ab\"cdefgh" };
            let bytes = random_bytes(&mut rng, BLOCK * 4, alphabet);
            let expected = escaped_by_walking(&bytes);
            let mut carry = 0;
            for (b, block) in bytes.chunks_exact(BLOCK).enumerate() {
                let block: &[u8; BLOCK] = block.try_into().unwrap();
                let escaped = find_escaped(Masks::portable(block).backslash, &mut carry);
                for i in 0..BLOCK {
                    assert_eq!(
                        escaped >> i & 1 == 1,
                        expected[b * BLOCK + i],
                        "block {b} byte {i}: {bytes:?}"
                    );
                }
            }
        }
    }
}
