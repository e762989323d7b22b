//! `/v1/completions` and `/v1/chat/completions`: JSON and SSE responses shaped like vLLM's, driven by
//! the replica's engine, with the injected faults applied.
//!
//! The prompt is tokenized from the raw JSON of `prompt` / `messages` (found by epp's own
//! [`parse_request`]) with the simulator's 4-bytes-per-token tokenizer, so a shared conversation prefix
//! is a shared token prefix and hits the simulated prefix cache. Output text is deterministic filler.

use std::fmt::Write;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use futures::stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::engine::{tokenize, AddRequestError, FinishReason};
use super::pd::{self, Leg};
use super::replica::{Delivery, RequestGuard};
use super::server::{error_response, param_error_response, respond, unix_now, ServerState};
use epp::request::{parse_request, ApiKind, ParsedRequest};

const FILLER: &[&str] = &[
    " the", " model", " server", " routes", " each", " request", " to", " a", " replica", " with", " cache",
    " and", " queue", " of", " tokens", " today",
];

/// The fields [`parse_request`] does not read.
#[derive(Deserialize, Default)]
struct StreamFields {
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// P/D ([`super::pd`]).
    #[serde(default)]
    kv_transfer_params: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// What the response needs once the engine has finished.
struct Answer {
    chat: bool,
    id: String,
    model: String,
    /// `model` as a JSON string literal, for the hand-formatted SSE chunks.
    model_json: String,
    created: u64,
    prompt_tokens: usize,
    request_id: u64,
    /// Whether usage details the cached prompt tokens (vLLM's `--enable-prompt-tokens-details`).
    prompt_tokens_details: bool,
    /// The prefill leg's `kv_transfer_params` (P/D), added to the JSON answer.
    handoff: Option<serde_json::Value>,
}

impl Answer {
    fn usage(&self, completion_tokens: u32, cached_tokens: u32) -> serde_json::Value {
        let details = self.prompt_tokens_details.then(|| json!({"cached_tokens": cached_tokens}));
        json!({"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + completion_tokens as usize,
               "completion_tokens": completion_tokens, "prompt_tokens_details": details})
    }

    fn filler(&self, index: u32) -> &'static str {
        let mix = self.request_id.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(u64::from(index) * 31);
        FILLER[(mix >> 7) as usize % FILLER.len()]
    }

    /// One SSE event with `choices[0]` set to `choice` (a JSON object body without braces).
    fn chunk(&self, choice: &str) -> Bytes {
        let object = if self.chat { "chat.completion.chunk" } else { "text_completion" };
        let mut out = String::with_capacity(160 + choice.len());
        let _ = write!(
            out,
            "data: {{\"id\":\"{}\",\"object\":\"{object}\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,{choice}}}]}}\n\n",
            self.id, self.created, self.model_json
        );
        Bytes::from(out)
    }

    fn token_chunk(&self, text: &str) -> Bytes {
        if self.chat {
            self.chunk(&format!(
                "\"delta\":{{\"content\":\"{text}\"}},\"logprobs\":null,\"finish_reason\":null"
            ))
        } else {
            self.chunk(&format!(
                "\"text\":\"{text}\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null"
            ))
        }
    }

    fn final_chunk(&self, reason: FinishReason) -> Bytes {
        let reason = reason.as_str();
        if self.chat {
            self.chunk(&format!(
                "\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"{reason}\",\"stop_reason\":null"
            ))
        } else {
            self.chunk(&format!(
                "\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"{reason}\",\"stop_reason\":null"
            ))
        }
    }

    fn usage_chunk(&self, completion_tokens: u32, cached_tokens: u32) -> Bytes {
        let object = if self.chat { "chat.completion.chunk" } else { "text_completion" };
        let body = json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
                          "choices": [], "usage": self.usage(completion_tokens, cached_tokens)});
        Bytes::from(format!("data: {body}\n\n"))
    }
}

