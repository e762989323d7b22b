//! A per-request uniform draw for the filters that explore (`explorationProbability`,
//! `epsilonExploreNeg`): filters get no random source (the cycle's generator belongs to the picker), and a
//! draw derived from the request id and the plugin's name keeps them pure and replayable — the same
//! request meets the same choice in the server, the route probe and the lab.

/// A number in [0, 1) from `request_id` and `salt` (the plugin instance's name), FNV-1a then a final mix.
pub(crate) fn uniform(request_id: &str, salt: &str) -> f64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in request_id.bytes().chain([0xff]).chain(salt.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    // splitmix64's finaliser: FNV's low bits alone are poorly mixed for short inputs.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_and_replayable() {
        let draws: Vec<f64> = (0..10_000).map(|i| uniform(&format!("req-{i}"), "filter")).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let below = draws.iter().filter(|&&d| d < 0.1).count();
        assert!((800..1200).contains(&below), "{below} of 10,000 below 0.1");
        assert_eq!(uniform("req-1", "filter"), uniform("req-1", "filter"));
        assert_ne!(uniform("req-1", "a"), uniform("req-1", "b"));
    }
}
