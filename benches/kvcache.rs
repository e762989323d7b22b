//! The precise prefix index's two hot paths (issue 20's speed targets): ingesting the engines' events
//! (decode a msgpack batch, recompute epp's block keys, index them) and scoring a request (its block keys,
//! then every endpoint's contiguous run).
//!
//! Events are vLLM-shaped (map-encoded `BlockStored`, u64 hashes, 16-token blocks, 32 blocks a batch) and
//! built here with rmp, so the bench needs no data files.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use epp::kvcache::{decode_batch, BlockKeyHasher, HashAlgorithm, KvEvent, KvIndex, PrefixMatch, TierWeights};

const BLOCK: usize = 16;
const BLOCKS_PER_BATCH: usize = 32;

/// A map-encoded batch with one `BlockStored` of `BLOCKS_PER_BATCH` blocks continuing `parent`.
fn batch(first_hash: u64, parent: Option<u64>, tokens: &[u32]) -> Vec<u8> {
    let mut p = Vec::new();
    let w = &mut p;
    rmp::encode::write_array_len(w, 3).unwrap();
    rmp::encode::write_f64(w, 1.0).unwrap();
    rmp::encode::write_array_len(w, 1).unwrap();
    rmp::encode::write_map_len(w, 6).unwrap();
    rmp::encode::write_str(w, "type").unwrap();
    rmp::encode::write_str(w, "BlockStored").unwrap();
    rmp::encode::write_str(w, "block_hashes").unwrap();
    rmp::encode::write_array_len(w, BLOCKS_PER_BATCH as u32).unwrap();
    for i in 0..BLOCKS_PER_BATCH as u64 {
        rmp::encode::write_u64(w, first_hash + i).unwrap();
    }
    rmp::encode::write_str(w, "parent_block_hash").unwrap();
    match parent {
        Some(hash) => rmp::encode::write_u64(w, hash).unwrap(),
        None => rmp::encode::write_nil(w).unwrap(),
    }
    rmp::encode::write_str(w, "token_ids").unwrap();
    rmp::encode::write_array_len(w, tokens.len() as u32).unwrap();
    for &token in tokens {
        rmp::encode::write_uint(w, u64::from(token)).unwrap();
    }
    rmp::encode::write_str(w, "block_size").unwrap();
    rmp::encode::write_uint(w, BLOCK as u64).unwrap();
    rmp::encode::write_str(w, "medium").unwrap();
    rmp::encode::write_str(w, "GPU").unwrap();
    rmp::encode::write_nil(w).unwrap();
    p
}

fn tokens(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| seed.wrapping_mul(2_654_435_761).wrapping_add(i * 7919) % 50_000).collect()
}

fn index() -> KvIndex {
    KvIndex::new(BlockKeyHasher::new(HashAlgorithm::Xxh64, BLOCK, ""), TierWeights::default())
}

fn ingestion(c: &mut Criterion) {
    let payloads: Vec<Vec<u8>> =
        (0..64u32).map(|i| batch(u64::from(i) << 32, None, &tokens(i, BLOCK * BLOCKS_PER_BATCH))).collect();
    let mut group = c.benchmark_group("kvcache_ingest");
    group.throughput(Throughput::Elements((payloads.len() * BLOCKS_PER_BATCH) as u64));
    group.bench_function("decode_and_index_2048_blocks", |b| {
        b.iter_batched(
            index,
            |mut ix| {
                for payload in &payloads {
                    let batch = decode_batch(payload).unwrap();
                    for event in &batch.events {
                        black_box(ix.apply(1, "model", event));
                    }
                }
                ix
            },
            criterion::BatchSize::LargeInput,
        );
    });
    group.finish();
}