/// Handles one generation request end to end.
pub(crate) async fn generate(state: &Arc<ServerState>, path: &str, body: Bytes) -> Response {
    let options = &state.options;
    if state.chance(options.faults.error_rate) {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "simulated server error",
        );
    }
    let parsed = match parse_request(path, &body) {
        Ok(parsed) => parsed,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "BadRequestError", e.message),
    };
    let lora = if parsed.model == options.model {
        None
    } else if options.lora_modules.contains(&parsed.model) {
        Some(parsed.model.clone())
    } else {
        let message = format!("The model `{}` does not exist.", parsed.model);
        return error_response(StatusCode::NOT_FOUND, "NotFoundError", message);
    };
    let max_tokens = match parsed.max_tokens {
        Some(0) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "BadRequestError",
                "max_tokens must be at least 1",
            )
        }
        Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        None => options.default_max_tokens,
    };
    let fields = serde_json::from_slice::<StreamFields>(&body).unwrap_or_default();
    let include_usage = fields.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
    let prompt = prompt_tokens(options, &parsed, &body);
    let prompt_tokens = prompt.len().max(1);
    let (gbps, per_token) = (options.kv_transfer_gbps, options.kv_bytes_per_token);
    let leg = match pd::leg(fields.kv_transfer_params.as_ref(), prompt_tokens, per_token, gbps) {
        Ok(Leg::Prefill) if parsed.stream => {
            let message = "a prefill leg (kv_transfer_params.do_remote_decode) must not stream";
            return error_response(StatusCode::BAD_REQUEST, "BadRequestError", message);
        }
        Ok(leg) => leg,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, "BadRequestError", message),
    };
    let max_tokens =
        match fit_context(prompt_tokens, max_tokens, parsed.max_tokens.is_some(), state.max_model_len) {
            Ok(max_tokens) => max_tokens,
            Err(refusal) => return *refusal,
        };

    if state.chance(options.faults.latency_spike_rate) {
        let spike = options.faults.latency_spike_ms as f64 / 1000.0;
        tokio::time::sleep(state.replica.real_duration(spike)).await;
    }
    if let Leg::Decode { transfer_seconds } = leg {
        tokio::time::sleep(state.replica.real_duration(transfer_seconds)).await;
    }
    let transferred = matches!(leg, Leg::Decode { .. });
    let natural_stop = parsed.max_tokens.is_none();
    let (guard, events) = match state.replica.submit(prompt, max_tokens, lora, natural_stop, transferred) {
        Ok(submitted) => submitted,
        Err(AddRequestError::TooLong { prompt, output, .. }) => {
            let message = format!(
                "This model's maximum context length is {} tokens. However, you requested {} tokens ({prompt} in \
                 the messages, {output} in the completion). Please reduce the length of the messages or completion.",
                state.max_model_len,
                prompt + output as usize
            );
            return error_response(StatusCode::BAD_REQUEST, "BadRequestError", message);
        }
        Err(e) => {
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", e.to_string())
        }
    };
    let chat = parsed.api == ApiKind::ChatCompletions;
    let id = format!("{}-{}-{}", if chat { "chatcmpl" } else { "cmpl" }, state.replica.name, guard.id());
    let block_size = state.replica.block_size();
    let handoff =
        (leg == Leg::Prefill).then(|| pd::handoff(&state.replica.name, &id, prompt_tokens, block_size));
    let answer = Answer {
        chat,
        id,
        model_json: serde_json::to_string(&parsed.model).unwrap_or_else(|_| "\"\"".into()),
        model: parsed.model,
        created: unix_now() as u64,
        prompt_tokens,
        request_id: guard.id(),
        prompt_tokens_details: options.prompt_tokens_details,
        handoff,
    };
    if parsed.stream {
        let die_after = state.chance(options.faults.die_mid_stream_rate).then(|| state.random_in(1, 4));
        stream_response(answer, guard, events, include_usage, die_after)
    } else {
        json_response(answer, guard, events).await
    }
}

