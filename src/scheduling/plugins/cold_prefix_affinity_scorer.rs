//! `cold-prefix-affinity-scorer` (epp's own): when no candidate holds any of the request's prompt, prefers
//! the one endpoint that rendezvous hashing assigns the prompt's opening.
//!
//! Why: several active epp replicas each remember only what they routed, and learn another's placements
//! only from the engines' KV events, which come once the engine has computed the prompt — after its queue,
//! seconds under overload. Meanwhile each replica places the same new prompt on whichever endpoint looks
//! best to it at that moment, so one prompt ends up cached (and computed) on several endpoints. Rendezvous
//! hashing (highest random weight) gives every replica the same answer without any shared state: the
//! endpoint whose hash with the prompt's opening is highest, among the candidates left by the filters.
//! BENCHMARKS.md §8 measures it.
//!
//! ```text
//! score = 1   for the candidate with the highest hash(opening, endpoint address), when no candidate
//!             has any prefix match (`attrs.prefix`, from a prefix producer) and this epp has seen the
//!             opening before
//! score = 0   otherwise
//! ```
//!
//! The opening is the model and the first `openingBytes` bytes of the prompt (default 256, about one
//! 16-token block): prompts that open alike share cache blocks and go together. Only a *recurring*
//! opening is placed by hash: a prompt seen for the first time is most often one that will never come
//! again, and placing those by hash instead of by load costs a homogeneous pool its balance (BENCHMARKS.md
//! §8). Seen openings are kept in a fixed table of 65,536 slots (512 KiB), one opening a slot, the latest
//! winning: lossy, lock-free, bounded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Deserialize;
use xxhash_rust::xxh64::xxh64;

use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, FactoryContext, PluginError, SchedulingRequest, Scorer,
    ScorerCategory,
};

pub(crate) const TYPE_NAME: &str = "cold-prefix-affinity-scorer";

const DEFAULT_OPENING_BYTES: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    opening_bytes: Option<usize>,
}

/// Slots of the table of seen openings (a power of two).
const SEEN_SLOTS: usize = 1 << 16;

#[derive(Debug)]
pub(crate) struct ColdPrefixAffinityScorer {
    opening_bytes: usize,
    /// Openings seen, one per slot (`opening % SEEN_SLOTS`); 0 is empty.
    seen: Box<[AtomicU64]>,
}

impl ColdPrefixAffinityScorer {
    /// The opening of `prompt` as one hash: the model, then the opening's bytes (never 0, the empty slot).
    fn opening(&self, model: &str, prompt: &[u8]) -> u64 {
        let opening = &prompt[..prompt.len().min(self.opening_bytes)];
        xxh64(opening, xxh64(model.as_bytes(), 0)).max(1)
    }

    /// Whether `opening` was seen before; records it unless `dry_run` (a route probe changes nothing).
    fn recurs(&self, opening: u64, dry_run: bool) -> bool {
        let slot = &self.seen[(opening as usize) & (SEEN_SLOTS - 1)];
        if dry_run {
            return slot.load(Ordering::Relaxed) == opening;
        }
        slot.swap(opening, Ordering::Relaxed) == opening
    }
}

/// The rendezvous weight of `candidate` for `opening`: a hash of both, the same in every replica.
fn weight(opening: u64, candidate: &Candidate) -> u64 {
    xxh64(candidate.endpoint.host_port.as_bytes(), opening)
}

impl Scorer for ColdPrefixAffinityScorer {
    fn category(&self) -> ScorerCategory {
        ScorerCategory::Affinity
    }

    fn score(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        subset: &[usize],
        scores: &mut [f64],
    ) {
        scores.fill(0.0);
        let prompt = req.prefix_text();
        if prompt.is_empty() {
            return;
        }
        let opening = self.opening(req.target_model, prompt);
        let recurs = self.recurs(opening, req.dry_run);
        let held = subset.iter().any(|&i| candidates[i].attrs.prefix.is_some_and(|m| m.match_blocks > 0));
        if held || !recurs {
            return;
        }
        let best = (0..subset.len()).max_by_key(|&k| (weight(opening, &candidates[subset[k]]), k));
        if let Some(k) = best {
            scores[k] = 1.0;
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let opening_bytes = p.opening_bytes.unwrap_or(DEFAULT_OPENING_BYTES);
    if opening_bytes == 0 {
        return Err(PluginError::new(name, TYPE_NAME, "parameter `openingBytes` must be > 0"));
    }
    Ok(BuiltPlugin::new(TYPE_NAME, name)
        .scorer(Arc::new(ColdPrefixAffinityScorer {
            opening_bytes,
            seen: (0..SEEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }))
        .consumes(&[DataKey::PrefixCacheMatch]))
}

#[cfg(test)]
#[path = "cold_prefix_affinity_scorer_tests.rs"]
mod tests;
