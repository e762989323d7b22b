//! The trainer's behaviour on synthetic latency-like data: quantile coverage, beating the mean,
//! determinism, and refusing bad input.

use super::*;

/// `n` rows of 4 features and a TTFT-like target: grows with queue and uncached input, noisy and skewed.
fn synthetic(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = SplitMix64(seed);
    let mut unit = move || (rng.next() >> 11) as f32 / (1u64 << 53) as f32;
    let (mut rows, mut targets) = (Vec::with_capacity(n * 4), Vec::with_capacity(n));
    for _ in 0..n {
        let (kv, input, waiting, prefix) = (unit(), 100.0 + 4000.0 * unit(), (unit() * 10.0).floor(), unit());
        let noise = -unit().max(1e-6).ln(); // exponential(1): a right-skewed spread
        targets.push(20.0 + 0.02 * input * (1.0 - prefix) + 15.0 * waiting + 30.0 * kv * kv + 10.0 * noise);
        rows.extend([kv, input, waiting, prefix]);
    }
    (rows, targets)
}

fn small(objective: Objective) -> Params {
    Params { objective, n_trees: 100, learning_rate: 0.1, ..Params::default() }
}

#[test]
fn a_quantile_model_covers_about_alpha_of_held_out_rows() {
    let (rows, targets) = synthetic(10000, 1);
    let (test_rows, test_targets) = synthetic(2000, 2);
    for alpha in [0.5, 0.9] {
        let forest = train(&small(Objective::Quantile { alpha }), &rows, 4, &targets).unwrap();
        let mut pred = vec![0.0; test_targets.len()];
        forest.predict_batch(&test_rows, &mut pred);
        let covered =
            pred.iter().zip(&test_targets).filter(|(p, y)| y <= p).count() as f32 / pred.len() as f32;
        assert!((covered - alpha).abs() < 0.03, "alpha {alpha}: covered {covered} of held-out rows");
    }
}

#[test]
fn a_log_target_model_predicts_the_logarithm_and_its_output_is_on_the_target_scale() {
    let (rows, targets) = synthetic(4000, 3);
    let positive: Vec<f32> = targets.iter().map(|y| y.abs() + 1.0).collect();
    let forest = train(&small(Objective::LogSquaredError), &rows, 4, &positive).unwrap();
    let mut margins = vec![0.0; positive.len()];
    forest.predict_batch(&rows, &mut margins);
    let ape: f32 = margins
        .iter()
        .zip(&positive)
        .map(|(&m, &y)| (Objective::LogSquaredError.output(m) - y).abs() / y)
        .sum::<f32>()
        / positive.len() as f32;
    let log_mean = positive.iter().map(|y| y.ln()).sum::<f32>() / positive.len() as f32;
    assert!((forest.base_score() - log_mean).abs() < 1e-3, "base {} vs {log_mean}", forest.base_score());
    assert!(ape < 0.5, "training MAPE {ape}");
}

#[test]
fn a_squared_error_model_beats_the_mean() {
    let (rows, targets) = synthetic(4000, 3);
    let (test_rows, test_targets) = synthetic(2000, 4);
    let forest = train(&small(Objective::SquaredError), &rows, 4, &targets).unwrap();
    let mut pred = vec![0.0; test_targets.len()];
    forest.predict_batch(&test_rows, &mut pred);
    let mean = targets.iter().sum::<f32>() / targets.len() as f32;
    let mse = |p: &dyn Fn(usize) -> f32| {
        test_targets.iter().enumerate().map(|(i, y)| (p(i) - y).powi(2)).sum::<f32>()
    };
    let (model, baseline) = (mse(&|i| pred[i]), mse(&|_| mean));
    assert!(model < 0.2 * baseline, "model {model} vs mean {baseline}");
}

#[test]
fn the_same_seed_gives_the_same_model() {
    let (rows, targets) = synthetic(1000, 5);
    let params = Params { n_trees: 20, ..Params::default() };
    let predict = |params: &Params| {
        let forest = train(params, &rows, 4, &targets).unwrap();
        let mut out = vec![0.0; targets.len()];
        forest.predict_batch(&rows, &mut out);
        out
    };
    assert_eq!(predict(&params), predict(&params));
    assert_ne!(predict(&params), predict(&Params { seed: 7, ..params.clone() }));
}

#[test]
fn bad_input_is_an_error() {
    let p = Params::default();
    assert!(matches!(train(&p, &[], 3, &[]), Err(TrainError::Empty)));
    assert!(matches!(train(&p, &[1.0; 5], 2, &[1.0; 3]), Err(TrainError::Shape { .. })));
    assert!(matches!(train(&p, &[1.0; 2], 1, &[1.0, f32::NAN]), Err(TrainError::Target { index: 1, .. })));
    let bad_alpha = Params { objective: Objective::Quantile { alpha: 1.0 }, ..p.clone() };
    assert!(matches!(train(&bad_alpha, &[1.0], 1, &[1.0]), Err(TrainError::Param { name: "alpha", .. })));
    let too_deep = Params { max_depth: 40, ..p };
    assert!(matches!(train(&too_deep, &[1.0], 1, &[1.0]), Err(TrainError::Param { name: "max_depth", .. })));
}

#[test]
fn constant_targets_and_features_give_a_constant_model() {
    let forest = train(&Params::default(), &[1.0; 30], 3, &[7.0; 10]).unwrap();
    assert_eq!(forest.predict_one(&[5.0, 5.0, 5.0]), 7.0);
}

#[test]
fn quantile_interpolates_like_xgboost() {
    assert_eq!(quantile(&mut [3.0, 1.0, 2.0, 4.0], 0.5), 2.5);
    assert_eq!(quantile(&mut [1.0, 2.0, 3.0], 0.99), 3.0);
    assert_eq!(quantile(&mut [1.0, 2.0, 3.0], 0.01), 1.0);
    assert_eq!(quantile(&mut [], 0.5), 0.0);
}

/// The selection-based quantile picks the same order statistics as sorting does, ties and extremes included.
#[test]
fn quantile_by_selection_equals_quantile_of_the_sorted_values() {
    let sorted_quantile = |values: &[f32], alpha: f64| {
        let mut v = values.to_vec();
        v.sort_unstable_by(f32::total_cmp);
        let nf = v.len() as f64;
        if alpha <= 1.0 / (nf + 1.0) {
            return v[0];
        }
        if alpha >= nf / (nf + 1.0) {
            return v[v.len() - 1];
        }
        let x = alpha * (nf + 1.0);
        let k = x.floor() as usize - 1;
        let (v0, v1) = (f64::from(v[k]), f64::from(v[(k + 1).min(v.len() - 1)]));
        (v0 + (x - 1.0 - k as f64) * (v1 - v0)) as f32
    };
    let mut rng = SplitMix64(9);
    for n in [1, 2, 3, 7, 64, 1000] {
        // Few distinct values, so ties are common.
        let values: Vec<f32> = (0..n).map(|_| (rng.next() % 9) as f32 - 4.0).collect();
        for alpha in [0.01f32, 0.1, 0.5, 0.9, 0.99] {
            let expected = sorted_quantile(&values, f64::from(alpha));
            assert_eq!(quantile(&mut values.clone(), alpha), expected, "n {n}, alpha {alpha}");
        }
    }
}