/// vLLM's context-length rules (as vLLM 0.32 answers: tests/fixtures/vllm-real-errors.txt): a prompt
/// that leaves no room for output, or an explicit `max_tokens` above `max_model_len`, is a 400 naming the
/// parameter; otherwise the output is cut to what fits (the request succeeds, finishing on "length").
fn fit_context(
    prompt_tokens: usize,
    max_tokens: u32,
    explicit: bool,
    max_model_len: usize,
) -> Result<u32, Box<Response>> {
    let bad_request = |param: &str, value: usize, message: String| {
        let message = format!("{message} (parameter={param}, value={value})");
        Box::new(param_error_response(StatusCode::BAD_REQUEST, "BadRequestError", param, message))
    };
    if prompt_tokens >= max_model_len {
        let seen = prompt_tokens.min(max_model_len + 1);
        return Err(bad_request(
            "input_tokens",
            seen,
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, your prompt contains at \
                 least {seen} input tokens, which exceeds this limit even without any output tokens. Please \
                 reduce the length of the input prompt."
            ),
        ));
    }
    if explicit && max_tokens as usize > max_model_len {
        return Err(bad_request(
            "max_tokens",
            max_tokens as usize,
            format!(
                "max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. Please request \
                 fewer output tokens."
            ),
        ));
    }
    let room = u32::try_from(max_model_len - prompt_tokens).unwrap_or(u32::MAX);
    Ok(max_tokens.min(room))
}

/// vLLM's render endpoints (`/v1/completions/render`, `/v1/chat/completions/render`): the token ids the
/// engine would compute for the request, exactly as [`generate`] tokenizes it. Chat answers one object,
/// completions a list (one entry per prompt; the simulator takes the prompt whole).
pub(crate) fn render(state: &ServerState, path: &str, body: &[u8]) -> Response {
    let Some(api_path) = path.strip_suffix("/render") else {
        return error_response(StatusCode::NOT_FOUND, "NotFoundError", format!("no route for {path}"));
    };
    let parsed = match parse_request(api_path, body) {
        Ok(parsed) => parsed,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "BadRequestError", e.message),
    };
    let rendered = json!({"request_id": "render", "token_ids": prompt_tokens(&state.options, &parsed, body)});
    let answer = if api_path == "/v1/completions" { json!([rendered]) } else { rendered };
    super::server::respond(StatusCode::OK, "application/json", answer.to_string())
}

/// The prompt's tokens: the model's tokenizer's when `--tokenizer-dir` gives one and it can; else the
/// token ids themselves when given as a flat array, else the stand-in's over the JSON text.
fn prompt_tokens(options: &super::server::ServeOptions, parsed: &ParsedRequest, body: &[u8]) -> Vec<u32> {
    if let Some(ids) = options.tokenizer.as_ref().and_then(|model| model.prompt_ids(parsed, body)) {
        return ids;
    }
    let raw = parsed.prefix_bytes(body);
    if parsed.prompt_token_ids.is_some() {
        if let Ok(ids) = serde_json::from_slice::<Vec<u32>>(raw) {
            return ids;
        }
    }
    tokenize(&String::from_utf8_lossy(raw))
}

