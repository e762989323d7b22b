//! Predicting a batch whose rows repeat, once per distinct row.
//!
//! The decode-stall axis predicts the request's TTFT on each candidate were it idle: every load feature
//! zeroed, so two candidates' rows differ only in their prefix match, pod type and accelerator class.
//! Across a pool most candidates share all three (no match, one type, one class), and a 100-candidate
//! batch holds a handful of distinct rows. The forest is deterministic per row (the vector and scalar kernels agree bit for bit),
//! so predicting the distinct rows and copying gives exactly the full batch's answer.

use std::collections::HashMap;
use std::hash::Hasher;

use crate::predictor::online::Model;
use crate::scheduling::plugins::endpoint_key::{IntBuildHasher, IntHasher};

/// Reused buffers for [`DistinctRows::predict`]: no allocation per request once warm.
#[derive(Default)]
pub(super) struct DistinctRows {
    /// A row's digest → its index among the distinct rows.
    seen: HashMap<u64, u32, IntBuildHasher>,
    distinct: Vec<f32>,
    /// Per input row, the index of its distinct row.
    which: Vec<u32>,
    predictions: Vec<f32>,
}

impl DistinctRows {
    /// Predicts every row of `rows` (`columns` values each) into `out` with `model`, walking the forest
    /// once per distinct row.
    pub(super) fn predict(&mut self, model: &Model, rows: &[f32], columns: usize, out: &mut [f32]) {
        let Self { seen, distinct, which, predictions } = self;
        seen.clear();
        distinct.clear();
        which.clear();
        if columns == 0 {
            model.predict_batch(rows, out);
            return;
        }
        for row in rows.chunks_exact(columns) {
            // Neighbours are usually alike: the previous row's index without a digest or a lookup.
            if let Some(&previous) = which.last() {
                if same(distinct, previous, columns, row) {
                    which.push(previous);
                    continue;
                }
            }
            let digest = digest(row);
            let known = seen.get(&digest).copied().filter(|&i| same(distinct, i, columns, row));
            let index = match known {
                Some(index) => index,
                None => {
                    let index = (distinct.len() / columns) as u32;
                    distinct.extend_from_slice(row);
                    // A digest collision between different rows keeps the first in the map; the second
                    // is still predicted, only not shared.
                    seen.entry(digest).or_insert(index);
                    index
                }
            };
            which.push(index);
        }
        predictions.clear();
        predictions.resize(distinct.len() / columns, 0.0);
        model.predict_batch(distinct, predictions);
        for (out, &index) in out.iter_mut().zip(which.iter()) {
            *out = predictions[index as usize];
        }
    }
}

/// The row's values as bits through the plugins' folded-multiply hasher: equal rows (bit for bit) have
/// equal digests.
fn digest(row: &[f32]) -> u64 {
    let mut hasher = IntHasher::default();
    for x in row {
        hasher.write_u64(u64::from(x.to_bits()));
    }
    hasher.finish()
}

/// Whether distinct row `index` is `row`, bit for bit (NaN included).
fn same(distinct: &[f32], index: u32, columns: usize, row: &[f32]) -> bool {
    let start = index as usize * columns;
    distinct[start..start + columns].iter().zip(row).all(|(a, b)| a.to_bits() == b.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predictor::online::Model;
    use crate::predictor::train::Objective;
    use crate::predictor::{Forest, Node};

    /// A one-tree forest: feature 0 below 1.0 → 10, else feature 1 below 5.0 → 20, else 30.
    fn model() -> Model {
        let tree = vec![
            Node::Split { feature: 0, threshold: 1.0, default_left: true, left: 1, right: 2 },
            Node::Leaf(10.0),
            Node::Split { feature: 1, threshold: 5.0, default_left: true, left: 3, right: 4 },
            Node::Leaf(20.0),
            Node::Leaf(30.0),
        ];
        let forest = Forest::from_trees(2, 0.0, &[tree]).expect("a valid tree");
        Model { forest, objective: Objective::SquaredError, score: None }
    }

    #[test]
    fn repeated_rows_get_the_full_batchs_predictions() {
        let model = model();
        // 40 rows from 4 distinct ones in runs of 3 (neighbours alike, and not), NaN (a missing value)
        // among them.
        let shapes = [[0.0, 0.0], [2.0, 1.0], [2.0, 9.0], [f32::NAN, 9.0]];
        let rows: Vec<f32> = (0..40).flat_map(|i| shapes[(i / 3 * 7) % 4]).collect();
        let mut full = vec![0.0; 40];
        model.predict_batch(&rows, &mut full);
        let mut distinct = DistinctRows::default();
        let mut out = vec![0.0; 40];
        distinct.predict(&model, &rows, 2, &mut out);
        assert_eq!(out, full);
        assert_eq!(distinct.predictions.len(), 4, "one walk per distinct row");
        // Reused: a second batch of other rows is not mixed with the first.
        let rows = [2.0, 9.0, 0.5, 9.0];
        let mut out = vec![0.0; 2];
        distinct.predict(&model, &rows, 2, &mut out);
        assert_eq!(out, [30.0, 10.0]);
    }

    #[test]
    fn rows_that_differ_anywhere_are_predicted_apart() {
        let model = model();
        // −0 and +0 differ in bits: predicted apart (and alike, which is still the full batch's answer).
        let rows = [2.0, 4.0, 2.0, 6.0, -0.0, 0.0, 0.0, 0.0];
        let mut out = vec![0.0; 4];
        let mut distinct = DistinctRows::default();
        distinct.predict(&model, &rows, 2, &mut out);
        assert_eq!(out, [20.0, 30.0, 10.0, 10.0]);
        assert_eq!(distinct.predictions.len(), 4);
    }
}
