//! The OpenAI API of a fake backend: completions and chat completions (plain JSON or SSE streaming) and
//! embeddings.
//!
//! Why it looks like this: epp parses request bodies and, on the response path, reads `usage` (from the
//! JSON body or the final SSE chunk when `stream_options.include_usage` is set), so the shapes follow
//! vLLM's OpenAI server; the content is a deterministic `tok0 tok1 …` so tests can assert on it.

use std::convert::Infallible;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use tokio_stream::wrappers::ReceiverStream;

use crate::{error_response, json_response, respond, unix_now, Backend, InFlight};

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Kind {
    Completion,
    Chat,
}

/// Parses an API body; the error is the message for a 400.
fn parse_object(body: &Bytes) -> Result<Value, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("request body must be a JSON object".to_string()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

fn count_words(value: &Value) -> u64 {
    match value {
        Value::String(text) => text.split_whitespace().count() as u64,
        Value::Array(items) if items.iter().all(Value::is_number) => items.len() as u64,
        Value::Array(items) => items.iter().map(count_words).sum(),
        Value::Object(part) => part.get("text").or_else(|| part.get("content")).map_or(0, count_words),
        _ => 0,
    }
}

/// A stand-in token count: whitespace-separated words (or token ids) in the prompt, at least 1.
fn prompt_tokens(kind: Kind, request: &Value) -> u64 {
    let source = match kind {
        Kind::Completion => request.get("prompt"),
        Kind::Chat => request.get("messages"),
    };
    source.map_or(0, count_words).max(1)
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn token_text(index: u32) -> String {
    format!("tok{index} ")
}

pub(crate) fn generate(backend: &Backend, kind: Kind, body: &Bytes, in_flight: InFlight) -> Response {
    let request = match parse_object(body) {
        Ok(request) => request,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, message),
    };
    let model = request.get("model").and_then(Value::as_str).unwrap_or(&backend.model).to_string();
    let prompt = prompt_tokens(kind, &request);
    let completion = u64::from(backend.chunks);
    let count = backend.api_requests.load(Ordering::SeqCst);
    let (id, object) = match kind {
        Kind::Completion => (format!("cmpl-{}-{count}", backend.id), "text_completion"),
        Kind::Chat => (format!("chatcmpl-{}-{count}", backend.id), "chat.completion"),
    };
    let created = unix_now();
    if request.get("stream").and_then(Value::as_bool) != Some(true) {
        let text: String = (0..backend.chunks).map(token_text).collect();
        let choice = match kind {
            Kind::Completion => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": "length"})
            }
            Kind::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": "length"}),
        };
        return json_response(
            StatusCode::OK,
            &json!({"id": id, "object": object, "created": created, "model": model,
                "choices": [choice], "usage": usage(prompt, completion)}),
        );
    }
    let include_usage =
        request.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    let chunk_object = if kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" };
    let (chunks, delay) = (backend.chunks, backend.chunk_delay);
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(4);
    tokio::spawn(async move {
        // Holding the guard here keeps the request counted as running until the stream ends.
        let _in_flight = in_flight;
        let sse = |value: &Value| Ok(Bytes::from(format!("data: {value}\n\n")));
        for index in 0..chunks {
            if index > 0 {
                tokio::time::sleep(delay).await;
            }
            let finish = if index + 1 == chunks { json!("length") } else { Value::Null };
            let choice = match kind {
                Kind::Completion => {
                    json!({"index": 0, "text": token_text(index), "logprobs": null, "finish_reason": finish})
                }
                Kind::Chat => json!({"index": 0, "delta": if index == 0 {
                        json!({"role": "assistant", "content": token_text(index)})
                    } else {
                        json!({"content": token_text(index)})
                    }, "finish_reason": finish}),
            };
            let chunk = json!({"id": id, "object": chunk_object, "created": created, "model": model,
                "choices": [choice]});
            if sender.send(sse(&chunk)).await.is_err() {
                return; // client went away
            }
        }
        if include_usage {
            let chunk = json!({"id": id, "object": chunk_object, "created": created, "model": model,
                "choices": [], "usage": usage(prompt, completion)});
            if sender.send(sse(&chunk)).await.is_err() {
                return;
            }
        }
        let _ = sender.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
    });
    let mut response =
        respond(StatusCode::OK, "text/event-stream", Body::from_stream(ReceiverStream::new(receiver)));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

pub(crate) fn embeddings(backend: &Backend, body: &Bytes) -> Response {
    let request = match parse_object(body) {
        Ok(request) => request,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, message),
    };
    let model = request.get("model").and_then(Value::as_str).unwrap_or(&backend.model);
    let input = request.get("input").unwrap_or(&Value::Null);
    let inputs = match input {
        Value::Array(items) if !items.iter().all(Value::is_number) => items.len(),
        _ => 1,
    };
    let data: Vec<Value> = (0..inputs)
        .map(|index| {
            let vector: Vec<f64> = (0..8).map(|d| ((index * 8 + d) % 10) as f64 / 10.0).collect();
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    let tokens = count_words(input).max(1);
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_tokens_count_words_in_prompts_and_messages() {
        assert_eq!(prompt_tokens(Kind::Completion, &json!({"prompt": "a b  c"})), 3);
        assert_eq!(prompt_tokens(Kind::Completion, &json!({"prompt": [1, 2, 3, 4]})), 4);
        let chat = json!({"messages": [{"role": "user", "content": "hi there"},
            {"role": "user", "content": [{"type": "text", "text": "one"}]}]});
        assert_eq!(prompt_tokens(Kind::Chat, &chat), 3);
        assert_eq!(prompt_tokens(Kind::Chat, &json!({})), 1);
    }

    #[test]
    fn bad_json_is_a_client_error() {
        assert!(parse_object(&Bytes::from_static(b"{not json")).is_err());
        assert!(parse_object(&Bytes::from_static(b"[1]")).is_err());
        assert!(parse_object(&Bytes::from_static(b"{}")).is_ok());
    }
}
