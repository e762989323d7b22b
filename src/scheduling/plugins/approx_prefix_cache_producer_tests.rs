use super::*;
use crate::scheduling::plugins::testing::*;
use crate::scheduling::ProfileRunResult;
use serde_json::json;

fn producer(params: serde_json::Value) -> ApproxPrefixCacheProducer {
    ApproxPrefixCacheProducer::new(parse_config("p", Some(&params)).unwrap(), ctx().metrics.prefix_indexer)
}

/// Candidates for endpoints 1..=n with default telemetry (no block size reported).
fn pool(n: u8) -> Vec<Candidate> {
    (1..=n).map(|i| candidate(i, EndpointTelemetry::default())).collect()
}

fn matches(
    p: &ApproxPrefixCacheProducer,
    f: &RequestFixture,
    candidates: &mut [Candidate],
) -> Vec<PrefixMatch> {
    p.prepare(&f.request(), candidates);
    candidates.iter().map(|c| c.attrs.prefix.expect("prefix set")).collect()
}

fn send(p: &ApproxPrefixCacheProducer, f: &RequestFixture, target: &Arc<Endpoint>) {
    p.pre_request(&f.request(), &result_for(std::slice::from_ref(target)), &dispatch(target, 1, 1));
}

/// A prompt of `blocks` distinct 64-char blocks (16 tokens × 4 chars), optionally diverging at `from`.
fn prompt(blocks: usize, diverge_from: Option<usize>) -> String {
    (0..blocks)
        .map(|i| {
            let c = if diverge_from.is_some_and(|d| i >= d) { 'z' } else { (b'a' + (i % 26) as u8) as char };
            format!("{i:04}{}", c.to_string().repeat(60))
        })
        .collect()
}

#[test]
fn records_the_target_and_matches_its_prefix() {
    let p = producer(json!({}));
    let mut c = pool(3);
    let f = RequestFixture::with_prompt("m", &prompt(4, None));
    let before = matches(&p, &f, &mut c);
    assert!(before.iter().all(|m| *m == PrefixMatch { match_blocks: 0, total_blocks: 4, block_chars: 64 }));

    send(&p, &f, &c[1].endpoint.clone());
    assert_eq!(p.indexed_blocks(), 4);
    let after = matches(&p, &f, &mut c);
    assert_eq!(after.iter().map(|m| m.match_blocks).collect::<Vec<_>>(), vec![0, 4, 0]);

    // A request sharing the first two blocks matches two of its five.
    let g = RequestFixture::with_prompt("m", &prompt(5, Some(2)));
    let partial = matches(&p, &g, &mut c);
    assert_eq!(partial[1], PrefixMatch { match_blocks: 2, total_blocks: 5, block_chars: 64 });
}

#[test]
fn model_and_cache_salt_separate_prefixes() {
    let p = producer(json!({}));
    let mut c = pool(1);
    let text = prompt(2, None);
    send(&p, &RequestFixture::with_prompt("m", &text), &c[0].endpoint.clone());
    assert_eq!(matches(&p, &RequestFixture::with_prompt("other", &text), &mut c)[0].match_blocks, 0);
    let mut salted = RequestFixture::with_prompt("m", &text);
    salted.parsed.cache_salt = Some("tenant-a".into());
    assert_eq!(matches(&p, &salted, &mut c)[0].match_blocks, 0);
}

#[test]
fn short_prompt_has_no_blocks_and_records_nothing() {
    let p = producer(json!({}));
    let mut c = pool(2);
    let f = RequestFixture::with_prompt("m", "\"hi\"");
    assert_eq!(matches(&p, &f, &mut c)[0], PrefixMatch { match_blocks: 0, total_blocks: 0, block_chars: 64 });
    send(&p, &f, &c[0].endpoint.clone());
    assert_eq!(p.indexed_blocks(), 0);
}

#[test]
fn auto_tune_takes_block_size_from_the_first_reporting_candidate() {
    let p = producer(json!({}));
    let mut c = vec![
        candidate(1, EndpointTelemetry::default()), // not scraped yet: skipped
        candidate(2, EndpointTelemetry { cache_block_size: 32, ..Default::default() }),
        candidate(3, EndpointTelemetry { cache_block_size: 8, ..Default::default() }),
    ];
    let f = RequestFixture::with_prompt("m", &"x".repeat(1000));
    let m = matches(&p, &f, &mut c);
    // 128-char blocks: 7 full + 1 partial.
    assert_eq!((m[0].block_chars, m[0].total_blocks), (128, 8));

    // Once seen, the reported size is kept when no endpoint at hand reports one, so a target that has not
    // been scraped yet is recorded at the same granularity the lookups use.
    send(&p, &f, &c[0].endpoint.clone());
    assert_eq!(p.indexed_blocks(), 8);
    assert_eq!(matches(&p, &f, &mut c[..1])[0].match_blocks, 8);

    let fixed = producer(json!({"autoTune": false, "blockSizeTokens": 10}));
    let m = matches(&fixed, &f, &mut c);
    assert_eq!((m[0].block_chars, m[0].total_blocks), (40, 25));
}

