//! [`KeptHandles`]: metric handles kept by a key the request path already holds, so that a recording
//! finds its series with one hash of that key instead of interning label values and probing families.
//!
//! Used for a flow's request series (`director::RequestSeries`) and each plugin's duration histogram
//! (`scheduling::SchedulerMetrics`). Lookups borrow the key (no key is built per request); a handle is
//! kept only when its maker says so (never one that resolved to an overflow series or `other`), and at
//! most `cap` are, after which requests resolve as if nothing were kept.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{PoisonError, RwLock};

/// Values of type `V` kept by the hash of a borrowed key, each compared on lookup.
#[derive(Debug)]
pub struct KeptHandles<V> {
    hasher: RandomState,
    cap: usize,
    kept: RwLock<Kept<V>>,
}

#[derive(Debug)]
struct Kept<V> {
    by_hash: HashMap<u64, Vec<V>>,
    count: usize,
}

impl<V> Kept<V> {
    fn find(&self, hash: u64, is: &impl Fn(&V) -> bool) -> Option<&V> {
        self.by_hash.get(&hash)?.iter().find(|v| is(v))
    }
}

impl<V> KeptHandles<V> {
    /// Keeps at most `cap` values.
    pub fn new(cap: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            cap,
            kept: RwLock::new(Kept { by_hash: HashMap::new(), count: 0 }),
        }
    }

    /// Runs `f` on the value kept for `key` (the one `is` recognises), or on a new one from `make`,
    /// kept when `make` says so and there is room.
    pub fn with<R>(
        &self,
        key: impl Hash,
        is: impl Fn(&V) -> bool,
        make: impl FnOnce() -> (V, bool),
        f: impl FnOnce(&V) -> R,
    ) -> R {
        let hash = self.hasher.hash_one(key);
        let full = {
            let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(found) = kept.find(hash, &is) {
                return f(found);
            }
            kept.count >= self.cap
        };
        let (value, keep) = make();
        if full || !keep {
            return f(&value);
        }
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have kept this key, or taken the last place, in between.
        if let Some(found) = kept.find(hash, &is) {
            return f(found);
        }
        if kept.count >= self.cap {
            return f(&value);
        }
        kept.count += 1;
        let entry = kept.by_hash.entry(hash).or_default();
        let index = entry.len();
        entry.push(value);
        f(&entry[index])
    }

    /// How many values are kept.
    pub fn len(&self) -> usize {
        self.kept.read().unwrap_or_else(PoisonError::into_inner).count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_its_maker_allows_up_to_the_cap() {
        let kept = KeptHandles::new(2);
        let get =
            |k: &str, keep: bool| kept.with(k, |v: &String| v == k, || (k.to_string(), keep), Clone::clone);
        assert_eq!(get("a", true), "a");
        assert_eq!(get("b", false), "b");
        assert_eq!(kept.len(), 1, "b's maker said not to keep it");
        assert_eq!(get("c", true), "c");
        assert_eq!(get("d", true), "d");
        assert_eq!(kept.len(), 2, "the cap holds");
        // A kept value is found without its maker.
        assert_eq!(kept.with("a", |v: &String| v == "a", || unreachable!("kept"), Clone::clone), "a");
    }
}
