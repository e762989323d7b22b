//! The service's behaviour, driven by explicit retrains (never the clock): retraining publishes better
//! models, a quantile model covers about α, streaming mode off trains TTFT on end-to-end latency only,
//! the intake drops and counts when full, models survive a save and load bit for bit, bad model files are
//! errors that name the file, and the metrics say what happened.

use crate::metrics::MetricsRegistry;
use crate::predictor::features::{Observation, PodType};

use super::*;

/// SplitMix64 in [0, 1): reproducible synthetic traffic.
pub(super) struct Rng(pub u64);

impl Rng {
    pub(super) fn unit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A completed request on a synthetic pool: TTFT grows with the queue and the uncached input, slower on
/// accelerator class 1; TPOT grows with the running batch and KV use. Noise is ±10%.
pub(super) fn completion(rng: &mut Rng) -> Completion {
    let observation = Observation {
        kv_cache_percentage: rng.unit(),
        input_tokens: 16 + (rng.unit() * 4000.0) as u32,
        waiting: (rng.unit() * rng.unit() * 12.0) as u32,
        running: (rng.unit() * 64.0) as u32,
        prefix_cache_score: (rng.unit() * 4.0).floor() / 4.0,
        accelerator_class: u16::from(rng.unit() < 0.5),
        pod_type: PodType::Both,
        tokens_generated: 1,
        ..Observation::default()
    };
    let o = &observation;
    let per_token = if o.accelerator_class == 1 { 0.12 } else { 0.03 };
    let uncached = (1.0 - o.prefix_cache_score) * o.input_tokens as f32;
    let ttft = 15.0 + uncached * per_token * (1.0 + o.kv_cache_percentage) + 40.0 * o.waiting as f32;
    let tpot = 8.0 + 0.3 * o.running as f32 + 10.0 * o.kv_cache_percentage;
    let noise = |rng: &mut Rng| 0.9 + 0.2 * rng.unit();
    Completion { observation, ttft_ms: Some(ttft * noise(rng)), tpot_ms: Some(tpot * noise(rng)) }
}

fn config() -> OnlineConfig {
    let params =
        Params { objective: Objective::SquaredError, n_trees: 60, learning_rate: 0.15, ..Params::default() };
    // The first model waits for min_samples too here, so the test can tell "too few" from "enough".
    OnlineConfig { streaming: true, params, min_samples_fresh: 100, ..OnlineConfig::default() }
}

fn feed(intake: &Intake, rng: &mut Rng, n: usize) {
    for _ in 0..n {
        assert!(intake.record(completion(rng)), "the intake has room");
    }
}

/// TTFT MAPE of the current models on fresh traffic (not the window's held-out split).
fn fresh_mape(predictor: &Predictor, seed: u64) -> f64 {
    let mut rng = Rng(seed);
    let (mut rows, mut observed) = (Vec::new(), Vec::new());
    for _ in 0..2000 {
        let c = completion(&mut rng);
        let mut row = [0.0; TTFT_FEATURES];
        c.observation.ttft_row(&mut row);
        rows.extend_from_slice(&row);
        observed.push(c.ttft_ms.unwrap_or(f32::NAN));
    }
    let mut predicted = vec![0.0; observed.len()];
    predictor.predict_batch(Target::Ttft, &rows, &mut predicted).expect("a TTFT model");
    trainer::score_predictions(&predicted, &observed).mape
}

#[test]
fn the_first_model_needs_only_the_fresh_minimum() {
    let config = OnlineConfig { min_samples_fresh: 10, ..config() };
    let mut service = OnlinePredictor::new(&config, &MetricsRegistry::new("pool")).unwrap();
    let (predictor, intake, mut rng) = (service.predictor(), service.intake(), Rng(3));
    feed(&intake, &mut rng, 5);
    assert!(!service.retrain_now(), "5 samples: fewer than the fresh minimum");
    // About a tenth of the samples are held out: 25 leave more than 10 to train on, far fewer than 100.
    feed(&intake, &mut rng, 20);
    assert!(service.retrain_now(), "no model yet and more than 10 samples: a first model");
    assert_eq!(predictor.generation(), 1);
    feed(&intake, &mut rng, 10);
    assert!(!service.retrain_now(), "with a model, a retrain waits for min_samples (100) again");
}

#[test]
fn nothing_is_predicted_before_min_samples_then_retraining_publishes_better_models() {
    let registry = MetricsRegistry::new("pool");
    let mut service = OnlinePredictor::new(&config(), &registry).unwrap();
    let (predictor, intake, mut rng) = (service.predictor(), service.intake(), Rng(1));
    let mut out = [0.0; 1];
    let row = [0.0; TTFT_FEATURES];
    assert_eq!(predictor.predict_batch(Target::Ttft, &row, &mut out), Err(NoModel { target: Target::Ttft }));
    feed(&intake, &mut rng, 50);
    assert!(!service.retrain_now(), "50 samples are fewer than min_samples");
    assert_eq!(predictor.generation(), 0);

    feed(&intake, &mut rng, 150);
    assert!(service.retrain_now());
    let first = predictor.snapshot().unwrap();
    assert_eq!(first.generation, 1);
    assert!(first.tpot.is_some(), "streaming mode trains TPOT too");
    let early = fresh_mape(&predictor, 99);

    feed(&intake, &mut rng, 8000);
    assert!(service.retrain_now());
    assert_eq!(predictor.generation(), 2);
    let late = fresh_mape(&predictor, 99);
    assert!(late < early * 0.8, "MAPE on fresh traffic: {early:.3} with 200 samples, {late:.3} with 8,200");
    let score = predictor.snapshot().unwrap().ttft.score.unwrap();
    assert!(score.rows > 500 && score.mape < 0.1, "held-out score {score:?}");
    assert!(late < 0.1, "fresh-traffic MAPE {late}");

    let text = registry.encode();
    for line in [
        "epp_predictor_model_generation 2",
        "epp_predictor_samples_dropped_total 0",
        "epp_predictor_training_duration_seconds_count{model=\"ttft\"} 2",
        "epp_predictor_training_duration_seconds_count{model=\"tpot\"} 2",
        "epp_predictor_test_mape{model=\"ttft\"}",
        "epp_predictor_test_coverage{model=\"tpot\"}",
        "epp_predictor_buckets_filled{model=\"ttft\"}",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    let samples = format!("epp_predictor_samples{{model=\"ttft\"}} {}", score_window(&service, Target::Ttft));
    assert!(text.contains(&samples), "{samples:?} missing");
    assert!(!text.contains("epp_predictor_last_retrain_timestamp_seconds 0.0"));
}

fn score_window(service: &OnlinePredictor, target: Target) -> usize {
    match &service.state {
        State::Manual(worker) => worker.trainer.len(target),
        _ => 0,
    }
}

#[test]
fn a_quantile_model_covers_about_alpha_of_held_out_rows() {
    let registry = MetricsRegistry::new("pool");
    let mut config = config();
    config.params.objective = Objective::Quantile { alpha: 0.9 };
    config.test_cap = 5000;
    let mut service = OnlinePredictor::new(&config, &registry).unwrap();
    feed(&service.intake(), &mut Rng(2), 12_000);
    assert!(service.retrain_now());
    let models = service.predictor().snapshot().unwrap();
    for target in Target::ALL {
        let score = models.get(target).unwrap().score.unwrap();
        assert!(score.rows > 800, "{target}: {score:?}");
        assert!((score.coverage - 0.9).abs() < 0.04, "{target}: coverage {score:?}, α = 0.9");
    }
}

#[test]
fn streaming_off_trains_ttft_on_end_to_end_latency_and_no_tpot() {
    let registry = MetricsRegistry::new("pool");
    let config = OnlineConfig { streaming: false, ..config() };
    let mut service = OnlinePredictor::new(&config, &registry).unwrap();
    feed(&service.intake(), &mut Rng(3), 300);
    assert!(service.retrain_now());
    let predictor = service.predictor();
    assert!(predictor.snapshot().unwrap().tpot.is_none());
    let mut out = [0.0; 1];
    let row = [0.0; TPOT_FEATURES];
    assert_eq!(predictor.predict_batch(Target::Tpot, &row, &mut out), Err(NoModel { target: Target::Tpot }));
    assert!(registry.encode().contains("epp_predictor_samples{model=\"tpot\"} 0"));
}

#[test]
fn a_full_intake_drops_and_counts_without_blocking() {
    let registry = MetricsRegistry::new("pool");
    let config = OnlineConfig { intake_capacity: 4, ..config() };
    let mut service = OnlinePredictor::new(&config, &registry).unwrap();
    let (intake, mut rng) = (service.intake(), Rng(4));
    let accepted = (0..10).filter(|_| intake.record(completion(&mut rng))).count();
    assert_eq!((accepted, intake.dropped()), (4, 6));
    assert!(registry.encode().contains("epp_predictor_samples_dropped_total 6"));
    service.retrain_now();
    assert!(intake.record(completion(&mut rng)), "draining made room");
    assert!(matches!(
        OnlinePredictor::new(&OnlineConfig { intake_capacity: 0, ..config }, &registry),
        Err(OnlineError::ZeroCapacity)
    ));
}

#[test]
fn models_survive_a_restart_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let config = OnlineConfig { model_dir: Some(dir.path().join("models")), ..config() };
    let mut service = OnlinePredictor::new(&config, &MetricsRegistry::new("pool")).unwrap();
    feed(&service.intake(), &mut Rng(5), 1000);
    assert!(service.retrain_now());
    let before = service.predictor().snapshot().unwrap();
    service.shutdown().unwrap();
    assert!(dir.path().join("models/ttft.json").is_file() && dir.path().join("models/tpot.json").is_file());

    let registry = MetricsRegistry::new("pool");
    let restarted = OnlinePredictor::new(&config, &registry).unwrap();
    let after = restarted.predictor().snapshot().expect("loaded at start");
    assert_eq!(after.generation, 1);
    assert!(registry.encode().contains("epp_predictor_model_generation 1"));
    let mut rng = Rng(6);
    for target in Target::ALL {
        let width = columns(target).len();
        let rows: Vec<f32> = (0..500 * width).map(|_| rng.unit() * 100.0).collect();
        let (mut x, mut y) = (vec![0.0; 500], vec![0.0; 500]);
        before.get(target).unwrap().predict_batch(&rows, &mut x);
        after.get(target).unwrap().predict_batch(&rows, &mut y);
        assert!(x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "{target} predictions differ");
        assert_eq!(after.get(target).unwrap().objective, Objective::SquaredError);
    }
}

#[test]
fn seeds_start_the_service_and_bad_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let mut service = OnlinePredictor::new(
        &OnlineConfig { model_dir: Some(models.clone()), ..config() },
        &MetricsRegistry::new("p"),
    )
    .unwrap();
    feed(&service.intake(), &mut Rng(7), 400);
    service.retrain_now();
    service.shutdown().unwrap();