async fn json_response(
    answer: Answer,
    mut guard: RequestGuard,
    mut events: mpsc::UnboundedReceiver<Delivery>,
) -> Response {
    let mut text = String::new();
    let mut cached_tokens = 0;
    let mut produced = 0;
    while let Some(delivery) = events.recv().await {
        match delivery {
            Delivery::First { cached_tokens: cached } => {
                cached_tokens = cached;
                text.push_str(answer.filler(0));
                produced = 1;
            }
            Delivery::Token => {
                text.push_str(answer.filler(produced));
                produced += 1;
            }
            Delivery::Finished { output_tokens, reason } => {
                guard.finish();
                let usage = answer.usage(output_tokens, cached_tokens);
                let model = &answer.model;
                let body = if answer.chat {
                    json!({"id": answer.id, "object": "chat.completion", "created": answer.created, "model": model,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                                        "logprobs": null, "finish_reason": reason.as_str(), "stop_reason": null}],
                           "usage": usage})
                } else {
                    json!({"id": answer.id, "object": "text_completion", "created": answer.created, "model": model,
                           "choices": [{"index": 0, "text": text, "logprobs": null,
                                        "finish_reason": reason.as_str(), "stop_reason": null}],
                           "usage": usage})
                };
                let mut body = body;
                if let (Some(handoff), Some(fields)) = (answer.handoff.clone(), body.as_object_mut()) {
                    fields.insert("kv_transfer_params".into(), handoff);
                }
                return respond(StatusCode::OK, "application/json", body.to_string());
            }
        }
    }
    error_response(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "request was aborted")
}

/// State carried between SSE events.
struct Streaming {
    answer: Answer,
    guard: RequestGuard,
    events: mpsc::UnboundedReceiver<Delivery>,
    include_usage: bool,
    die_after: Option<u32>,
    produced: u32,
    cached_tokens: u32,
    done: bool,
    /// A chat stream's opening chunk (the assistant role, no content), sent with the first token.
    opening: Option<Bytes>,
}

fn stream_response(
    answer: Answer,
    guard: RequestGuard,
    events: mpsc::UnboundedReceiver<Delivery>,
    include_usage: bool,
    die_after: Option<u32>,
) -> Response {
    let opening = answer.chat.then(|| {
        answer.chunk(
            "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null",
        )
    });
    let state = Streaming {
        answer,
        guard,
        events,
        include_usage,
        die_after,
        produced: 0,
        cached_tokens: 0,
        done: false,
        opening,
    };
    let body = stream::unfold(state, next_event);
    let mut response = respond(StatusCode::OK, "text/event-stream", Body::from_stream(body));
    response.headers_mut().insert("cache-control", axum::http::HeaderValue::from_static("no-cache"));
    response
}

async fn next_event(mut s: Streaming) -> Option<(Result<Bytes, std::io::Error>, Streaming)> {
    if s.done {
        return None;
    }
    let Some(delivery) = s.events.recv().await else {
        // The engine dropped the request (cannot happen while the guard lives); end the stream.
        s.done = true;
        return Some((Err(std::io::Error::other("request aborted")), s));
    };
    if s.die_after.is_some_and(|n| s.produced >= n) {
        // Simulated crash: the connection closes mid-stream; the guard's drop aborts the request.
        s.done = true;
        return Some((Err(std::io::Error::other("simulated mid-stream failure")), s));
    }
    let bytes = match delivery {
        Delivery::First { cached_tokens } => {
            s.cached_tokens = cached_tokens;
            s.produced = 1;
            s.answer.token_chunk(s.answer.filler(0))
        }
        Delivery::Token => {
            let chunk = s.answer.token_chunk(s.answer.filler(s.produced));
            s.produced += 1;
            chunk
        }
        Delivery::Finished { output_tokens, reason } => {
            s.guard.finish();
            s.done = true;
            let mut tail = s.answer.final_chunk(reason).to_vec();
            if s.include_usage {
                tail.extend_from_slice(&s.answer.usage_chunk(output_tokens, s.cached_tokens));
            }
            tail.extend_from_slice(b"data: [DONE]\n\n");
            Bytes::from(tail)
        }
    };
    // vLLM sends a chat stream's role chunk in the same iteration as the first token, after the prefill
    // (vllm-project/vllm:vllm/entrypoints/openai/serving_chat.py, `first_iteration`), so the first bytes a
    // gateway sees mark the first token, which is what epp times as TTFT.
    let bytes = match s.opening.take() {
        Some(opening) => Bytes::from([opening.as_ref(), bytes.as_ref()].concat()),
        None => bytes,
    };
    Some((Ok(bytes), s))
}
