//! OpenAI request parsing in one pass.
//!
//! The Go EPP decodes every body twice (into a map and into a typed struct) and copies the prompt each
//! time; on a 220 KB prompt that is milliseconds per request. Here one structural walk ([`scan`])
//! validates the body and locates the fields routing needs, skipping the long strings 64 bytes at a time
//! ([`blocks`]); nothing is copied except the short model name and cache salt. Spans are byte offsets of
//! the located values inside the body, so a later rewrite can splice the body instead of
//! re-serialising it. A body the walk does not handle exactly as serde_json would (it says which) is
//! parsed by serde_json instead, into borrowed [`RawValue`]s, so the two agree on every body and every
//! error message is serde_json's.
//!
//! Duplicate keys: a body that repeats a field this parser reads (`model`, `messages`, `stream`, ...) is
//! rejected as invalid, so the model we route on is always the one a rewrite replaces and the one the
//! model server sees. Repeated unknown fields are left to the model server.

use std::ops::Range;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::prompt::{classify, PromptShape, ShapeError};
use super::{ApiKind, ParsedRequest};
use crate::error::RequestError;
use scan::{scan_fields, Field, FieldValues};

mod blocks;
mod scan;

/// The top-level fields epp reads, for serde_json; everything else is skipped by serde.
#[derive(Deserialize)]
struct RequestFields<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_completion_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_output_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    items: Option<&'a RawValue>,
    #[serde(borrow)]
    cache_salt: Option<&'a RawValue>,
}

impl<'a> RequestFields<'a> {
    /// The same values as [`scan_fields`] gives, in its order.
    fn values(&self) -> FieldValues<'a> {
        FieldValues(
            [
                self.model,
                self.stream,
                self.max_tokens,
                self.max_completion_tokens,
                self.max_output_tokens,
                self.messages,
                self.prompt,
                self.input,
                self.items,
                self.cache_salt,
            ]
            .map(|raw| raw.map(RawValue::get)),
        )
    }
}

/// Which OpenAI API a request path is for, by suffix (a query string is ignored). Anything unknown is
/// treated as completions, as the Go EPP does for backward compatibility.
/// `path` without its query, fragment and trailing slash.
fn route_of(path: &str) -> &str {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    path.strip_suffix('/').unwrap_or(path)
}

/// Whether a POST to `path` creates an inference (and so must carry a body): completions, chat,
/// embeddings, responses, conversations. Other POSTs (e.g. `/v1/responses/{id}/cancel`) may be empty.
pub fn is_inference_create(path: &str) -> bool {
    let path = route_of(path);
    ["/completions", "/embeddings", "/responses", "/conversations"].iter().any(|end| path.ends_with(end))
}

pub fn api_kind_for_path(path: &str) -> ApiKind {
    let path = route_of(path);
    // `/v1/conversations/{id}/items` adds items to a conversation and carries `items` like a create.
    let conversation_items = path.ends_with("/items") && path.contains("/conversations/");
    if path.ends_with("/conversations") || conversation_items {
        ApiKind::Conversations
    } else if path.ends_with("/responses") {
        ApiKind::Responses
    } else if path.ends_with("/chat/completions") {
        ApiKind::ChatCompletions
    } else if path.ends_with("/embeddings") {
        ApiKind::Embeddings
    } else {
        ApiKind::Completions
    }
}

/// Parses an OpenAI request body for the API chosen by `path`.
///
/// Errors are all `BadRequest` (HTTP 400) except an internal consistency check that cannot fail on
/// bodies serde_json accepted.
pub fn parse_request(path: &str, body: &[u8]) -> Result<ParsedRequest, RequestError> {
    parse(path, body, true)
}

/// [`parse_request`] with serde_json alone, as it runs for a body the fast walk leaves to it. Public
/// for the fuzz target that checks both paths agree.
#[doc(hidden)]
pub fn parse_request_with_serde(path: &str, body: &[u8]) -> Result<ParsedRequest, RequestError> {
    parse(path, body, false)
}