    let seeded = OnlineConfig {
        seed_ttft: Some(models.join("ttft.json")),
        seed_tpot: Some(models.join("tpot.json")),
        ..config()
    };
    let service = OnlinePredictor::new(&seeded, &MetricsRegistry::new("p")).unwrap();
    assert!(service.predictor().snapshot().is_some_and(|m| m.tpot.is_some()));

    let corrupt = dir.path().join("corrupt.json");
    std::fs::write(&corrupt, b"{\"learner\": ").unwrap();
    let wrong_width = OnlineConfig { seed_ttft: Some(models.join("tpot.json")), ..config() };
    let cases = [
        (OnlineConfig { seed_ttft: Some(corrupt.clone()), ..config() }, "corrupt.json: model JSON"),
        (OnlineConfig { seed_ttft: Some(dir.path().join("absent.json")), ..config() }, "absent.json: "),
        (wrong_width, &*format!("tpot.json: the model takes 10 features, a ttft row has {TTFT_FEATURES}")),
    ];
    for (config, expected) in cases {
        let err = OnlinePredictor::new(&config, &MetricsRegistry::new("p")).err().expect("refused");
        assert!(err.to_string().contains(expected), "{err} should contain {expected:?}");
    }
    // A saved model of another width (an earlier epp's columns) is set aside: a first start.
    std::fs::copy(models.join("tpot.json"), models.join("ttft.json")).unwrap();
    let upgraded = OnlinePredictor::new(
        &OnlineConfig { model_dir: Some(models.clone()), ..config() },
        &MetricsRegistry::new("p"),
    )
    .unwrap();
    assert!(upgraded.predictor().snapshot().is_none(), "no model until the first retrain");
    std::fs::copy(&corrupt, models.join("ttft.json")).unwrap();
    let err = OnlinePredictor::new(
        &OnlineConfig { model_dir: Some(models), ..config() },
        &MetricsRegistry::new("p"),
    )
    .err()
    .expect("a corrupt saved model is refused");
    assert!(
        matches!(&err, OnlineError::Persist(PersistError::Model { path, .. }) if path.ends_with("ttft.json")),
        "{err}"
    );
}

