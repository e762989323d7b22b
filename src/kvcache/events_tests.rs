use super::*;
use serde_json::Value;

use crate::kvcache::test_data::real_vllm_frames as real_frames;

fn u64s(value: &Value) -> Vec<u64> {
    value.as_array().expect("array").iter().map(|v| v.as_u64().expect("u64")).collect()
}

#[test]
fn real_vllm_frames_decode_as_vllm_reads_them() {
    let frames = real_frames();
    assert_eq!(frames.len(), 4);
    for (payload, json) in frames {
        let batch = decode_batch(&payload).expect("decodes");
        assert_eq!(batch.ts, json[0].as_f64().expect("ts"));
        assert_eq!(batch.data_parallel_rank, json[2].as_i64());
        let expected = json[1].as_array().expect("events");
        assert_eq!(batch.events.len(), expected.len());
        for (event, want) in batch.events.iter().zip(expected) {
            let KvEvent::BlockStored(stored) = event else { panic!("{event:?}") };
            assert_eq!(stored.block_hashes, u64s(&want["block_hashes"]));
            assert_eq!(stored.parent_block_hash, want["parent_block_hash"].as_u64());
            let tokens: Vec<u32> = u64s(&want["token_ids"]).into_iter().map(|t| t as u32).collect();
            assert_eq!(stored.token_ids, tokens);
            assert_eq!(stored.block_size, 128);
            assert_eq!(stored.token_ids.len(), 128 * stored.block_hashes.len());
            assert_eq!(stored.medium.as_deref(), want["medium"].as_str());
        }
    }
}

/// Hashes above i64::MAX arrive as msgpack uint64 and stay exact.
#[test]
fn hashes_above_i64_max_stay_exact() {
    let frames = real_frames();
    let batch = decode_batch(&frames[0].0).expect("decodes");
    let KvEvent::BlockStored(stored) = &batch.events[0] else { panic!() };
    assert!(stored.block_hashes.iter().any(|&h| h > i64::MAX as u64));
}

/// Older vLLM: positional events; hashes as 32-byte digests (the last 8 bytes, big-endian, are the hash).
#[test]
fn positional_events_and_binary_hashes() {
    let mut digest = [0u8; 32];
    digest[24..].copy_from_slice(&0xfeed_beef_0000_0001u64.to_be_bytes());
    let mut p = Vec::new();
    rmp::encode::write_array_len(&mut p, 3).unwrap();
    rmp::encode::write_f64(&mut p, 1.5).unwrap();
    rmp::encode::write_array_len(&mut p, 3).unwrap();
    // ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra_keys, group_idx]
    rmp::encode::write_array_len(&mut p, 10).unwrap();
    rmp::encode::write_str(&mut p, "BlockStored").unwrap();
    rmp::encode::write_array_len(&mut p, 2).unwrap();
    rmp::encode::write_bin(&mut p, &digest).unwrap();
    rmp::encode::write_u64(&mut p, u64::MAX - 1).unwrap();
    rmp::encode::write_uint(&mut p, 7).unwrap();
    rmp::encode::write_array_len(&mut p, 4).unwrap();
    for token in [1u64, 70_000, 3, 4] {
        rmp::encode::write_uint(&mut p, token).unwrap();
    }
    rmp::encode::write_uint(&mut p, 2).unwrap();
    rmp::encode::write_nil(&mut p).unwrap();
    rmp::encode::write_str(&mut p, "CPU").unwrap();
    rmp::encode::write_str(&mut p, "adapter-a").unwrap();
    rmp::encode::write_array_len(&mut p, 1).unwrap();
    rmp::encode::write_array_len(&mut p, 2).unwrap();
    rmp::encode::write_str(&mut p, "salt").unwrap();
    rmp::encode::write_f32(&mut p, 0.5).unwrap();
    rmp::encode::write_uint(&mut p, 0).unwrap();
    // ["BlockRemoved", hashes, medium, group_idx]
    rmp::encode::write_array_len(&mut p, 4).unwrap();
    rmp::encode::write_str(&mut p, "BlockRemoved").unwrap();
    rmp::encode::write_array_len(&mut p, 1).unwrap();
    rmp::encode::write_uint(&mut p, 7).unwrap();
    rmp::encode::write_str(&mut p, "GPU").unwrap();
    rmp::encode::write_uint(&mut p, 0).unwrap();
    rmp::encode::write_array_len(&mut p, 1).unwrap();
    rmp::encode::write_str(&mut p, "AllBlocksCleared").unwrap();
    rmp::encode::write_nil(&mut p).unwrap();

    let batch = decode_batch(&p).expect("decodes");
    assert_eq!((batch.ts, batch.data_parallel_rank), (1.5, None));
    let stored = BlockStored {
        block_hashes: vec![0xfeed_beef_0000_0001, u64::MAX - 1],
        parent_block_hash: Some(7),
        token_ids: vec![1, 70_000, 3, 4],
        block_size: 2,
        medium: Some("CPU".into()),
        lora_name: Some("adapter-a".into()),
        lora_id: None,
    };
    assert_eq!(
        batch.events,
        vec![
            KvEvent::BlockStored(stored),
            KvEvent::BlockRemoved { block_hashes: vec![7], medium: Some("GPU".into()) },
            KvEvent::AllBlocksCleared,
        ]
    );
}