/// Locates the fields with the fast walk first when `walk_first`, else (or where it declines the body)
/// with serde_json, then reads them.
fn parse(path: &str, body: &[u8], walk_first: bool) -> Result<ParsedRequest, RequestError> {
    if first_non_whitespace(body) != Some(b'{') {
        return Err(not_an_object(body));
    }
    let values = match walk_first.then(|| scan_fields(body)).flatten() {
        Some(values) => values,
        None => serde_json::from_slice::<RequestFields<'_>>(body)
            .map_err(|e| RequestError::bad_request(format!("error unmarshaling request body: {e}")))?
            .values(),
    };
    read_fields(api_kind_for_path(path), body, &values)
}

/// Reads what routing needs from the located fields.
fn read_fields(api: ApiKind, body: &[u8], fields: &FieldValues<'_>) -> Result<ParsedRequest, RequestError> {
    let model_raw = fields.get(Field::Model).ok_or_else(model_not_found)?;
    // Only a JSON string is a model name; serde unescapes it (`\u00e9`, `\/`, ...). Anything else is "not
    // found", as in the Go EPP; a string that does not decode (a lone surrogate such as "\ud800") says so.
    let model: String = serde_json::from_str(model_raw).map_err(|e| {
        if model_raw.starts_with('"') {
            // Echo at most 64 characters of what the client sent.
            let shown: String = model_raw.chars().take(64).collect();
            RequestError::bad_request(format!("invalid model name {shown}: {e}"))
        } else {
            model_not_found()
        }
    })?;
    let model_span = span_of(body, model_raw)?;

    let stream = match fields.get(Field::Stream) {
        None => false,
        Some("true") => true,
        Some("false") => false,
        Some(_) => return Err(RequestError::bad_request("stream must be a boolean")),
    };

    let max_tokens = match api {
        // `max_completion_tokens` superseded `max_tokens` in chat; both are still accepted.
        ApiKind::ChatCompletions => {
            match non_negative_int("max_completion_tokens", fields.get(Field::MaxCompletionTokens))? {
                Some(n) => Some(n),
                None => non_negative_int("max_tokens", fields.get(Field::MaxTokens))?,
            }
        }
        ApiKind::Completions => non_negative_int("max_tokens", fields.get(Field::MaxTokens))?,
        ApiKind::Responses => non_negative_int("max_output_tokens", fields.get(Field::MaxOutputTokens))?,
        ApiKind::Embeddings | ApiKind::Conversations => None,
    };

    let (prefix_raw, prompt_token_ids) = match api {
        ApiKind::ChatCompletions => (non_empty_array("messages", fields.get(Field::Messages))?, None),
        ApiKind::Conversations => (non_empty_array("items", fields.get(Field::Items))?, None),
        ApiKind::Responses => (string_or_array("input", fields.get(Field::Input))?, None),
        ApiKind::Completions => prompt_like("prompt", fields.get(Field::Prompt))?,
        ApiKind::Embeddings => prompt_like("input", fields.get(Field::Input))?,
    };
    let prefix_span = span_of(body, prefix_raw)?;

    let cache_salt = match fields.get(Field::CacheSalt) {
        None => None,
        Some(raw) => Some(
            serde_json::from_str::<String>(raw)
                .map_err(|_| RequestError::bad_request("cache_salt must be a string"))?,
        ),
    };

    Ok(ParsedRequest {
        api,
        model,
        model_span,
        stream,
        max_tokens,
        prefix_span,
        prompt_token_ids,
        cache_salt,
    })
}

fn model_not_found() -> RequestError {
    RequestError::bad_request("model not found in request body")
}

fn not_found(field: &str) -> RequestError {
    RequestError::bad_request(format!("{field} not found in request body"))
}

/// JSON insignificant whitespace is exactly these four bytes.
fn is_json_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn first_non_whitespace(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|&b| !is_json_whitespace(b))
}