/// 100 endpoints; each holds a 2k-token shared system prompt and its own 6k tokens after it; the request
/// is the shared prompt plus endpoint 42's continuation: 8,192 tokens, 512 blocks.
fn lookup(c: &mut Criterion) {
    let mut ix = index();
    let shared = tokens(1, 2048);
    let mut request = Vec::new();
    for endpoint in 0..100u32 {
        let mut all = shared.clone();
        all.extend(tokens(1000 + endpoint, 6144));
        let event = KvEvent::BlockStored(epp::kvcache::BlockStored {
            block_hashes: (0..all.len() as u64 / BLOCK as u64)
                .map(|h| (u64::from(endpoint) << 32) | h)
                .collect(),
            parent_block_hash: None,
            token_ids: all.clone(),
            block_size: BLOCK as u32,
            ..Default::default()
        });
        ix.apply(endpoint, "model", &event);
        if endpoint == 42 {
            request = all;
        }
    }
    let mut keys = Vec::with_capacity(512);
    ix.request_keys("model", &request, &mut keys);
    let mut matches: Vec<PrefixMatch> = Vec::with_capacity(100);
    // What is measured is right, whether or not a filter leaves the lookup bench out.
    ix.longest_prefix(&keys, &mut matches);
    assert!(matches.iter().any(|m| m.endpoint == 42 && m.blocks == 512));
    let mut group = c.benchmark_group("kvcache_lookup");
    let mut scratch = Vec::with_capacity(512);
    group.bench_function("block_keys_8k_tokens", |b| {
        b.iter(|| {
            scratch.clear();
            ix.request_keys("model", black_box(&request), &mut scratch);
        });
    });
    group.bench_function("longest_prefix_512_blocks_100_endpoints", |b| {
        b.iter(|| ix.longest_prefix(black_box(&keys), &mut matches));
    });
    group.finish();
}

/// Resident memory of the process, from /proc/self/statm (Linux), in bytes.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Memory per million indexed blocks: the resident growth from indexing 2,000 prompts of 32 blocks on
/// 16 endpoints (each prompt on one endpoint: 64,000 engine blocks, as many distinct epp blocks), scaled.
/// Printed, not timed; the allocator's retained pages make it an upper bound.
fn memory(c: &mut Criterion) {
    let before = resident_bytes();
    let mut ix = index();
    let mut blocks = 0u64;
    for prompt in 0..2_000u32 {
        let tokens = tokens(prompt, BLOCK * BLOCKS_PER_BATCH);
        let event = KvEvent::BlockStored(epp::kvcache::BlockStored {
            block_hashes: (0..BLOCKS_PER_BATCH as u64).map(|h| (u64::from(prompt) << 32) | h).collect(),
            token_ids: tokens,
            block_size: BLOCK as u32,
            ..Default::default()
        });
        blocks += ix.apply(prompt % 16, "model", &event).blocks_stored as u64;
    }
    if let (Some(before), Some(after)) = (before, resident_bytes()) {
        let per_million = after.saturating_sub(before) as f64 / blocks as f64 * 1e6 / (1u64 << 20) as f64;
        eprintln!("kvcache_memory: {blocks} blocks indexed, {per_million:.0} MiB per million blocks");
    }
    c.bench_function("kvcache_memory_index_len", |b| b.iter(|| black_box(ix.len())));
}

/// token-producer's in-process tokenizer on the model `make vllm` converts (SmolLM2's BPE tokenizer.json),
/// on the text tests/e2e_vllm checks against vLLM's own `/tokenize`: 1,401 and 8,193 tokens. Without
/// `.vllm-model` (no `make vllm`), says so and measures nothing.
fn local_tokenizer(c: &mut Criterion) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".vllm-model/tokenizer.json");
    let Ok(tokenizer) = epp::kvcache::LocalTokenizer::load(&path) else {
        eprintln!("kvcache_tokenize: no {} (make vllm): not measured", path.display());
        return;
    };
    let sentence = "The quick brown fox jumps over the lazy dog, again and again. ";
    let mut group = c.benchmark_group("kvcache_tokenize");
    for repeats in [100, 585] {
        let text = sentence.repeat(repeats);
        let tokens = tokenizer.encode(&text).map_or(0, |ids| ids.len());
        // The same prompt every time: remembered whole after the first (src/kvcache/segments.rs).
        group.bench_function(format!("smollm2_{tokens}_tokens"), |b| {
            b.iter(|| tokenizer.encode(black_box(&text)));
        });
        // A new prompt every time (its words seen before): what a stream of distinct prompts costs.
        let mut counter = 0u64;
        group.bench_function(format!("smollm2_{tokens}_tokens_new_prompt"), |b| {
            b.iter_batched(
                || {
                    counter += 1;
                    format!("Prompt {counter}: {text}")
                },
                |prompt| tokenizer.encode(&prompt),
                criterion::BatchSize::SmallInput,
            );
        });
        // The library's whole pipeline, as an engine (and epp before 2026-12-07) tokenizes.
        group.bench_function(format!("smollm2_{tokens}_tokens_library"), |b| {
            b.iter(|| tokenizer.encode_whole(black_box(&text)));
        });
    }
    group.finish();
}

