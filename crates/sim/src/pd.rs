//! Prefill/decode disaggregation as vLLM's `NixlConnector` does it over HTTP (vllm/distributed/
//! kv_transfer/kv_connector/v1/nixl_connector.py), seen from the API: the request's
//! `kv_transfer_params` say which leg a replica serves.
//!
//! - `do_remote_decode: true` — the prefill leg: the replica computes the prompt as usual (the sidecar asks
//!   for one token) and answers, besides the usual JSON, `kv_transfer_params` saying where the blocks are.
//! - `do_remote_prefill: true` — the decode leg: after the transfer time (the prompt's KV bytes over the
//!   link bandwidth), the request enters the engine with its prompt already computed, so only its last
//!   token is prefilled ([`Engine::try_add_transferred`](super::engine::Engine::try_add_transferred)).
//!
//! What vLLM does that this does not: hold the prefill's blocks until the decode pulled them (they are
//! freed at once here), and fail a decode whose remote engine is gone (the transfer always succeeds).

use serde_json::{json, Value};

/// Which leg of a disaggregated request a replica serves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Leg {
    /// Not disaggregated.
    Whole,
    Prefill,
    /// Simulated seconds the KV transfer takes.
    Decode {
        transfer_seconds: f64,
    },
}

/// The leg `params` ask for; an `Err` names the field that is wrong.
pub(crate) fn leg(
    params: Option<&Value>,
    prompt_tokens: usize,
    kv_bytes_per_token: u64,
    gbps: f64,
) -> Result<Leg, String> {
    let Some(params) = params.filter(|p| !p.is_null()) else { return Ok(Leg::Whole) };
    let Some(p) = params.as_object() else { return Err("kv_transfer_params must be an object".into()) };
    let flag = |name: &str| p.get(name).and_then(Value::as_bool).unwrap_or(false);
    if flag("do_remote_decode") {
        return Ok(Leg::Prefill);
    }
    if !flag("do_remote_prefill") {
        return Ok(Leg::Whole);
    }
    if !p.get("remote_engine_id").is_some_and(Value::is_string) {
        return Err("kv_transfer_params.remote_engine_id must be a string".into());
    }
    if !p.get("remote_block_ids").is_some_and(Value::is_array) {
        return Err("kv_transfer_params.remote_block_ids must be an array".into());
    }
    let bytes = prompt_tokens as f64 * kv_bytes_per_token as f64;
    Ok(Leg::Decode { transfer_seconds: bytes / (gbps * 1e9) })
}

/// The prefill leg's answer: where the decode leg finds the blocks.
pub(crate) fn handoff(engine_id: &str, request_id: &str, prompt_tokens: usize, block_size: usize) -> Value {
    let blocks: Vec<usize> = (0..prompt_tokens.div_ceil(block_size.max(1))).collect();
    json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_block_ids": [blocks],
        "remote_host": "127.0.0.1",
        // vLLM's NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_PORT), not the HTTP port.
        "remote_port": 5600,
        "tp_size": 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legs_are_read_from_the_params() {
        assert_eq!(leg(None, 10, 1, 1.0), Ok(Leg::Whole));
        assert_eq!(leg(Some(&json!({"do_remote_decode": true})), 10, 1, 1.0), Ok(Leg::Prefill));
        let decode = json!({"do_remote_prefill": true, "remote_engine_id": "e", "remote_block_ids": [[0]]});
        assert_eq!(leg(Some(&decode), 1000, 1_000_000, 1.0), Ok(Leg::Decode { transfer_seconds: 1.0 }));
        let e = leg(Some(&json!({"do_remote_prefill": true})), 1, 1, 1.0).unwrap_err();
        assert!(e.contains("remote_engine_id"), "{e}");
        assert!(leg(Some(&json!([1])), 1, 1, 1.0).is_err());
    }

    #[test]
    fn the_handoff_names_every_block() {
        let h = handoff("sim-1", "cmpl-1", 33, 16);
        assert_eq!(h["remote_block_ids"], json!([[0, 1, 2]]));
        assert_eq!(h["do_remote_prefill"], json!(true));
    }
}
