//! One scheduling profile: filters in order, a weighted sum of clamped scores, then the picker.
//!
//! A run can be traced ([`ProfileTrace`]) so the route probe explains a decision with the very code that
//! makes it, instead of a copy that could drift. The trace is a generic parameter: the hot path runs with
//! [`NoTrace`], whose empty methods compile away, so scheduling neither allocates nor branches for it.

use std::sync::Arc;

use rand::rngs::SmallRng;

use super::observer::{ExtensionPoint, Observer};
use super::plugin::{Filter, Picker, PluginId, Scorer};
use super::types::{Candidate, ProfileRunResult, SchedulingError, SchedulingRequest, ScoredCandidate};

/// A scorer with its weight in the profile's sum.
#[derive(Clone)]
pub struct WeightedScorer {
    pub id: PluginId,
    pub scorer: Arc<dyn Scorer>,
    pub weight: f64,
}

/// A named chain of filters, weighted scorers and one picker.
#[derive(Clone)]
pub struct Profile {
    pub name: String,
    pub filters: Vec<(PluginId, Arc<dyn Filter>)>,
    pub scorers: Vec<WeightedScorer>,
    pub picker: (PluginId, Arc<dyn Picker>),
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("name", &self.name)
            .field("filters", &self.filters.iter().map(|(id, _)| &id.name).collect::<Vec<_>>())
            .field("scorers", &self.scorers.iter().map(|s| (&s.id.name, s.weight)).collect::<Vec<_>>())
            .field("picker", &self.picker.0.name)
            .finish()
    }
}

/// Hears each step of a profile run (every method defaults to doing nothing). Indices are into the cycle's
/// candidate slice.
pub trait ProfileTrace {
    /// The profile `name` starts over `candidates`.
    fn started(&mut self, _name: &str, _candidates: &[Candidate]) {}
    /// `filter` ran and left `kept` (a filter may also restore endpoints: it fails open).
    fn filtered(&mut self, _filter: &PluginId, _kept: &[usize]) {}
    /// `scorer` scored `kept`: `raw[i]` for `kept[i]`, before [`clamp_score`] and the weight.
    fn scored(&mut self, _scorer: &WeightedScorer, _kept: &[usize], _raw: &[f64]) {}
    /// The picker chose `picked` (primary first) among `scored`, each with its weighted total.
    fn picked(&mut self, _picker: &PluginId, _scored: &[ScoredCandidate], _picked: &[usize]) {}
}

/// The trace of the hot path: nothing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NoTrace;

impl ProfileTrace for NoTrace {}

/// A scorer's value as it enters the weighted sum: clamped to [0, 1], NaN counted as 0 so one bad value
/// cannot poison the sum.
#[inline]
pub(crate) fn clamp_score(s: f64) -> f64 {
    if s.is_nan() {
        0.0
    } else {
        s.clamp(0.0, 1.0)
    }
}

/// Reusable buffers for one profile run, so a cycle allocates per request, not per endpoint.
#[derive(Debug, Default)]
pub struct Scratch {
    kept: Vec<usize>,
    totals: Vec<f64>,
    scores: Vec<f64>,
    scored: Vec<ScoredCandidate>,
    picked: Vec<usize>,
}

impl Profile {
    /// Runs the profile over `candidates`. Fails when a filter leaves no endpoint.
    pub fn run(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        rng: &mut SmallRng,
        scratch: &mut Scratch,
        observer: &dyn Observer,
    ) -> Result<ProfileRunResult, SchedulingError> {
        self.run_traced(req, candidates, rng, scratch, observer, &mut NoTrace)
    }

