use super::*;

fn quiet(profile: AcceleratorProfile) -> EngineConfig {
    EngineConfig { noise: 0.0, ..EngineConfig::for_profile(profile) }
}

fn req(id: u64, prompt: Vec<u32>, max_output_tokens: u32) -> SimRequest {
    SimRequest { id, prompt, max_output_tokens, lora: None }
}

/// Distinct tokens per `salt`, so unrelated requests never share cache blocks.
fn prompt(salt: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| salt.wrapping_mul(1_000_003).wrapping_add(i)).collect()
}

/// Steps until idle; returns each event with the simulated time it happened at.
fn drain(engine: &mut Engine) -> Vec<(f64, RequestEvent)> {
    let mut now = 0.0;
    let mut out = Vec::new();
    let mut guard = 0;
    while engine.has_work() {
        let step = engine.step();
        now += step.duration;
        out.extend(step.events.into_iter().map(|e| (now, e)));
        guard += 1;
        assert!(guard < 1_000_000, "engine never drained");
    }
    out
}

fn first_token_time(events: &[(f64, RequestEvent)], id: u64) -> (f64, u32) {
    events
        .iter()
        .find_map(|(t, e)| match e {
            RequestEvent::FirstToken { id: i, cached_tokens } if *i == id => Some((*t, *cached_tokens)),
            _ => None,
        })
        .unwrap()
}

