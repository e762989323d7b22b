//! llm-d's NIXL v2 protocol (llm-d/llm-d-router:pkg/sidecar/proxy/connector_nixlv2.go), the one vLLM's
//! `NixlConnector` speaks: the prefill leg is the request cut to one token, not streamed, with null-filled
//! `kv_transfer_params` asking the prefill engine to keep the KV blocks for a remote decode; its answer's
//! `kv_transfer_params` say where those blocks are; the decode leg is the original request plus that
//! answer's `kv_transfer_params`, verbatim, and the decode engine pulls the blocks instead of prefilling.

use serde_json::{json, Map, Value};

use crate::error::SidecarError;

/// The generate APIs, by how they limit output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`, `/v1/completions`, `/v1/messages`: `max_tokens` (and chat's
    /// `max_completion_tokens`).
    OpenAi,
    /// `/v1/responses`: `max_output_tokens`.
    Responses,
    /// `/inference/v1/generate`: `sampling_params.max_tokens`.
    Generate,
}

impl Api {
    /// The API of a POST to `path`, if it is one the sidecar disaggregates.
    pub fn of(path: &str) -> Option<Self> {
        match path {
            "/v1/chat/completions" | "/v1/completions" | "/v1/messages" => Some(Self::OpenAi),
            "/v1/responses" => Some(Self::Responses),
            "/inference/v1/generate" => Some(Self::Generate),
            _ => None,
        }
    }
}

/// The client's body, checked: a JSON object, `n` = 1, no `kv_transfer_params` of its own.
pub fn client_body(bytes: &[u8]) -> Result<Map<String, Value>, SidecarError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| SidecarError::InvalidRequest(e.to_string()))?;
    let Value::Object(body) = value else {
        return Err(SidecarError::InvalidRequest("expected a JSON object".into()));
    };
    if body.contains_key("kv_transfer_params") {
        return Err(SidecarError::ClientKvTransferParams);
    }
    match body.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => return Err(SidecarError::UnsupportedVariant(n.as_u64().unwrap_or(0))),
    }
    Ok(body)
}

/// The prefill leg's body.
pub fn prefill_body(client: &Map<String, Value>, api: Api) -> Map<String, Value> {
    let mut body = client.clone();
    body.insert(
        "kv_transfer_params".into(),
        json!({
            "do_remote_decode": true,
            "do_remote_prefill": false,
            "remote_engine_id": null,
            "remote_block_ids": null,
            "remote_host": null,
            "remote_port": null
        }),
    );
    body.insert("stream".into(), Value::Bool(false));
    body.remove("stream_options");
    match api {
        Api::OpenAi => {
            body.insert("max_tokens".into(), json!(1));
            if body.contains_key("max_completion_tokens") {
                body.insert("max_completion_tokens".into(), json!(1));
            }
            body.remove("min_tokens");
        }
        Api::Responses => {
            body.insert("max_output_tokens".into(), json!(1));
        }
        Api::Generate => {
            let params = body.entry("sampling_params").or_insert_with(|| json!({}));
            if let Value::Object(p) = params {
                p.insert("max_tokens".into(), json!(1));
                p.remove("min_tokens");
            }
        }
    }
    body
}

/// What the prefill leg hands the decode leg.
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    pub kv_transfer_params: Value,
    /// The prefill's `usage.prompt_tokens_details.cached_tokens` (0 when absent): what the client's usage
    /// must report, since the decode engine's count covers the transferred blocks.
    pub cached_tokens: u64,
}

/// Reads the prefill answer; the error never quotes it.
pub fn handoff(answer: &[u8], pod: &str) -> Result<Handoff, SidecarError> {
    let invalid = |why: &str| SidecarError::InvalidHandoff { pod: pod.to_string(), why: why.to_string() };
    let value: Value = serde_json::from_slice(answer).map_err(|_| invalid("the answer is not JSON"))?;
    let params = value.get("kv_transfer_params").ok_or_else(|| invalid("kv_transfer_params missing"))?;
    if !params.is_object() {
        return Err(invalid("kv_transfer_params is not an object"));
    }
    let cached_tokens =
        value.pointer("/usage/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0);
    Ok(Handoff { kv_transfer_params: params.clone(), cached_tokens })
}

/// The decode leg's body: the client's, plus the handoff.
pub fn decode_body(mut client: Map<String, Value>, handoff: &Handoff) -> Map<String, Value> {
    client.insert("kv_transfer_params".into(), handoff.kv_transfer_params.clone());
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        client_body(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_prefill_leg_asks_for_one_token_kept_for_a_remote_decode() {
        let client = body(
            json!({"model": "m", "messages": [], "stream": true, "stream_options": {"include_usage": true},
            "max_tokens": 200, "max_completion_tokens": 200, "min_tokens": 5}),
        );
        let p = prefill_body(&client, Api::OpenAi);
        assert_eq!((p["max_tokens"].clone(), p["max_completion_tokens"].clone()), (json!(1), json!(1)));
        assert_eq!(p["stream"], json!(false));
        assert!(!p.contains_key("stream_options") && !p.contains_key("min_tokens"));
        assert_eq!(p["kv_transfer_params"]["do_remote_decode"], json!(true));
        assert_eq!(p["kv_transfer_params"]["remote_engine_id"], Value::Null);
        let r = prefill_body(&body(json!({"input": "x", "max_output_tokens": 9})), Api::Responses);
        assert_eq!(r["max_output_tokens"], json!(1));
        let g = prefill_body(
            &body(json!({"sampling_params": {"max_tokens": 9, "min_tokens": 2}})),
            Api::Generate,
        );
        assert_eq!(g["sampling_params"], json!({"max_tokens": 1}));
    }

    #[test]
    fn client_bodies_are_checked() {
        assert_eq!(client_body(b"[1]").unwrap_err().code(), "invalid_pd_request");
        assert_eq!(client_body(br#"{"kv_transfer_params": {}}"#).unwrap_err().code(), "invalid_pd_request");
        assert_eq!(client_body(br#"{"n": 2}"#).unwrap_err().code(), "unsupported_pd_variant");
        assert!(client_body(br#"{"n": 1}"#).is_ok());
    }

    #[test]
    fn the_handoff_is_passed_on_verbatim_and_its_errors_quote_nothing() {
        let answer = json!({"choices": [{"text": "secret prompt echo"}], "kv_transfer_params": {"remote_engine_id": "e1",
            "remote_block_ids": [[1, 2]], "tp_size": 1}, "usage": {"prompt_tokens_details": {"cached_tokens": 64}}});
        let h = handoff(answer.to_string().as_bytes(), "10.0.0.1:8000").unwrap();
        assert_eq!((h.kv_transfer_params["tp_size"].clone(), h.cached_tokens), (json!(1), 64));
        let d = decode_body(body(json!({"model": "m", "stream": true})), &h);
        assert_eq!(d["kv_transfer_params"], answer["kv_transfer_params"]);
        assert_eq!(d["stream"], json!(true));
        for bad in [json!({"echo": "secret prompt"}), json!({"kv_transfer_params": null})] {
            let e = handoff(bad.to_string().as_bytes(), "p").unwrap_err();
            assert_eq!(e.code(), "invalid_prefill_handoff");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }
}
