//! A request's token ids, as the engine tokenizes it: vLLM's `render` endpoints
//! (vllm-project/vllm:vllm/entrypoints/scale_out/render/api_router.py), served by `vllm serve` itself or
//! by a GPU-less `vllm launch render` sidecar. llm-d's `token-producer` asks the same endpoints
//! (llm-d/llm-d-router:pkg/tokenization), and so does Dynamo's standalone EPP (`vllm-render`).
//!
//! The request body goes as received: render takes the same `ChatCompletionRequest` or
//! `CompletionRequest` the engine would, so the chat template, tools and special tokens are applied exactly
//! as the engine will apply them, which no estimate can match. Chat render answers one object with
//! `token_ids`; completions render answers a list, one per prompt, of which the first is used.

use std::time::Duration;

use serde::Deserialize;

/// `vllm` of `token-producer`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderConfig {
    /// The render server's base URL (`http://render:8000`).
    pub url: String,
    /// Per call (llm-d's default 5 s).
    pub timeout: Duration,
    /// The largest response read (Dynamo's cap: 16 MiB).
    pub max_response_bytes: usize,
}

impl RenderConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), timeout: Duration::from_secs(5), max_response_bytes: 16 << 20 }
    }
}

/// Why a request has no token ids.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("render request failed: {0}")]
    Request(String),
    #[error("render answered HTTP {0}")]
    Status(u16),
    #[error("render response over {0} bytes")]
    TooLarge(usize),
    #[error("render response is not a token list: {0}")]
    Body(String),
    #[error("render timed out after {0:?}")]
    Timeout(Duration),
    #[error("building the HTTP client: {0}")]
    Client(String),
}

/// Which API the body belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderApi {
    ChatCompletions,
    Completions,
}

/// The client, shared by every request.
#[derive(Debug)]
pub struct RenderClient {
    client: reqwest::Client,
    config: RenderConfig,
    chat_url: String,
    completions_url: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Rendered {
    One { token_ids: Vec<u32> },
    Many(Vec<Tokens>),
}

#[derive(Deserialize)]
struct Tokens {
    token_ids: Vec<u32>,
}

impl RenderClient {
    pub fn new(config: RenderConfig) -> Result<Self, RenderError> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| RenderError::Client(e.to_string()))?;
        let base = config.url.trim_end_matches('/');
        let chat_url = format!("{base}/v1/chat/completions/render");
        let completions_url = format!("{base}/v1/completions/render");
        Ok(Self { client, config, chat_url, completions_url })
    }

    pub fn config(&self) -> &RenderConfig {
        &self.config
    }

    /// The token ids of `body`, a request of `api`.
    pub async fn tokens(&self, api: RenderApi, body: bytes::Bytes) -> Result<Vec<u32>, RenderError> {
        let timeout = self.config.timeout;
        tokio::time::timeout(timeout, self.call(api, body))
            .await
            .map_err(|_| RenderError::Timeout(timeout))?
    }

    async fn call(&self, api: RenderApi, body: bytes::Bytes) -> Result<Vec<u32>, RenderError> {
        let url = match api {
            RenderApi::ChatCompletions => &self.chat_url,
            RenderApi::Completions => &self.completions_url,
        };
        let failed = |e: reqwest::Error| RenderError::Request(e.to_string());
        let mut response = self
            .client
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(failed)?;
        if !response.status().is_success() {
            return Err(RenderError::Status(response.status().as_u16()));
        }
        let mut read = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if read.len() + chunk.len() > self.config.max_response_bytes {
                return Err(RenderError::TooLarge(self.config.max_response_bytes));
            }
            read.extend_from_slice(&chunk);
        }
        parse_rendered(&read)
    }
}

/// The token ids of a render response (an object, or a list whose first entry is used).
pub fn parse_rendered(body: &[u8]) -> Result<Vec<u32>, RenderError> {
    match serde_json::from_slice::<Rendered>(body).map_err(|e| RenderError::Body(e.to_string()))? {
        Rendered::One { token_ids } => Ok(token_ids),
        Rendered::Many(list) => list
            .into_iter()
            .next()
            .map(|t| t.token_ids)
            .ok_or_else(|| RenderError::Body("an empty list".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_response_shapes_and_bad_bodies() {
        let chat = br#"{"request_id":"x","token_ids":[1,2,3],"features":null}"#;
        assert_eq!(parse_rendered(chat).expect("chat"), [1, 2, 3]);
        let completions = br#"[{"request_id":"a","token_ids":[7,8]},{"request_id":"b","token_ids":[9]}]"#;
        assert_eq!(parse_rendered(completions).expect("completions"), [7, 8]);
        assert!(matches!(parse_rendered(b"[]"), Err(RenderError::Body(_))));
        assert!(matches!(parse_rendered(br#"{"token_ids":[-1]}"#), Err(RenderError::Body(_))));
        assert!(matches!(parse_rendered(b"<html>"), Err(RenderError::Body(_))));
    }
}
