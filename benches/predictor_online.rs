//! The latency predictor as epp runs it: one request's predictions (100 candidates × TTFT and TPOT) on the
//! online predictor's handle, idle and while its background thread retrains (issue 8 part 2: the request
//! path must not notice a retrain). The models' own speed (prediction, training) is benchmarked in
//! crates/predictor (`cargo bench -p epp-predictor --bench predictor`).
//!
//! `cargo bench -p epp --bench predictor_online` (under `cargo test` the window shrinks to 1,000 samples).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng};

use epp::metrics::MetricsRegistry;
use epp::predictor::features::Observation;
use epp::predictor::online::{
    Completion, OnlineConfig, OnlinePredictor, Target, TPOT_FEATURES, TTFT_FEATURES,
};

/// Reproducible inputs from epp's own `rand` (the models' bench in crates/predictor, which has no `rand`,
/// keeps its SplitMix64).
struct Rng(SmallRng);

impl Rng {
    fn unit(&mut self) -> f32 {
        self.0.random()
    }
}

/// A completed request on a synthetic pool (queueing plus uncached prefill for TTFT, batch and KV for
/// TPOT), as the online predictor's intake receives it.
fn completion(rng: &mut Rng) -> Completion {
    let observation = Observation {
        kv_cache_percentage: rng.unit(),
        input_tokens: 16 + (rng.unit() * 4000.0) as u32,
        waiting: (rng.unit() * rng.unit() * 12.0) as u32,
        running: (rng.unit() * 64.0) as u32,
        prefix_cache_score: (rng.unit() * 4.0).floor() / 4.0,
        prefill_tokens_in_flight: (rng.unit() * 20_000.0) as u64,
        accelerator_class: u16::from(rng.unit() < 0.5),
        tokens_generated: 1,
        ..Observation::default()
    };
    let o = &observation;
    let uncached = (1.0 - o.prefix_cache_score) * o.input_tokens as f32;
    let per_token = if o.accelerator_class == 1 { 0.12 } else { 0.03 };
    let ttft = 15.0 + uncached * per_token * (1.0 + o.kv_cache_percentage) + 40.0 * o.waiting as f32;
    let tpot = 8.0 + 0.3 * o.running as f32 + 10.0 * o.kv_cache_percentage;
    Completion {
        observation,
        ttft_ms: Some(ttft * (0.9 + 0.2 * rng.unit())),
        tpot_ms: Some(tpot * (0.9 + 0.2 * rng.unit())),
    }
}

/// 100 candidates × (TTFT, TPOT) through `Predictor::predict_batch` on a started service, first idle, then
/// while another thread keeps asking the service's training thread to retrain (200 trees on the whole
/// window each time), so every measurement overlaps a retrain and its publication.
fn online(c: &mut Criterion) {
    let full = std::env::args().any(|arg| arg == "--bench");
    let samples = if full { 50_000 } else { 1_000 };
    let config = OnlineConfig {
        retrain_interval: Duration::from_secs(3600),
        streaming: true,
        intake_capacity: samples + 1,
        ..OnlineConfig::default()
    };
    let mut service = OnlinePredictor::start(&config, &MetricsRegistry::new("bench")).expect("start");
    let mut rng = Rng(SmallRng::seed_from_u64(11));
    let intake = service.intake();
    for _ in 0..samples {
        assert!(intake.record(completion(&mut rng)), "intake sized for every sample");
    }
    assert!(service.retrain_now(), "first models");
    let predictor = service.predictor();
    let (mut ttft_rows, mut tpot_rows) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        let o = completion(&mut rng).observation;
        let (mut ttft, mut tpot) = ([0.0; TTFT_FEATURES], [0.0; TPOT_FEATURES]);
        o.ttft_row(&mut ttft);
        o.tpot_row(&mut tpot);
        ttft_rows.extend_from_slice(&ttft);
        tpot_rows.extend_from_slice(&tpot);
    }
    let (mut ttft_out, mut tpot_out) = (vec![0.0; 100], vec![0.0; 100]);
    let mut request = || {
        predictor.predict_batch(Target::Ttft, black_box(&ttft_rows), &mut ttft_out).expect("ttft model");
        predictor.predict_batch(Target::Tpot, black_box(&tpot_rows), &mut tpot_out).expect("tpot model");
    };
    let mut group = c.benchmark_group("online");
    group.throughput(Throughput::Elements(200));
    group.bench_function("request_100_candidates_idle", |b| b.iter(&mut request));

    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let retrainer = std::thread::spawn(move || {
        let mut retrains = 0u64;
        while !flag.load(Ordering::Relaxed) {
            retrains += u64::from(service.retrain_now());
        }
        (service, retrains)
    });
    group.bench_function("request_100_candidates_during_retrain", |b| b.iter(&mut request));
    group.finish();
    stop.store(true, Ordering::Relaxed);
    let (service, retrains) = retrainer.join().expect("retrainer");
    println!("online: {retrains} retrains of {samples} samples published during the measurement");
    service.shutdown().expect("shutdown");
}

criterion_group!(benches, online);
criterion_main!(benches);
