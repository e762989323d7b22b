//! The OpenAI request/response domain. Requests: one pass over the body that finds what routing needs
//! (model and where its bytes are, stream flag, max tokens, the prompt's bytes for prefix hashing) without
//! building a document tree or copying the prompt; the model splice for rewrites; the token estimate.
//! Responses ([`ResponseReader`]): SSE detection, the `usage` they carry, the model name rewritten back.

mod headers;
mod openai;
mod policies;
mod prompt;
mod response;
mod rewrite;
mod slo;
mod tokens;
mod usage;

use std::ops::Range;

pub use headers::Headers;
pub use openai::{api_kind_for_path, is_inference_create, parse_request, parse_request_with_serde};
pub use policies::{Policies, PolicyStore, WeightedRewrite};
pub use response::{ResponseReader, MAX_USAGE_BUFFER};
pub use rewrite::{rewrite_response_model, splice_model};
pub use slo::{Slo, SLO_TPOT_HEADERS, SLO_TTFT_HEADERS};
pub use tokens::{TokenEstimator, TokenEstimatorError, TokenEstimatorParams};
pub use usage::{parse_usage_json, Usage, UsageScanner, MAX_REPORTED_TOKENS};

/// Which OpenAI API a request is for, chosen by path suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKind {
    Completions,
    ChatCompletions,
    Embeddings,
    Responses,
    Conversations,
}

/// What routing needs from a request body. Spans index into the body bytes the request was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRequest {
    pub api: ApiKind,
    /// The `model` value, unescaped.
    pub model: String,
    /// Byte range of the `model` JSON string literal, quotes included: what a rewrite replaces.
    pub model_span: Range<usize>,
    /// `"stream": true`.
    pub stream: bool,
    /// `max_tokens` / `max_completion_tokens` / `max_output_tokens`, when given.
    pub max_tokens: Option<u64>,
    /// Byte range of the raw JSON value hashed for prefix affinity (`messages`, `prompt`, `input`, ...).
    pub prefix_span: Range<usize>,
    /// Number of token IDs when the prompt was given as token IDs.
    pub prompt_token_ids: Option<usize>,
    /// `cache_salt`, when given: it separates prefix-cache namespaces.
    pub cache_salt: Option<String>,
}

impl ParsedRequest {
    /// The bytes hashed for prefix affinity, borrowed from the body.
    pub fn prefix_bytes<'a>(&self, body: &'a [u8]) -> &'a [u8] {
        body.get(self.prefix_span.clone()).unwrap_or(&[])
    }
}