fn finished(events: &[(f64, RequestEvent)]) -> Vec<(u64, u32, FinishReason)> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            RequestEvent::Finished { id, output_tokens, reason } => Some((*id, *output_tokens, *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn batch_is_capped_by_max_num_seqs() {
    let mut engine = Engine::new(EngineConfig { max_num_seqs: 4, ..quiet(AcceleratorProfile::h100_8b()) });
    for id in 0..10 {
        engine.add_request(req(id, prompt(id as u32, 100), 5));
    }
    engine.step();
    let stats = engine.stats();
    assert_eq!((stats.running, stats.waiting), (4, 6));
    assert_eq!(engine.last_step_admitted(), &[0, 1, 2, 3]);
    engine.step();
    assert!(engine.last_step_admitted().is_empty());
    let events = drain(&mut engine);
    assert_eq!(finished(&events).len(), 10);
    assert!(finished(&events).iter().all(|&(_, n, r)| n == 5 && r == FinishReason::Length));
}

#[test]
fn chunked_prefill_respects_the_token_budget() {
    let cfg = EngineConfig { max_num_batched_tokens: 512, ..quiet(AcceleratorProfile::h100_8b()) };
    let mut engine = Engine::new(cfg);
    engine.add_request(req(1, prompt(1, 300), 50));
    engine.step(); // prefill of request 1 (300 tokens)
    engine.step(); // its first decode
    engine.add_request(req(2, prompt(2, 2000), 5));
    let step = engine.step();
    let shape = engine.last_step_shape();
    assert_eq!((shape.decode_seqs, shape.prefill_tokens), (1, 511), "decode first, prefill gets the rest");
    assert!(step.events.iter().all(|e| !matches!(e, RequestEvent::FirstToken { id: 2, .. })));
    let mut steps_to_first = 1;
    loop {
        let step = engine.step();
        assert!(engine.last_step_shape().prefill_tokens + engine.last_step_shape().decode_seqs <= 512);
        steps_to_first += 1;
        if step.events.iter().any(|e| matches!(e, RequestEvent::FirstToken { id: 2, .. })) {
            break;
        }
    }
    assert_eq!(steps_to_first, 4, "2000 prompt tokens at 511 per step");
}

#[test]
fn repeated_prompt_hits_the_prefix_cache_and_cuts_ttft() {
    let mut engine = Engine::new(quiet(AcceleratorProfile::h100_8b()));
    let shared = prompt(7, 1024);
    engine.add_request(req(1, shared.clone(), 4));
    let cold = drain(&mut engine);
    let (cold_ttft, cold_cached) = first_token_time(&cold, 1);
    engine.add_request(req(2, shared, 4));
    let warm = drain(&mut engine);
    let (warm_ttft, warm_cached) = first_token_time(&warm, 2);
    assert_eq!(cold_cached, 0);
    assert_eq!(warm_cached, 1008, "all full blocks but the last (one token must be computed)");
    assert!(warm_ttft < cold_ttft / 3.0, "warm {warm_ttft} vs cold {cold_ttft}");
    let stats = engine.stats();
    assert_eq!((stats.prefix_queries, stats.prefix_hits), (2048, 1008));
    assert_eq!(stats.prompt_tokens, 2048);
    assert_eq!(stats.kv_usage, 0.0, "finished requests free their blocks");
}

#[test]
fn lora_requests_do_not_share_cache_with_the_base_model() {
    let mut engine = Engine::new(quiet(AcceleratorProfile::h100_8b()));
    engine.add_request(req(1, prompt(3, 256), 2));
    drain(&mut engine);
    engine.add_request(SimRequest { lora: Some("a".into()), ..req(2, prompt(3, 256), 2) });
    assert_eq!(first_token_time(&drain(&mut engine), 2).1, 0);
}

#[test]
fn lru_evicts_the_least_recently_freed_blocks() {
    // 40 blocks of 16: each 160-token request (+2 output) holds 11 blocks.
    let cfg = EngineConfig { num_gpu_blocks: 40, ..quiet(AcceleratorProfile::h100_8b()) };
    let mut engine = Engine::new(cfg);
    let run = |engine: &mut Engine, id: u64, salt: u32| {
        engine.add_request(req(id, prompt(salt, 160), 2));
        first_token_time(&drain(engine), id).1
    };
    assert_eq!(run(&mut engine, 1, 100), 0);
    assert_eq!(run(&mut engine, 2, 200), 0);
    assert_eq!(run(&mut engine, 3, 100), 144, "A is still cached");
    // Three more distinct prompts need 33 blocks: the 16 never-used ones first, then the least
    // recently freed: A's tail, all of B, then A's blocks 8 and 7 (a request's tail goes first).
    for (id, salt) in [(4, 300), (5, 400), (6, 500)] {
        assert_eq!(run(&mut engine, id, salt), 0);
    }
    assert_eq!(run(&mut engine, 7, 100), 112, "A's head blocks outlive its tail blocks");
    assert_eq!(run(&mut engine, 8, 500), 144, "the most recent prompt survives");
    assert_eq!(run(&mut engine, 9, 200), 0, "B was evicted");
}

#[test]
fn preemption_when_kv_runs_out_and_everything_still_finishes() {
    // 30 blocks = 480 tokens; four requests that grow to 64 + 200 tokens each cannot all stay.
    let cfg = EngineConfig { num_gpu_blocks: 30, ..quiet(AcceleratorProfile::h100_8b()) };
    let mut engine = Engine::new(cfg);
    for id in 0..4 {
        engine.add_request(req(id, prompt(id as u32, 64), 200));
    }
    let events = drain(&mut engine);
    let stats = engine.stats();
    assert!(stats.preemptions > 0, "{stats:?}");
    let mut done = finished(&events);
    done.sort_by_key(|d| d.0);
    assert_eq!(done, (0..4).map(|id| (id, 200, FinishReason::Length)).collect::<Vec<_>>());
    assert_eq!(stats.generation_tokens, 800);
    // Each request's first token comes once, even though preempted requests recompute.
    let firsts = events.iter().filter(|(_, e)| matches!(e, RequestEvent::FirstToken { .. })).count();
    assert_eq!(firsts, 4);
}

#[test]
fn the_oldest_request_keeps_running_under_preemption() {
    let cfg = EngineConfig { num_gpu_blocks: 20, ..quiet(AcceleratorProfile::h100_8b()) };
    let mut engine = Engine::new(cfg);
    engine.add_request(req(1, prompt(1, 100), 150));
    engine.add_request(req(2, prompt(2, 100), 150));
    let events = drain(&mut engine);
    let order: Vec<u64> = finished(&events).iter().map(|f| f.0).collect();
    assert_eq!(order, vec![1, 2], "the most recently admitted one is the victim");
    assert!(engine.stats().preemptions > 0);
}

#[test]
fn lora_limit_makes_other_adapters_wait_without_blocking_the_queue() {
    let cfg = EngineConfig { max_loras: 1, ..quiet(AcceleratorProfile::h100_8b()) };
    let mut engine = Engine::new(cfg);
    let lora =
        |id: u64, name: &str| SimRequest { lora: Some(name.into()), ..req(id, prompt(id as u32, 50), 10) };
    engine.add_request(lora(1, "a"));
    engine.add_request(lora(2, "b"));
    engine.add_request(lora(3, "a"));
    engine.add_request(req(4, prompt(4, 50), 10));
    engine.step();
    let stats = engine.stats();
    assert_eq!((stats.running, stats.waiting), (3, 1));
    assert_eq!(stats.running_loras, vec!["a".to_string()]);
    assert_eq!(stats.waiting_loras, vec!["b".to_string()]);
    let events = drain(&mut engine);
    let b_start = first_token_time(&events, 2).0;
    let a_end = events.iter().filter(|(_, e)| matches!(e, RequestEvent::Finished { id: 3, .. })).map(|x| x.0);
    assert!(b_start > a_end.fold(0.0, f64::max), "b starts only after every 'a' request finished");
}

#[test]
fn deterministic_under_a_seed() {
    let run = |seed: u64| {
        let mut engine =
            Engine::new(EngineConfig { seed, ..EngineConfig::for_profile(AcceleratorProfile::l4_8b()) });
        for id in 0..20 {
            engine.add_request(req(
                id,
                tokenize(&format!("request {id} {}", "x".repeat(id as usize * 50))),
                20,
            ));
        }
        let mut trace = Vec::new();
        while engine.has_work() {
            let step = engine.step();
            trace.push((step.duration.to_bits(), step.events));
        }
        trace
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43), "noise depends on the seed");
}

#[test]
fn abort_frees_the_request_wherever_it_is() {
    let mut engine = Engine::new(EngineConfig { max_num_seqs: 1, ..quiet(AcceleratorProfile::h100_8b()) });
    engine.add_request(req(1, prompt(1, 500), 100));
    engine.add_request(req(2, prompt(2, 500), 100));
    engine.step();
    assert!(engine.stats().kv_usage > 0.0);
    assert!(engine.abort(2), "waiting");
    assert!(engine.abort(1), "running");
    assert!(!engine.abort(1));
    assert!(!engine.has_work());
    assert_eq!(engine.stats().kv_usage, 0.0);
}

#[test]
fn requests_too_long_for_the_cache_are_refused() {
    let mut engine = Engine::new(EngineConfig { num_gpu_blocks: 4, ..quiet(AcceleratorProfile::h100_8b()) });
    let err = engine.try_add_request(req(1, prompt(1, 60), 10)).unwrap_err();
    assert!(matches!(err, AddRequestError::TooLong { needed: 70, capacity: 64, .. }), "{err}");
    engine.add_request(req(2, prompt(1, 60), 10));
    assert_eq!(
        engine.step().events,
        vec![RequestEvent::Finished { id: 2, output_tokens: 0, reason: FinishReason::Abort }]
    );
    engine.add_request(req(3, vec![], 0));
    assert_eq!(engine.try_add_request(req(3, vec![1], 1)), Err(AddRequestError::DuplicateId(3)));
    assert_eq!(finished(&drain(&mut engine)), vec![(3, 1, FinishReason::Length)]);
}

#[test]
fn config_validation_and_clamping() {
    let good = EngineConfig::for_profile(AcceleratorProfile::h100_8b());
    assert_eq!(good.validate(), Ok(()));
    assert_eq!(good.block_size, 16);
    let zero = EngineConfig { max_num_seqs: 0, ..good.clone() };
    assert_eq!(zero.validate(), Err(EngineConfigError::Zero("max_num_seqs")));
    assert!(EngineConfig { noise: f64::NAN, ..good.clone() }.validate().is_err());
    let mut engine = Engine::new(zero);
    assert_eq!(engine.config().max_num_seqs, 1);
    engine.add_request(req(1, prompt(1, 10), 2));
    assert_eq!(finished(&drain(&mut engine)).len(), 1);
}

#[test]
fn tokenize_is_deterministic_and_prefix_preserving() {
    let a = tokenize("You are a helpful assistant. What is the capital of France?");
    let b = tokenize("You are a helpful assistant. Tell me a joke.");
    assert_eq!(a, tokenize("You are a helpful assistant. What is the capital of France?"));
    assert_eq!(a.len(), 15);
    assert_eq!(a[..7], b[..7]);
    assert!(tokenize("").is_empty());
}

#[test]
fn a_transferred_prompt_skips_its_prefill_and_is_cached_afterwards() {
    let cfg = quiet(AcceleratorProfile::h100_8b());
    let mut local = Engine::new(cfg.clone());
    local.add_request(req(1, prompt(1, 8_000), 3));
    let local_ttft = first_token_time(&drain(&mut local), 1).0;
    let mut decode = Engine::new(cfg);
    decode.try_add_transferred(req(1, prompt(1, 8_000), 3)).unwrap();
    let events = drain(&mut decode);
    let (ttft, cached) = first_token_time(&events, 1);
    assert!(ttft * 10.0 < local_ttft, "transferred TTFT {ttft} vs local prefill {local_ttft}");
    assert_eq!(cached, 0, "transferred KV is not a prefix-cache hit");
    assert_eq!(finished(&events), [(1, 3, FinishReason::Length)]);
    // The transferred blocks are the decode engine's own now: the same prompt hits them.
    decode.add_request(req(2, prompt(1, 8_000), 1));
    let (_, cached) = first_token_time(&drain(&mut decode), 2);
    assert!(cached >= 7_900, "cached {cached}");
}