#[test]
fn the_thread_retrains_on_request_and_saves_when_shut_down() {
    let dir = tempfile::tempdir().unwrap();
    let config = OnlineConfig {
        retrain_interval: Duration::from_secs(3600),
        model_dir: Some(dir.path().to_path_buf()),
        ..config()
    };
    let mut service = OnlinePredictor::start(&config, &MetricsRegistry::new("pool")).unwrap();
    let intake = service.intake();
    feed(&intake, &mut Rng(8), 500);
    assert!(service.retrain_now(), "the thread retrains what was queued before the request");
    assert_eq!(service.predictor().generation(), 1);
    assert!(!dir.path().join("ttft.json").exists(), "the save interval has not passed");
    service.shutdown().unwrap();
    assert!(dir.path().join("ttft.json").is_file(), "saved at shutdown");
    assert!(!intake.record(completion(&mut Rng(9))), "a stopped service takes nothing");
    assert_eq!(intake.dropped(), 1);
}

#[test]
fn the_thread_retrains_and_saves_on_its_own_interval() {
    let dir = tempfile::tempdir().unwrap();
    let config = OnlineConfig {
        retrain_interval: Duration::ZERO,
        save_interval: Duration::ZERO,
        model_dir: Some(dir.path().to_path_buf()),
        ..config()
    };
    let service = OnlinePredictor::start(&config, &MetricsRegistry::new("pool")).unwrap();
    feed(&service.intake(), &mut Rng(10), 300);
    // A liveness bound, not a speed assertion: the interval (clamped to 10 ms) passes many times over.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(service.predictor().generation() >= 1 && dir.path().join("ttft.json").is_file()) {
        assert!(Instant::now() < deadline, "no retrain and save on the interval");
        std::thread::sleep(Duration::from_millis(20));
    }
    let generation = service.predictor().generation();
    service.shutdown().unwrap();
    assert!(generation >= 1);
}