/// token-producer's in-process chat template on the same model (its chat_template.jinja), for a chat of
/// about 8,000 tokens (a system prompt and six turns): the template alone; the template and the tokenizer
/// when only the last turn is new (what a session's next request or a shared system prompt costs, the
/// other pieces remembered: src/kvcache/segments.rs); and the tokenizer over the whole rendered text, as
/// it runs without remembered pieces.
fn chat_template(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".vllm-model");
    let loaded = epp::kvcache::LocalTokenizer::load(&dir.join("tokenizer.json"))
        .ok()
        .zip(epp::kvcache::ChatTemplate::load(&dir.join("tokenizer_config.json"), None).ok());
    let Some((tokenizer, template)) = loaded else {
        eprintln!("kvcache_chat: no {} (make vllm): not measured", dir.display());
        return;
    };
    let sentence = "The quick brown fox jumps over the lazy dog, again and again. ";
    let body = |last: u64| {
        let mut messages = vec![serde_json::json!({"role": "system", "content": sentence.repeat(300)})];
        for turn in 0..6 {
            let role = if turn % 2 == 0 { "user" } else { "assistant" };
            messages.push(serde_json::json!({"role": role, "content": sentence.repeat(47)}));
        }
        messages.push(serde_json::json!({"role": "user", "content": format!("Question {last}: {}", sentence.repeat(5))}));
        serde_json::json!({"model": "smol", "messages": messages}).to_string()
    };
    let first = body(0);
    let Ok(epp::kvcache::ChatPrompt::Text(text)) = template.render(first.as_bytes()) else {
        eprintln!("kvcache_chat: the chat does not render in process: not measured");
        return;
    };
    let tokens = tokenizer.encode_rendered(&text).map_or(0, |ids| ids.len());
    let mut group = c.benchmark_group("kvcache_chat");
    group.bench_function(format!("smollm2_{tokens}_tokens_template"), |b| {
        b.iter(|| template.render(black_box(first.as_bytes())));
    });
    let mut counter = 0;
    group.bench_function(format!("smollm2_{tokens}_tokens_template_and_tokenizer_new_last_turn"), |b| {
        b.iter(|| {
            counter += 1;
            match template.render(black_box(body(counter).as_bytes())) {
                Ok(epp::kvcache::ChatPrompt::Text(text)) => {
                    tokenizer.encode_rendered(&text).map(|ids| ids.len()).ok()
                }
                _ => None,
            }
        });
    });
    group.bench_function(format!("smollm2_{tokens}_tokens_tokenizer_whole_text"), |b| {
        b.iter(|| tokenizer.encode(black_box(&text)));
    });
    // §8's live workload (crates/lab/inputs/workload-live.yaml as epp-bench sends it): a shared system
    // prompt of ~950 words and a new question of ~200 words drawn from a small vocabulary.
    let vocabulary =
        ["the", "model", "server", "token", "cache", "route", "queue", "latency", "prompt", "engine"];
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(7);
    let mut words = |n: usize| {
        let mut text = String::new();
        for _ in 0..n {
            text.push_str(vocabulary[rand::Rng::random_range(&mut rng, 0..vocabulary.len())]);
            text.push(' ');
        }
        text
    };
    let system = format!("System prompt 3: {}", words(950));
    let mut questions = std::iter::repeat_with(|| {
        serde_json::json!({"model": "smol", "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": words(200)}]})
        .to_string()
    });
    let workload_tokens = questions.next().and_then(|body| match template.render(body.as_bytes()) {
        Ok(epp::kvcache::ChatPrompt::Text(text)) => {
            tokenizer.encode_rendered(&text).ok().map(|ids| ids.len())
        }
        _ => None,
    });
    group.bench_function(
        format!("live_workload_{}_tokens_new_question", workload_tokens.unwrap_or(0)),
        |b| {
            b.iter_batched(
                || questions.next().unwrap_or_default(),
                |body| match template.render(body.as_bytes()) {
                    Ok(epp::kvcache::ChatPrompt::Text(text)) => {
                        tokenizer.encode_rendered(&text).map(|ids| ids.len()).ok()
                    }
                    _ => None,
                },
                criterion::BatchSize::SmallInput,
            );
        },
    );
    group.finish();
}

criterion_group!(benches, ingestion, lookup, memory, local_tokenizer, chat_template);
criterion_main!(benches);