    /// [`run`](Self::run), telling `trace` each step; the same implementation, so a traced run decides
    /// exactly what an untraced one does (and draws the same numbers from `rng`).
    pub fn run_traced<T: ProfileTrace + ?Sized>(
        &self,
        req: &SchedulingRequest<'_>,
        candidates: &[Candidate],
        rng: &mut SmallRng,
        scratch: &mut Scratch,
        observer: &dyn Observer,
        trace: &mut T,
    ) -> Result<ProfileRunResult, SchedulingError> {
        if candidates.is_empty() {
            return Err(SchedulingError::NoCandidates);
        }
        let kept = &mut scratch.kept;
        kept.clear();
        kept.extend(0..candidates.len());
        trace.started(&self.name, candidates);
        for (id, filter) in &self.filters {
            observer.time(ExtensionPoint::Filter, id, &mut || filter.filter(req, candidates, kept));
            trace.filtered(id, kept);
            if kept.is_empty() {
                return Err(SchedulingError::AllFiltered {
                    profile: self.name.clone(),
                    filter: id.name.clone(),
                });
            }
        }

        let n = kept.len();
        scratch.totals.clear();
        scratch.totals.resize(n, 0.0);
        for ws in &self.scorers {
            scratch.scores.clear();
            scratch.scores.resize(n, 0.0);
            let scores = &mut scratch.scores;
            observer
                .time(ExtensionPoint::Scorer, &ws.id, &mut || ws.scorer.score(req, candidates, kept, scores));
            trace.scored(ws, kept, &scratch.scores);
            for (total, &s) in scratch.totals.iter_mut().zip(scratch.scores.iter()) {
                *total += ws.weight * clamp_score(s);
            }
        }

        scratch.scored.clear();
        scratch.scored.extend(
            kept.iter().zip(&scratch.totals).map(|(&index, &score)| ScoredCandidate { index, score }),
        );
        // Kept before the picker, which may reorder `scored`.
        let mut result = ProfileRunResult { targets: Vec::new(), scores: scratch.scored.clone() };

        scratch.picked.clear();
        let (picker_id, picker) = &self.picker;
        let scored = &mut scratch.scored;
        let picked = &mut scratch.picked;
        observer.time(ExtensionPoint::Picker, picker_id, &mut || picker.pick(scored, rng, picked));
        trace.picked(picker_id, &scratch.scored, &scratch.picked);
        result
            .targets
            .extend(scratch.picked.iter().filter_map(|&i| candidates.get(i)).map(|c| c.endpoint.clone()));
        if result.targets.is_empty() {
            return Err(SchedulingError::AllFiltered {
                profile: self.name.clone(),
                filter: picker_id.name.clone(),
            });
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::scheduling::observer::NoopObserver;
    use crate::scheduling::plugins::testing::{endpoint, RequestFixture};
    use crate::scheduling::plugins::MaxScorePicker;
    use crate::scheduling::ScorerCategory;

    /// Drops the first candidate.
    struct DropFirst;
    impl Filter for DropFirst {
        fn filter(&self, _: &SchedulingRequest<'_>, _: &[Candidate], kept: &mut Vec<usize>) {
            kept.retain(|&i| i != 0);
        }
    }

    /// Scores out of range on purpose: 2.0, NaN, 0.25 by candidate index.
    struct Wild;
    impl Scorer for Wild {
        fn category(&self) -> ScorerCategory {
            ScorerCategory::Balance
        }
        fn score(&self, _: &SchedulingRequest<'_>, _: &[Candidate], kept: &[usize], scores: &mut [f64]) {
            for (s, &i) in scores.iter_mut().zip(kept) {
                *s = [2.0, f64::NAN, 0.25][i];
            }
        }
    }

    #[derive(Default)]
    struct Recorder(Vec<String>);
    impl ProfileTrace for Recorder {
        fn started(&mut self, name: &str, candidates: &[Candidate]) {
            self.0.push(format!("{name} over {}", candidates.len()));
        }
        fn filtered(&mut self, filter: &PluginId, kept: &[usize]) {
            self.0.push(format!("{} kept {kept:?}", filter.name));
        }
        fn scored(&mut self, scorer: &WeightedScorer, kept: &[usize], raw: &[f64]) {
            self.0.push(format!("{} x{} scored {kept:?} {raw:?}", scorer.id.name, scorer.weight));
        }
        fn picked(&mut self, picker: &PluginId, scored: &[ScoredCandidate], picked: &[usize]) {
            let mut totals: Vec<_> = scored.iter().map(|s| (s.index, s.score)).collect();
            totals.sort_by_key(|&(index, _)| index);
            self.0.push(format!("{} picked {picked:?} of {totals:?}", picker.name));
        }
    }

    #[test]
    fn a_traced_run_reports_each_step_and_decides_as_an_untraced_one() {
        let id = |name: &str| PluginId { type_name: "test", name: name.into() };
        let profile = Profile {
            name: "p".into(),
            filters: vec![(id("drop-first"), Arc::new(DropFirst))],
            scorers: vec![WeightedScorer { id: id("wild"), scorer: Arc::new(Wild), weight: 2.0 }],
            picker: (id("max"), Arc::new(MaxScorePicker::new(1))),
        };
        let candidates: Vec<_> = (1..=3).map(endpoint).map(Candidate::new).collect();
        let fixture = RequestFixture::with_prompt("m", "hello");
        let req = fixture.request();
        let run = |trace: Option<&mut Recorder>| {
            let (mut rng, mut scratch) = (SmallRng::seed_from_u64(3), Scratch::default());
            match trace {
                Some(t) => profile.run_traced(&req, &candidates, &mut rng, &mut scratch, &NoopObserver, t),
                None => profile.run(&req, &candidates, &mut rng, &mut scratch, &NoopObserver),
            }
            .expect("a pick")
        };
        let mut trace = Recorder::default();
        let traced = run(Some(&mut trace));
        let plain = run(None);
        let names = |targets: &[Arc<crate::datastore::Endpoint>]| -> Vec<String> {
            targets.iter().map(|e| e.name.clone()).collect()
        };
        assert_eq!(names(&traced.targets), names(&plain.targets));
        assert_eq!(names(&traced.targets), ["pod-3"]);
        // Raw scores reach the trace as the scorer wrote them; totals are clamped (NaN as 0) and weighted.
        assert_eq!(
            trace.0,
            [
                "p over 3",
                "drop-first kept [1, 2]",
                "wild x2 scored [1, 2] [NaN, 0.25]",
                "max picked [2] of [(1, 0.0), (2, 0.5)]",
            ]
        );
        assert_eq!(clamp_score(2.0), 1.0);
    }
}