#[test]
fn max_blocks_and_max_tokens() {
    let f = RequestFixture::with_prompt("m", &"x".repeat(64 * 10));
    let mut c = pool(1);
    assert_eq!(matches(&producer(json!({"maxPrefixBlocksToMatch": 3})), &f, &mut c)[0].total_blocks, 3);
    // Tokens win over blocks when set: 80 tokens / 16 per block = 5 blocks.
    let p = producer(json!({"maxPrefixBlocksToMatch": 3, "maxPrefixTokensToMatch": 80}));
    assert_eq!(matches(&p, &f, &mut c)[0].total_blocks, 5);
    // Both 0 is llm-d's "the whole prompt": all 10 blocks (the default cap would be 256 here too, so a
    // prompt longer than that shows it).
    let long = RequestFixture::with_prompt("m", &"x".repeat(64 * 300));
    let whole = producer(json!({"maxPrefixBlocksToMatch": 0, "maxPrefixTokensToMatch": 0}));
    assert_eq!(matches(&whole, &long, &mut c)[0].total_blocks, 300);
    assert_eq!(matches(&producer(json!({})), &long, &mut c)[0].total_blocks, 256);
    // A token cap below one block hashes nothing, as in llm-d.
    let tiny = producer(json!({"maxPrefixTokensToMatch": 8}));
    assert_eq!(matches(&tiny, &f, &mut c)[0].total_blocks, 0);
}

#[test]
fn lru_capacity_bounds_each_endpoint() {
    let f = RequestFixture::with_prompt("m", &prompt(8, None));
    let p = producer(json!({"lruCapacityPerServer": 5}));
    let c = pool(1);
    send(&p, &f, &c[0].endpoint);
    assert_eq!(p.indexed_blocks(), 5);
    // The first blocks were evicted, so the prefix no longer matches from the start.
    let mut c2 = c.clone();
    assert_eq!(matches(&p, &f, &mut c2)[0].match_blocks, 0);

    // With autoTune the server's reported block count is the capacity.
    let p = producer(json!({"lruCapacityPerServer": 5}));
    let ep = endpoint(9);
    ep.update_telemetry(EndpointTelemetry { cache_num_blocks: 7, ..Default::default() });
    send(&p, &f, &ep);
    assert_eq!(p.indexed_blocks(), 7);
}

#[test]
fn prefill_target_is_recorded_too() {
    let p = producer(json!({}));
    let mut c = pool(2);
    let f = RequestFixture::with_prompt("m", &prompt(3, None));
    let (decode, prefill) = (c[0].endpoint.clone(), c[1].endpoint.clone());
    let result = SchedulingResult {
        profile_results: vec![
            ("decode".into(), ProfileRunResult { targets: vec![decode.clone()], scores: vec![] }),
            ("prefill".into(), ProfileRunResult { targets: vec![prefill], scores: vec![] }),
        ],
        primary_profile: "decode".into(),
        extras: Default::default(),
    };
    p.pre_request(&f.request(), &result, &dispatch(&decode, 1, 1));
    assert_eq!(matches(&p, &f, &mut c).iter().map(|m| m.match_blocks).collect::<Vec<_>>(), vec![3, 3]);
}

#[test]
fn removed_endpoints_lose_their_blocks() {
    let p = producer(json!({}));
    let mut c = pool(2);
    let f = RequestFixture::with_prompt("m", &prompt(3, None));
    send(&p, &f, &c[0].endpoint.clone());
    send(&p, &f, &c[1].endpoint.clone());
    assert_eq!(p.indexed_blocks(), 6);
    p.on_endpoints_removed(&[c[0].endpoint.clone()]);
    assert_eq!(p.indexed_blocks(), 3);
    assert_eq!(matches(&p, &f, &mut c).iter().map(|m| m.match_blocks).collect::<Vec<_>>(), vec![0, 3]);
}

#[test]
fn factory_builds_every_role() {
    let built = build(factory, json!({})).unwrap();
    assert!(built.producer.is_some() && built.pre_request.is_some() && built.endpoint_listener.is_some());
    assert_eq!(built.producer.unwrap().produces(), &[DataKey::PrefixCacheMatch]);
    assert_eq!(parse_config("p", None).unwrap(), ApproxPrefixCacheConfig::default());
}

#[test]
fn parameters() {
    let cfg = parse_config(
        "p",
        Some(&json!({"autoTune": false, "blockSizeTokens": 64, "maxPrefixBlocksToMatch": 2048,
                     "maxPrefixTokensToMatch": 131072, "lruCapacityPerServer": 1000})),
    )
    .unwrap();
    assert_eq!(
        cfg,
        ApproxPrefixCacheConfig {
            auto_tune: false,
            block_size_tokens: 64,
            max_prefix_blocks_to_match: 2048,
            max_prefix_tokens_to_match: 131072,
            lru_capacity_per_server: 1000,
        }
    );
    // Deprecated blockSize: an error alone, ignored beside blockSizeTokens.
    assert_rejects(factory, json!({"blockSize": 64}), "blockSizeTokens");
    assert_eq!(
        parse_config("p", Some(&json!({"blockSize": 64, "blockSizeTokens": 32}))).unwrap().block_size_tokens,
        32
    );
    for field in ["blockSizeTokens", "lruCapacityPerServer"] {
        assert_rejects(factory, json!({ field: 0 }), field);
    }
    // A block cap of 0 is llm-d's "no block cap" (max_blocks_and_max_tokens shows the whole prompt).
    assert_eq!(
        parse_config("p", Some(&json!({"maxPrefixBlocksToMatch": 0}))).unwrap().max_prefix_blocks_to_match,
        0
    );
    assert_rejects(factory, json!({"blockSizeTokens": -1}), "blockSizeTokens");
    assert_rejects(factory, json!({"autoTune": "yes"}), "autoTune");
    assert_rejects(factory, json!({"blockSizeTokenz": 16}), "blockSizeTokenz");
}
