use super::*;
use crate::scheduling::plugins::testing::endpoint;

fn holders_of(index: &PrefixIndex, hash: u64) -> Vec<Slot> {
    index.holders.get(&hash).map(|h| h.as_slice().iter().map(|h| h.slot).collect()).unwrap_or_default()
}

#[test]
fn greedy_match_stops_at_first_unheld_block() {
    let (a, b) = (endpoint(1), endpoint(2));
    let mut index = PrefixIndex::default();
    index.insert(&a, 100, &[1, 2, 3]);
    index.insert(&b, 100, &[1, 2, 9, 4]);
    let mut counts = Vec::new();
    assert!(index.match_longest(&[1, 2, 3, 4], &mut counts));
    let (sa, sb) = (index.slot_of(&a).unwrap(), index.slot_of(&b).unwrap());
    assert_eq!(counts[sa as usize], 3);
    // b holds 4 but not 3; 3 is held by a, so matching continues to 4, which b holds.
    assert_eq!(counts[sb as usize], 3);
    assert_eq!(index.match_length(&a, &[1, 2, 3, 4]), 3);
    assert_eq!(index.match_length(&b, &[1, 2, 3, 4]), 3);
    // No endpoint holds 7: matching stops there.
    assert!(index.match_longest(&[1, 7, 3], &mut counts));
    assert_eq!(counts[sa as usize], 1);
    assert!(!index.match_longest(&[7, 1], &mut counts));
    assert_eq!(index.match_length(&endpoint(3), &[1, 2]), 0);
}

#[test]
fn eviction_keeps_reverse_map_consistent() {
    let a = endpoint(1);
    let mut index = PrefixIndex::default();
    index.insert(&a, 3, &[1, 2, 3]);
    index.insert(&a, 3, &[1]); // 1 becomes most recent; 2 is now the oldest
    index.insert(&a, 3, &[4]);
    assert!(holders_of(&index, 2).is_empty());
    assert_eq!(index.entries(), 3);
    assert_eq!(index.distinct_blocks(), 3);
    // One insertion larger than the capacity keeps only its last blocks.
    index.insert(&a, 2, &[10, 11, 12]);
    assert_eq!(index.entries(), 2);
    assert_eq!(index.distinct_blocks(), 2);
    assert!(!holders_of(&index, 11).is_empty());
    assert!(!holders_of(&index, 12).is_empty());
}

#[test]
fn removal_drops_lru_and_reverse_entries_and_reuses_slots() {
    let (a, b) = (endpoint(1), endpoint(2));
    let mut index = PrefixIndex::default();
    index.insert(&a, 10, &[1, 2]);
    index.insert(&b, 10, &[2, 3]);
    index.remove(&a);
    assert_eq!(index.entries(), 2);
    assert!(holders_of(&index, 1).is_empty());
    assert_eq!(holders_of(&index, 2), vec![index.slot_of(&b).unwrap()]);
    let c = endpoint(3);
    index.insert(&c, 10, &[5]);
    assert_eq!(index.slot_of(&c), Some(0));
    assert_eq!(index.endpoint_count(), 2);
}

#[test]
fn unreferenced_endpoints_are_pruned() {
    let mut index = PrefixIndex::default();
    index.insert(&endpoint(1), 10, &[1, 2]); // the only other reference is dropped here
    let kept = endpoint(2);
    index.insert(&kept, 10, &[3]);
    index.prune_unreferenced();
    assert_eq!(index.endpoint_count(), 1);
    assert_eq!(index.entries(), 1);
    assert!(holders_of(&index, 1).is_empty());
}

/// The index against the plainest LRU there is (a list per endpoint, most recent first) over random
/// insertions, capacity changes and removals: the same blocks in the same recency order, and a reverse map
/// that names exactly the endpoints holding each block.
#[test]
fn agrees_with_a_plain_lru_model() {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    let endpoints: Vec<_> = (1..=3).map(endpoint).collect();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut index = PrefixIndex::default();
    let mut model: Vec<Vec<u64>> = vec![Vec::new(); endpoints.len()];
    for _ in 0..3_000 {
        let e = rng.random_range(0..endpoints.len());
        if rng.random_ratio(1, 50) {
            index.remove(&endpoints[e]);
            model[e].clear();
            continue;
        }
        let capacity = rng.random_range(1..12);
        let hashes: Vec<u64> = (0..rng.random_range(0..8)).map(|_| rng.random_range(0..20)).collect();
        index.insert(&endpoints[e], capacity, &hashes);
        for &hash in &hashes {
            model[e].retain(|&h| h != hash);
            model[e].insert(0, hash);
        }
        model[e].truncate(capacity);
        for (i, ep) in endpoints.iter().enumerate() {
            assert_eq!(index.recency(ep), model[i], "endpoint {i}");
        }
        assert_eq!(index.entries(), model.iter().map(Vec::len).sum::<usize>());
        for hash in 0..20 {
            let mut held: Vec<Slot> = holders_of(&index, hash);
            held.sort_unstable();
            let mut expected: Vec<Slot> = (0..endpoints.len())
                .filter(|&i| model[i].contains(&hash))
                .filter_map(|i| index.slot_of(&endpoints[i]))
                .collect();
            expected.sort_unstable();
            assert_eq!(held, expected, "holders of block {hash}");
        }
    }
}
