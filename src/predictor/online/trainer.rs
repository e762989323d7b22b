//! The training half of the service, pure and synchronous: completed requests become llm-d training rows in
//! the stratified windows, and a retrain fits one target's model on its window and scores it on the
//! held-out split. No clock, no thread, no I/O: the service decides when to call it, and tests call it
//! directly, so the same samples and seed always give the same model.
//!
//! Training rows follow llm-d (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/
//! predictedlatency, and llm-d/llm-d-latency-predictor:training/training_server.py): the features are
//! the ones captured at dispatch; a TTFT row's target is the observed TTFT, which with streaming mode off
//! is the end-to-end latency, and then no TPOT row is written; a TPOT row has the prefix score zeroed
//! (its bucket is the prefix-0 one) and `num_tokens_generated` zeroed (`LATENCY_TPOT_ZERO_TOKEN_COUNT`).

use crate::predictor::features::{Observation, TPOT_COLUMNS, TTFT_COLUMNS};
use crate::predictor::train::{train, Params, TrainError};
use crate::predictor::window::{bucket, Sample, StratifiedWindow};

use super::models::{Model, Score, Target};
use super::OnlineConfig;

/// Columns of a TTFT row.
pub const TTFT_FEATURES: usize = TTFT_COLUMNS.len();
/// Columns of a TPOT row.
pub const TPOT_FEATURES: usize = TPOT_COLUMNS.len();

/// One completed request as the request path reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    /// The serving endpoint's state when the request was dispatched to it (in prefill/decode
    /// disaggregation, the prefill endpoint's, as in llm-d).
    pub observation: Observation,
    /// Observed time to first token in ms; with streaming mode off, the end-to-end latency. `None` when
    /// the request's TTFT row was already sent at its first chunk (see the producer's feedback).
    pub ttft_ms: Option<f32>,
    /// Observed average time per output token after the first, in ms; `None` when the response was not
    /// streamed or produced one chunk only. Ignored with streaming mode off.
    pub tpot_ms: Option<f32>,
}

/// The sample windows and the training parameters.
#[derive(Debug)]
pub(super) struct Trainer {
    params: Params,
    min_samples: usize,
    min_samples_fresh: usize,
    streaming: bool,
    ttft: StratifiedWindow<TTFT_FEATURES>,
    tpot: StratifiedWindow<TPOT_FEATURES>,
    /// Reused between retrains: a 200,000-row window is 11 MB of rows.
    rows: Vec<f32>,
    targets: Vec<f32>,
}

impl Trainer {
    pub(super) fn new(config: &OnlineConfig) -> Self {
        Trainer {
            params: config.params.clone(),
            min_samples: config.min_samples,
            min_samples_fresh: config.min_samples_fresh.min(config.min_samples),
            streaming: config.streaming,
            ttft: StratifiedWindow::new(config.per_bucket, config.test_cap, config.test_percent),
            tpot: StratifiedWindow::new(config.per_bucket, config.test_cap, config.test_percent),
            rows: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Adds a completed request's training rows. A latency that is negative or not a number is skipped
    /// (it would fail the whole retrain).
    pub(super) fn ingest(&mut self, completion: &Completion) {
        let valid = |ms: f32| ms.is_finite() && ms >= 0.0;
        let o = &completion.observation;
        if let Some(ttft_ms) = completion.ttft_ms.filter(|&ms| valid(ms)) {
            let mut row = [0.0; TTFT_FEATURES];
            o.ttft_row(&mut row);
            let stratum = bucket(o.waiting, o.kv_cache_percentage, o.prefix_cache_score);
            self.ttft.push(stratum, Sample { row, target: ttft_ms });
        }
        if let Some(tpot_ms) = completion.tpot_ms.filter(|&ms| self.streaming && valid(ms)) {
            let o = Observation { prefix_cache_score: 0.0, tokens_generated: 0, ..*o };
            let mut row = [0.0; TPOT_FEATURES];
            o.tpot_row(&mut row);
            let stratum = bucket(o.waiting, o.kv_cache_percentage, 0.0);
            self.tpot.push(stratum, Sample { row, target: tpot_ms });
        }
    }

    /// Training samples held for `target`.
    pub(super) fn len(&self, target: Target) -> usize {
        match target {
            Target::Ttft => self.ttft.len(),
            Target::Tpot => self.tpot.len(),
        }
    }

    /// Buckets holding at least one training sample.
    pub(super) fn buckets_filled(&self, target: Target) -> usize {
        match target {
            Target::Ttft => self.ttft.bucket_counts().filter(|&n| n > 0).count(),
            Target::Tpot => self.tpot.bucket_counts().filter(|&n| n > 0).count(),
        }
    }

    /// Held-out samples for `target`.
    pub(super) fn test_len(&self, target: Target) -> usize {
        match target {
            Target::Ttft => self.ttft.test().count(),
            Target::Tpot => self.tpot.test().count(),
        }
    }

    /// Whether `target`'s window holds enough samples to train on: `min_samples`, or `min_samples_fresh`
    /// while the target has no model (`has_model` false); at least one.
    pub(super) fn ready(&self, target: Target, has_model: bool) -> bool {
        let needed = if has_model { self.min_samples } else { self.min_samples_fresh };
        self.len(target) >= needed.max(1)
    }

    /// Fits `target`'s model on its window and scores it on the held-out split.
    pub(super) fn retrain(&mut self, target: Target) -> Result<Model, TrainError> {
        match target {
            Target::Ttft => fit(&self.params, &self.ttft, &mut self.rows, &mut self.targets),
            Target::Tpot => fit(&self.params, &self.tpot, &mut self.rows, &mut self.targets),
        }
    }
}

fn fit<const N: usize>(
    params: &Params,
    window: &StratifiedWindow<N>,
    rows: &mut Vec<f32>,
    targets: &mut Vec<f32>,
) -> Result<Model, TrainError> {
    window.training_set(rows, targets);
    let forest = train(params, rows, N, targets)?;
    let mut model = Model { forest, objective: params.objective, score: None };
    model.score = score(&model, window, rows, targets);
    Ok(model)
}

/// The model's MAPE and coverage on the window's held-out samples; `None` when there are none.
fn score<const N: usize>(
    model: &Model,
    window: &StratifiedWindow<N>,
    rows: &mut Vec<f32>,
    targets: &mut Vec<f32>,
) -> Option<Score> {
    rows.clear();
    targets.clear();
    for sample in window.test() {
        rows.extend_from_slice(&sample.row);
        targets.push(sample.target);
    }
    if targets.is_empty() {
        return None;
    }
    let mut predicted = vec![0.0; targets.len()];
    model.predict_batch(rows, &mut predicted);
    Some(score_predictions(&predicted, targets))
}

/// MAPE over the rows with a positive target (a zero latency has no percentage error), coverage over all.
pub(super) fn score_predictions(predicted: &[f32], observed: &[f32]) -> Score {
    let (mut error, mut positive, mut covered) = (0.0f64, 0usize, 0usize);
    for (&p, &y) in predicted.iter().zip(observed) {
        if y > 0.0 {
            error += f64::from((p - y).abs() / y);
            positive += 1;
        }
        covered += usize::from(y <= p);
    }
    Score {
        rows: observed.len(),
        mape: if positive == 0 { 0.0 } else { error / positive as f64 },
        coverage: covered as f64 / observed.len().max(1) as f64,
    }
}
