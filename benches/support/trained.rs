//! A predictor hub with a trained 200-tree model, shared by the benches that run the predicted-latency
//! pipelines (`request_path`, `scheduling`): the same synthetic completions in both, so their figures
//! predict with the same forest shape.

use epp::predictor::features::Observation;
use epp::predictor::online::{Completion as TrainingRow, PredictorHub};

/// Trains the hub's predictor on synthetic completions, so the bench predicts with a 200-tree model.
/// Call it after the config's producer attached to the hub.
pub(crate) fn train(hub: &PredictorHub, streaming: bool) {
    let Ok((_, intake)) = hub.attach(streaming) else { panic!("the config's producer attached first") };
    for i in 0..2_000u32 {
        let observation = Observation {
            kv_cache_percentage: (i % 10) as f32 / 10.0,
            input_tokens: 500 + (i * 37) % 4_000,
            waiting: i % 7,
            running: i % 5,
            prefix_cache_score: (i % 4) as f32 / 4.0,
            prefill_tokens_in_flight: u64::from(i % 11) * 300,
            tokens_generated: 1,
            ..Observation::default()
        };
        let ttft_ms = 50.0 + observation.waiting as f32 * 40.0 + observation.input_tokens as f32 * 0.05;
        intake.record(TrainingRow {
            observation,
            ttft_ms: Some(ttft_ms),
            tpot_ms: Some(10.0 + observation.running as f32),
        });
    }
    assert!(hub.retrain_now(), "a model is published");
}
