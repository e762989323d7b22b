//! The candidates of one pool snapshot, kept from one cycle to the next.
//!
//! Building a cycle's candidates from scratch clones each endpoint's `Arc`, loads its telemetry (another
//! reference count) and drops both afterwards: at 1,000 endpoints that was about half of a decision with
//! the default profile (BENCHMARKS.md, "The decision at 1,000 endpoints"). A [`CandidateSet`] keeps the
//! candidates of the pool it last saw; while the pool is the same snapshot, a cycle only swaps in the
//! telemetry of the endpoints a scrape has replaced since (one relaxed pointer load each to find out) and
//! clears the per-request attributes. The candidates a cycle sees are the same values either way.
//!
//! A set holds the pool snapshot it last saw, and so its endpoints, until it is refreshed with another:
//! whoever keeps one keeps at most one stale pool alive.

use std::sync::Arc;

use super::types::{Candidate, EndpointAttributes};
use crate::datastore::{Endpoint, TelemetryCache};

/// Reusable candidates for successive cycles over a pool (see the module docs).
#[derive(Default)]
pub struct CandidateSet {
    pool: Option<Arc<Vec<Arc<Endpoint>>>>,
    telemetry: Vec<TelemetryCache>,
    candidates: Vec<Candidate>,
}

impl CandidateSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The candidates of `pool`, in its order: each with its endpoint's current telemetry and empty
    /// attributes, as [`Candidate::new`] would make them.
    pub fn refresh(&mut self, pool: &Arc<Vec<Arc<Endpoint>>>) -> &mut [Candidate] {
        if self.pool.as_ref().is_some_and(|held| Arc::ptr_eq(held, pool)) {
            for (candidate, cache) in self.candidates.iter_mut().zip(self.telemetry.iter_mut()) {
                let current = cache.load();
                if !Arc::ptr_eq(current, &candidate.telemetry) {
                    candidate.telemetry = current.clone();
                }
                candidate.attrs = EndpointAttributes::default();
            }
        } else {
            self.rebuild(pool);
        }
        &mut self.candidates
    }

    fn rebuild(&mut self, pool: &Arc<Vec<Arc<Endpoint>>>) {
        self.telemetry.clear();
        self.candidates.clear();
        for endpoint in pool.iter() {
            let mut cache = endpoint.telemetry_cache();
            let telemetry = cache.load().clone();
            self.candidates.push(Candidate {
                endpoint: endpoint.clone(),
                telemetry,
                attrs: Default::default(),
            });
            self.telemetry.push(cache);
        }
        self.pool = Some(pool.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::datastore::EndpointTelemetry;
    use crate::scheduling::types::PrefixMatch;

    fn pool(n: u16) -> Arc<Vec<Arc<Endpoint>>> {
        Arc::new(
            (0..n)
                .map(|i| {
                    Arc::new(Endpoint::new(format!("e{i}"), SocketAddr::from(([10, 0, 0, 1], 8000 + i))))
                })
                .collect(),
        )
    }

    fn queue(c: &Candidate) -> u64 {
        c.telemetry.waiting_queue_size
    }

    #[test]
    fn same_pool_picks_up_new_telemetry_and_clears_attributes() {
        let pool = pool(3);
        let mut set = CandidateSet::new();
        let first = set.refresh(&pool);
        assert_eq!(first.len(), 3);
        first[1].attrs.prefix = Some(PrefixMatch { match_blocks: 1, total_blocks: 2, block_chars: 64 });
        pool[1].update_telemetry(EndpointTelemetry { waiting_queue_size: 7, ..Default::default() });

        let again = set.refresh(&pool);
        assert_eq!(again.iter().map(queue).collect::<Vec<_>>(), vec![0, 7, 0]);
        assert!(again.iter().all(|c| c.attrs.prefix.is_none()));
        for (c, e) in again.iter().zip(pool.iter()) {
            assert!(Arc::ptr_eq(&c.endpoint, e));
            assert!(Arc::ptr_eq(&c.telemetry, &e.telemetry()));
        }
    }

    #[test]
    fn a_new_pool_is_rebuilt_and_the_old_one_released() {
        let old = pool(2);
        let mut set = CandidateSet::new();
        set.refresh(&old);
        assert!(Arc::strong_count(&old[0]) > 1);

        let new = pool(4);
        let candidates = set.refresh(&new);
        assert_eq!(
            candidates.iter().map(|c| c.endpoint.name.as_str()).collect::<Vec<_>>(),
            ["e0", "e1", "e2", "e3"]
        );
        assert!(Arc::ptr_eq(&candidates[3].endpoint, &new[3]));
        assert_eq!(Arc::strong_count(&old[0]), 1, "the set let go of the old pool's endpoints");
        assert_eq!(Arc::strong_count(&old), 1);
    }

    #[test]
    fn an_empty_pool_gives_no_candidates() {
        let mut set = CandidateSet::new();
        assert!(set.refresh(&Arc::new(Vec::new())).is_empty());
    }
}
