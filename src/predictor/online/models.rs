//! The published models and the handle the request path predicts through.
//!
//! Why an atomic swap: a retrain takes seconds on the background thread and the request path predicts in
//! microseconds, so the request path must never wait for it. The current [`Models`] sit behind an
//! `ArcSwapOption`: a reader takes a guard (a few atomic operations, no lock, no allocation) and predicts on
//! whatever generation was current at that instant; the trainer builds the next generation aside and
//! publishes it with one pointer store. TTFT and TPOT are published together, so one snapshot always
//! answers both from the same generation, never a TTFT model from one retrain and TPOT from another.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use thiserror::Error;

use crate::predictor::train::Objective;
use crate::predictor::Forest;

/// Which latency a model predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Time to first token (end-to-end latency when streaming mode is off, as in llm-d).
    Ttft,
    /// Average time per output token after the first.
    Tpot,
}

impl Target {
    pub const ALL: [Target; 2] = [Target::Ttft, Target::Tpot];

    /// The `model` label value and file stem.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Ttft => "ttft",
            Target::Tpot => "tpot",
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a model did on the held-out rows when it was trained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Held-out rows scored (those with a positive target for the MAPE).
    pub rows: usize,
    /// Mean absolute percentage error, as a fraction (0.05 is 5%): the mean model's measure.
    pub mape: f64,
    /// Fraction of held-out rows whose observed latency was at most the prediction: a quantile model's
    /// measure, which should be close to its α (llm-d's `coverage_percent`, as a fraction).
    pub coverage: f64,
}

/// One trained model and what it predicts.
#[derive(Debug, Clone)]
pub struct Model {
    pub forest: Forest,
    pub objective: Objective,
    /// `None` for a model loaded from a file rather than trained here.
    pub score: Option<Score>,
}

impl Model {
    /// Predicts `out.len()` rows (see [`Forest::predict_batch`]) through the objective's link
    /// ([`Objective::output`]), clamped at 0 as llm-d's prediction server does: a latency is never
    /// negative, whatever a tree's leaves add up to.
    pub fn predict_batch(&self, rows: &[f32], out: &mut [f32]) {
        self.forest.predict_batch(rows, out);
        let objective = self.objective;
        for x in out.iter_mut() {
            *x = objective.output(*x).max(0.0);
        }
    }
}

/// One generation of models: what a reader sees in one snapshot.
#[derive(Debug, Clone)]
pub struct Models {
    /// 1 for the first models published (trained, loaded or seeded), then one more per publication.
    pub generation: u64,
    pub ttft: Model,
    /// `None` until TPOT samples exist, and always with streaming mode off (llm-d trains no TPOT then).
    pub tpot: Option<Model>,
}

impl Models {
    pub fn get(&self, target: Target) -> Option<&Model> {
        match target {
            Target::Ttft => Some(&self.ttft),
            Target::Tpot => self.tpot.as_ref(),
        }
    }
}

/// There is no model for this target yet: the caller falls back to scoring without predictions (llm-d's
/// "no predictions" path, where the scorer uses its composite fallback).
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
#[error("no {target} model yet")]
pub struct NoModel {
    pub target: Target,
}

/// The request path's handle: cheap to clone, never blocks, never locks.
#[derive(Debug, Clone, Default)]
pub struct Predictor {
    current: Arc<ArcSwapOption<Models>>,
}

impl Predictor {
    /// A handle with no models.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current generation, kept alive for as long as the caller holds it (use it to predict TTFT and
    /// TPOT from the same generation). `None` before the first models are published.
    pub fn snapshot(&self) -> Option<Arc<Models>> {
        self.current.load_full()
    }

    /// The current generation number, 0 before any.
    pub fn generation(&self) -> u64 {
        self.current.load().as_ref().map_or(0, |models| models.generation)
    }

    /// Predicts `out.len()` rows of `target`'s feature row on the current generation and returns that
    /// generation, or [`NoModel`] when there is none yet. Allocates nothing.
    ///
    /// # Panics
    /// When `rows.len()` is not `out.len()` rows of the target's features (a caller bug).
    pub fn predict_batch(&self, target: Target, rows: &[f32], out: &mut [f32]) -> Result<u64, NoModel> {
        let guard = self.current.load();
        let models = guard.as_deref().ok_or(NoModel { target })?;
        models.get(target).ok_or(NoModel { target })?.predict_batch(rows, out);
        Ok(models.generation)
    }

    /// Makes `models` the current generation for every later reader; readers holding the previous one
    /// finish on it.
    pub(crate) fn publish(&self, models: Models) {
        self.current.store(Some(Arc::new(models)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predictor::Node;

    /// Generation `g`: both models predict `g` for every row, so a reader can tell a torn snapshot.
    fn generation(g: u64) -> Models {
        let model = |n_features| Model {
            forest: Forest::from_trees(n_features, g as f32, &[vec![Node::Leaf(0.0)]]).unwrap(),
            objective: Objective::SquaredError,
            score: None,
        };
        Models { generation: g, ttft: model(3), tpot: Some(model(2)) }
    }

    #[test]
    fn readers_see_whole_generations_while_the_writer_swaps() {
        const LAST: u64 = 2_000;
        let predictor = Predictor::new();
        predictor.publish(generation(1));
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let predictor = predictor.clone();
                std::thread::spawn(move || {
                    let (mut seen, mut reads) = (0, 0u64);
                    let (mut ttft, mut tpot) = ([0.0f32; 4], [0.0f32; 4]);
                    while seen < LAST {
                        let models = predictor.snapshot().expect("published before the readers start");
                        models.ttft.predict_batch(&[1.0; 12], &mut ttft);
                        models.tpot.as_ref().expect("tpot").predict_batch(&[1.0; 8], &mut tpot);
                        let g = models.generation as f32;
                        assert!(ttft.iter().chain(&tpot).all(|&p| p == g), "torn: {ttft:?} {tpot:?} in {g}");
                        assert!(models.generation >= seen, "generation went back from {seen}");
                        let gen = predictor.predict_batch(Target::Ttft, &[1.0; 3], &mut ttft[..1]).unwrap();
                        assert_eq!(ttft[0], gen as f32, "one-target prediction from its own generation");
                        seen = models.generation;
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for g in 2..=LAST {
            predictor.publish(generation(g));
        }
        for reader in readers {
            assert!(reader.join().expect("reader") > 0);
        }
        assert_eq!(predictor.generation(), LAST);
    }
}
