//! The built-ins working together as the GIE default profile: prefix affinity steers a repeated prompt
//! back to the endpoint that served it, and load still decides between endpoints without a match.

use std::sync::Arc;

use crate::datastore::EndpointTelemetry;
use crate::scheduling::plugins::testing::*;
use crate::scheduling::{
    BuiltPlugin, Candidate, NoopObserver, Pipeline, Profile, Registry, SchedulingResult, WeightedScorer,
};

fn built(r: &Registry, t: &str) -> BuiltPlugin {
    r.get(t).unwrap()(t, None, &ctx()).unwrap()
}

fn gie_default() -> Pipeline {
    let r = Registry::with_builtins();
    let (queue, kv, prefix) = (
        built(&r, "queue-scorer"),
        built(&r, "kv-cache-utilization-scorer"),
        built(&r, "prefix-cache-scorer"),
    );
    let (producer, picker, handler) = (
        built(&r, "approx-prefix-cache-producer"),
        built(&r, "max-score-picker"),
        built(&r, "single-profile-handler"),
    );
    let ws = |p: &BuiltPlugin, weight| WeightedScorer {
        id: p.id.clone(),
        scorer: p.scorer.clone().unwrap(),
        weight,
    };
    let profile = Profile {
        name: "default".into(),
        filters: vec![],
        scorers: vec![ws(&queue, 2.0), ws(&kv, 2.0), ws(&prefix, 3.0)],
        picker: (picker.id.clone(), picker.picker.clone().unwrap()),
    };
    Pipeline::new(
        vec![profile],
        (handler.id.clone(), handler.profile_handler.clone().unwrap()),
        vec![(producer.id.clone(), producer.producer.clone().unwrap())],
        vec![],
        vec![(producer.id.clone(), producer.pre_request.clone().unwrap())],
        vec![],
        vec![producer.endpoint_listener.clone().unwrap()],
        vec![queue, kv, prefix, producer, picker, handler],
    )
}

fn route(p: &Pipeline, f: &RequestFixture, candidates: &[Candidate], seed: u64) -> SchedulingResult {
    use rand::SeedableRng;
    let mut c = candidates.to_vec();
    let req = f.request();
    p.prepare(&req, &mut c, &NoopObserver);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let result = p.schedule(&req, &c, &mut rng, &NoopObserver).unwrap();
    p.pre_request(&req, &result, &dispatch(&result.targets()[0], 1, 1), &NoopObserver);
    result
}

#[test]
fn repeated_prompt_sticks_to_its_endpoint() {
    let p = gie_default();
    let pool: Vec<_> = (1..=4).map(|i| candidate(i, EndpointTelemetry::default())).collect();
    let f = RequestFixture::with_prompt("m", &"system prompt ".repeat(100));
    let first = route(&p, &f, &pool, 1).targets()[0].clone();
    for seed in 2..20 {
        assert!(Arc::ptr_eq(&route(&p, &f, &pool, seed).targets()[0], &first));
    }
}

#[test]
fn without_a_match_the_least_loaded_wins() {
    let p = gie_default();
    let pool = vec![
        candidate(1, EndpointTelemetry { waiting_queue_size: 5, kv_cache_usage: 0.5, ..Default::default() }),
        candidate(2, EndpointTelemetry { waiting_queue_size: 0, kv_cache_usage: 0.1, ..Default::default() }),
    ];
    let f = RequestFixture::with_prompt("m", &"fresh ".repeat(50));
    assert!(Arc::ptr_eq(&route(&p, &f, &pool, 3).targets()[0], &pool[1].endpoint));
}