/// The error for a body that does not start with `{`: a JSON error if it is not JSON at all, otherwise
/// a plain "not an object". Only the error path pays for the second look.
fn not_an_object(body: &[u8]) -> RequestError {
    match serde_json::from_slice::<IgnoredAny>(body) {
        Err(e) => RequestError::bad_request(format!("error unmarshaling request body: {e}")),
        Ok(_) => RequestError::bad_request("request body must be a JSON object"),
    }
}

/// The byte range of a value borrowed from `body`.
fn span_of(body: &[u8], text: &str) -> Result<Range<usize>, RequestError> {
    let start = (text.as_ptr() as usize).checked_sub(body.as_ptr() as usize);
    match start {
        Some(start) if start.checked_add(text.len()).is_some_and(|end| end <= body.len()) => {
            Ok(start..start + text.len())
        }
        _ => Err(RequestError::internal("parsed value does not lie within the request body")),
    }
}

/// A token limit: absent or `null` is `None`; anything but a non-negative integer is a 400 naming the
/// field (vLLM rejects those too, and a bad limit would skew the token estimate).
fn non_negative_int(field: &str, raw: Option<&str>) -> Result<Option<u64>, RequestError> {
    let Some(raw) = raw else { return Ok(None) };
    serde_json::from_str::<u64>(raw)
        .map(Some)
        .map_err(|_| RequestError::bad_request(format!("{field} must be a non-negative integer")))
}

/// First byte of a value and whether, for an array or string, it holds anything.
fn raw_kind(raw: &str) -> (u8, bool) {
    let bytes = raw.as_bytes();
    let first = bytes.first().copied().unwrap_or(b'n');
    let non_empty = match first {
        b'"' => bytes.len() > 2,
        b'[' => first_non_whitespace(&bytes[1..]) != Some(b']'),
        _ => false,
    };
    (first, non_empty)
}

/// `messages` / `items`: an array with at least one element. Elements are left for the model server to
/// validate, so structured content, tool calls and future message kinds pass untouched.
fn non_empty_array<'a>(field: &str, raw: Option<&'a str>) -> Result<&'a str, RequestError> {
    let raw = raw.ok_or_else(|| not_found(field))?;
    match raw_kind(raw) {
        (b'[', true) => Ok(raw),
        (b'[', false) => Err(not_found(field)),
        _ => Err(RequestError::bad_request(format!("{field} must be an array"))),
    }
}

/// Responses-API `input`: a non-empty string or a non-empty array of input items.
fn string_or_array<'a>(field: &str, raw: Option<&'a str>) -> Result<&'a str, RequestError> {
    let raw = raw.ok_or_else(|| not_found(field))?;
    match raw_kind(raw) {
        (b'"' | b'[', true) => Ok(raw),
        (b'"' | b'[', false) => Err(not_found(field)),
        _ => Err(RequestError::bad_request(format!("{field} must be a string or an array"))),
    }
}

/// Completions `prompt` / embeddings `input`: non-empty string, strings, token IDs or token-ID lists.
fn prompt_like<'a>(field: &str, raw: Option<&'a str>) -> Result<(&'a str, Option<usize>), RequestError> {
    let raw = raw.ok_or_else(|| not_found(field))?;
    let shape: PromptShape = classify(raw).map_err(|e| {
        RequestError::bad_request(match e {
            ShapeError::NotStringOrArray => {
                format!("{field} must be a string, an array of strings, or an array of token IDs")
            }
            ShapeError::Mixed => format!("{field}: mixed types in array"),
            ShapeError::BadElement => format!(
                "{field}: array elements must be strings, token IDs (integers 0 to 4294967295) \
                 or arrays of token IDs"
            ),
        })
    })?;
    if shape.is_empty() {
        return Err(not_found(field));
    }
    Ok((raw, shape.token_ids()))
}

#[cfg(test)]
mod tests;