/// A batch encoded as a map (one vLLM version), with SGLang's rank name and map-form events with extra,
/// unknown fields.
#[test]
fn map_batches_and_unknown_fields() {
    let mut p = Vec::new();
    rmp::encode::write_map_len(&mut p, 4).unwrap();
    rmp::encode::write_str(&mut p, "ts").unwrap();
    rmp::encode::write_f64(&mut p, 2.0).unwrap();
    rmp::encode::write_str(&mut p, "future_field").unwrap();
    rmp::encode::write_map_len(&mut p, 1).unwrap();
    rmp::encode::write_str(&mut p, "k").unwrap();
    rmp::encode::write_array_len(&mut p, 1).unwrap();
    rmp::encode::write_nil(&mut p).unwrap();
    rmp::encode::write_str(&mut p, "attn_dp_rank").unwrap();
    rmp::encode::write_uint(&mut p, 3).unwrap();
    rmp::encode::write_str(&mut p, "events").unwrap();
    rmp::encode::write_array_len(&mut p, 1).unwrap();
    rmp::encode::write_map_len(&mut p, 3).unwrap();
    rmp::encode::write_str(&mut p, "type").unwrap();
    rmp::encode::write_str(&mut p, "BlockRemoved").unwrap();
    rmp::encode::write_str(&mut p, "block_hashes").unwrap();
    rmp::encode::write_array_len(&mut p, 1).unwrap();
    rmp::encode::write_uint(&mut p, 9).unwrap();
    rmp::encode::write_str(&mut p, "medium").unwrap();
    rmp::encode::write_str(&mut p, "CPU_PINNED").unwrap();
    let batch = decode_batch(&p).expect("decodes");
    assert_eq!(batch.data_parallel_rank, Some(3));
    assert_eq!(
        batch.events,
        vec![KvEvent::BlockRemoved { block_hashes: vec![9], medium: Some("CPU_PINNED".into()) }]
    );
}

/// Every prefix of a real payload, and bytes it never holds, are errors, never panics.
#[test]
fn malformed_payloads_are_errors() {
    let (payload, _) = real_frames().remove(2);
    for end in 0..payload.len() {
        assert!(decode_batch(&payload[..end]).is_err(), "a payload cut at {end} decoded");
    }
    let mut trailing = payload.clone();
    trailing.push(0xc0);
    assert_eq!(decode_batch(&trailing), Err(DecodeError::TrailingBytes(1)));
    assert!(matches!(decode_batch(&[0xc1]), Err(DecodeError::Unexpected { .. })));
    assert!(matches!(decode_batch(b"\x93\xcb"), Err(DecodeError::Truncated)));

    // A newer engine's event types, in both forms, are skipped whole (and counted); the batch's other
    // events still apply.
    let mut unknown = Vec::new();
    rmp::encode::write_array_len(&mut unknown, 2).unwrap();
    rmp::encode::write_f64(&mut unknown, 0.0).unwrap();
    rmp::encode::write_array_len(&mut unknown, 3).unwrap();
    rmp::encode::write_array_len(&mut unknown, 2).unwrap();
    rmp::encode::write_str(&mut unknown, "BlockMoved").unwrap();
    rmp::encode::write_uint(&mut unknown, 5).unwrap();
    rmp::encode::write_map_len(&mut unknown, 2).unwrap();
    rmp::encode::write_str(&mut unknown, "type").unwrap();
    rmp::encode::write_str(&mut unknown, "Later").unwrap();
    rmp::encode::write_str(&mut unknown, "x").unwrap();
    rmp::encode::write_uint(&mut unknown, 1).unwrap();
    rmp::encode::write_array_len(&mut unknown, 1).unwrap();
    rmp::encode::write_str(&mut unknown, "AllBlocksCleared").unwrap();
    let batch = decode_batch(&unknown).expect("decodes");
    assert_eq!((batch.events, batch.unknown_events), (vec![KvEvent::AllBlocksCleared], 2));

    // An unknown field nested 100 deep is refused, not recursed into.
    let mut deep = Vec::new();
    rmp::encode::write_array_len(&mut deep, 4).unwrap();
    rmp::encode::write_f64(&mut deep, 0.0).unwrap();
    rmp::encode::write_array_len(&mut deep, 0).unwrap();
    rmp::encode::write_nil(&mut deep).unwrap();
    deep.extend(std::iter::repeat_n(0x91, 100));
    deep.push(0xc0);
    assert_eq!(decode_batch(&deep), Err(DecodeError::TooDeep));
}
