//! `token-producer` (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer):
//! each request's token ids, fetched before its scheduling cycle, for `precise-prefix-cache-producer`.
//!
//! Backends, as llm-d names them: `vllm` (the engine's render endpoints, [`crate::kvcache::RenderClient`])
//! or `estimate`, which produces no token ids here: llm-d's estimate (about 4 bytes a token) cannot match
//! an engine's blocks, so rather than index guesses, precise matching is skipped for the request (it scores
//! no prefix anywhere) and the failure is counted. `udsTokenizerConfig` (llm-d's tokenizer sidecar over a
//! Unix socket) is refused with an error saying to use `vllm`.
//!
//! Beyond llm-d: `tokenizerFile` (the model's `tokenizer.json`) tokenizes completions prompts in process
//! ([`crate::kvcache::LocalTokenizer`]); with `tokenizerConfigFile` (its `tokenizer_config.json`) chat
//! prompts are rendered from the model's chat template in process too ([`crate::kvcache::ChatTemplate`]),
//! and only what the template cannot render exactly goes to render; a prompt given as token ids is used
//! as it is, with no call at all.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Deserialize;

use super::param_checks;
use crate::kvcache::{
    completions_prompt, ChatPrompt, ChatTemplate, ContentFormat, LocalTokenizer, Prompt, RenderApi,
    RenderClient, RenderConfig,
};
use crate::request::ApiKind;
use crate::scheduling::{
    parse_params, BuiltPlugin, FactoryContext, KvCacheMetrics, PluginError, SchedulingRequest, TokenProducer,
};

pub(crate) const TYPE_NAME: &str = "token-producer";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    /// The model the tokenizer serves; informational here (the body goes to render as received).
    model_name: Option<String>,
    vllm: Option<VllmParams>,
    uds_tokenizer_config: Option<serde_json::Value>,
    estimate: Option<serde_json::Value>,
    /// epp's own: the model's `tokenizer.json`, for completions prompts.
    tokenizer_file: Option<String>,
    /// epp's own: the model's `tokenizer_config.json` (its chat template and special tokens), for chat
    /// prompts; needs `tokenizerFile`.
    tokenizer_config_file: Option<String>,
    /// epp's own: `auto` (default), `string` or `openai`, as vLLM's `--chat-template-content-format`.
    chat_template_content_format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VllmParams {
    url: String,
    /// Go duration (`5s`).
    timeout: Option<String>,
    /// Go duration for multimodal requests; accepted for compatibility (epp renders text only).
    mm_timeout: Option<String>,
    /// The largest render response read, in bytes (16 MiB by default, as Dynamo caps it).
    max_response_bytes: Option<usize>,
}

/// The producer: the model's tokenizer for completions prompts, a render client for the rest, or neither
/// (`estimate`).
#[derive(Debug)]
pub(crate) struct RequestTokenizer {
    client: Option<RenderClient>,
    local: Option<LocalTokenizer>,
    chat: Option<Arc<ChatTemplate>>,
    metrics: Arc<KvCacheMetrics>,
}

/// Bodies up to this size are rendered and tokenized in place, on the async worker, where the text
/// the model must see is within [`INLINE_MODEL_BYTES`] (the rest remembered): a chat with a remembered
/// system prompt and a new 200-word question costs ~60 µs on an idle core (`kvcache_chat/live_workload_*`,
/// BENCHMARKS §2), and the hop to a blocking thread and back cost ~0.1 ms more than that live (§8).
/// Larger bodies and newer text go to the blocking pool.
const INLINE_MAX_BODY_BYTES: usize = 16 << 10;
/// The text a request tokenized in place may give the model (about 50 µs of BPE, §2's new-prompt rows).
const INLINE_MODEL_BYTES: usize = 1 << 10;

impl RequestTokenizer {
    /// A completions prompt's ids without a network call: given as ids, or tokenized in process. `None`
    /// leaves the request to render.
    async fn local_ids(&self, req: &SchedulingRequest<'_>) -> Option<Result<Vec<u32>, String>> {
        if req.parsed?.api == ApiKind::ChatCompletions {
            return self.chat_ids(req).await;
        }
        match completions_prompt(req.parsed?, req.body)? {
            Prompt::TokenIds(ids) => Some(Ok(ids)),
            Prompt::Text(text) => {
                let tokenizer = self.local.clone()?;
                if text.len() <= INLINE_MAX_BODY_BYTES {
                    if let Some(ids) = tokenizer.encode_remembered(&text, INLINE_MODEL_BYTES) {
                        return Some(ids.map_err(|e| e.to_string()));
                    }
                }
                Some(off_workers(move || tokenizer.encode(&text).map_err(|e| e.to_string())).await)
            }
        }
    }

    /// A chat prompt's ids from the model's chat template. `None` leaves the request to render: no
    /// template, a request only the engine renders exactly, or (with a render client, the authority) a
    /// template error.
    async fn chat_ids(&self, req: &SchedulingRequest<'_>) -> Option<Result<Vec<u32>, String>> {
        let (chat, tokenizer) = (self.chat.clone()?, self.local.clone()?);
        let rendered = if req.body.len() <= INLINE_MAX_BODY_BYTES {
            match render(&chat, req.body) {
                Ok(Some(text)) => match tokenizer.encode_rendered_remembered(&text, INLINE_MODEL_BYTES) {
                    Some(ids) => ids.map(Some).map_err(|e| e.to_string()),
                    None => off_workers(move || encode_rendered(&tokenizer, &text)).await,
                },
                other => other.map(|_| None),
            }
        } else {
            let body = bytes::Bytes::copy_from_slice(req.body);
            off_workers(move || match render(&chat, &body) {
                Ok(Some(text)) => encode_rendered(&tokenizer, &text),
                other => other.map(|_| None),
            })
            .await
        };
        match rendered {
            Ok(ids) => ids.map(Ok),
            Err(error) if self.client.is_some() => {
                tracing::debug!(request_id = req.request_id, %error, "chat template failed; asking render");
                None
            }
            Err(error) => Some(Err(error)),
        }
    }
}

/// A chat body rendered with the model's template; `None` if only the engine renders it exactly.
fn render(chat: &ChatTemplate, body: &[u8]) -> Result<Option<String>, String> {
    match chat.render(body) {
        Ok(ChatPrompt::Text(text)) => Ok(Some(text)),
        Ok(ChatPrompt::NeedsRender(reason)) => {
            tracing::trace!(reason, "chat request left to render");
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A rendered chat's ids, in the shape `chat_ids` carries them.
fn encode_rendered(tokenizer: &LocalTokenizer, text: &str) -> Result<Option<Vec<u32>>, String> {
    tokenizer.encode_rendered(text).map(Some).map_err(|e| e.to_string())
}

/// `work` on the blocking pool, off the async workers (an 8k-token prompt new to the tokenizer takes
/// milliseconds).
async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| e.to_string())?
}

impl TokenProducer for RequestTokenizer {
    fn tokenize<'a>(&'a self, req: &'a SchedulingRequest<'a>) -> BoxFuture<'a, Option<Vec<u32>>> {
        Box::pin(async move {
            let api = match req.parsed.map(|p| p.api) {
                Some(ApiKind::ChatCompletions) => RenderApi::ChatCompletions,
                Some(ApiKind::Completions) => RenderApi::Completions,
                _ => return None,
            };
            let record = !req.dry_run;
            if record {
                self.metrics.token_requests.inc();
            }
            let failed = || {
                if record {
                    self.metrics.token_failures.inc();
                }
            };
            if let Some(local) = self.local_ids(req).await {
                if record {
                    self.metrics.token_local.inc();
                }
                return match local {
                    Ok(ids) => Some(ids),
                    Err(error) => {
                        failed();
                        tracing::debug!(request_id = req.request_id, %error, "no token ids for the request");
                        None
                    }
                };
            }
            let Some(client) = &self.client else {
                failed();
                return None;
            };
            match client.tokens(api, bytes::Bytes::copy_from_slice(req.body)).await {
                Ok(tokens) => Some(tokens),
                Err(error) => {
                    failed();
                    tracing::debug!(request_id = req.request_id, %error, "no token ids for the request");
                    None
                }
            }
        })
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: Params = parse_params(name, TYPE_NAME, params)?;
    let err = |message: String| PluginError::new(name, TYPE_NAME, message);
    if p.uds_tokenizer_config.is_some() {
        return Err(err(
            "parameter `udsTokenizerConfig` is not supported: set `vllm.url` to a vLLM render endpoint"
                .into(),
        ));
    }
    if p.vllm.is_some() && p.estimate.is_some() {
        return Err(err("set one of `vllm` and `estimate`, not both".into()));
    }
    let client = match p.vllm {
        None => None,
        Some(v) => {
            if v.url.trim().is_empty() {
                return Err(err("parameter `vllm.url` is empty".into()));
            }
            let mut config = RenderConfig::new(v.url);
            let duration = |field, value: &Option<String>, default| {
                param_checks::duration(field, value.as_deref(), default)
                    .map_err(|e| e.for_plugin(name, TYPE_NAME))
            };
            config.timeout = duration("vllm.timeout", &v.timeout, config.timeout)?;
            duration("vllm.mmTimeout", &v.mm_timeout, config.timeout)?;
            if let Some(max) = v.max_response_bytes {
                config.max_response_bytes = max;
            }
            Some(RenderClient::new(config).map_err(|e| err(e.to_string()))?)
        }
    };
    let local = match p.tokenizer_file.as_deref() {
        None => None,
        Some(path) => Some(
            LocalTokenizer::load(std::path::Path::new(path))
                .map_err(|e| err(format!("parameter `tokenizerFile`: {e}")))?,
        ),
    };
    let chat = chat_template(
        p.tokenizer_config_file.as_deref(),
        p.chat_template_content_format.as_deref(),
        local.is_some(),
    )
    .map_err(err)?;
    tracing::debug!(plugin = name, model = ?p.model_name, render = client.is_some(), local = local.is_some(), chat = chat.is_some(), "token producer");
    let producer = Arc::new(RequestTokenizer { client, local, chat, metrics: ctx.metrics.kv_cache.clone() });
    Ok(BuiltPlugin::new(TYPE_NAME, name).token_producer(producer))
}

/// The chat template of `tokenizerConfigFile`, with its content format.
fn chat_template(
    config: Option<&str>,
    format: Option<&str>,
    has_tokenizer: bool,
) -> Result<Option<Arc<ChatTemplate>>, String> {
    let format = match format {
        None | Some("auto") => None,
        Some("string") => Some(ContentFormat::String),
        Some("openai") => Some(ContentFormat::OpenAi),
        Some(other) => {
            return Err(format!(
                "parameter `chatTemplateContentFormat`: {other:?} is not one of auto, string, openai"
            ))
        }
    };
    let Some(path) = config else {
        if format.is_some() {
            return Err("parameter `chatTemplateContentFormat` needs `tokenizerConfigFile`".into());
        }
        return Ok(None);
    };
    if !has_tokenizer {
        return Err("parameter `tokenizerConfigFile` needs `tokenizerFile` (the template's text is tokenized in process)".into());
    }
    ChatTemplate::load(std::path::Path::new(path), format)
        .map(|template| Some(Arc::new(template)))
        .map_err(|e| format!("parameter `tokenizerConfigFile`: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kvcache::local_tokens_test_file;
    use crate::scheduling::plugins::testing::{assert_rejects, ctx, RequestFixture};

    #[tokio::test]
    async fn completions_prompts_are_tokenized_in_process_and_chat_without_render_gets_none() {
        let file = local_tokens_test_file();
        let params = json!({"tokenizerFile": file.path().to_str().expect("utf-8 path")});
        let context = ctx();
        let built = factory("p", Some(&params), &context).expect("builds");
        let producer = built.token_producer.expect("a token producer");
        let completion = RequestFixture::with_prompt("m", r#""hello world""#);
        assert_eq!(producer.tokenize(&completion.request()).await, Some(vec![1, 2]));
        let given = RequestFixture::with_prompt("m", "[7,8,9]");
        assert_eq!(producer.tokenize(&given.request()).await, Some(vec![7, 8, 9]), "ids are used as given");
        let mut chat = RequestFixture::with_prompt("m", r#"[{"role":"user","content":"hello"}]"#);
        chat.parsed.api = crate::request::ApiKind::ChatCompletions;
        assert_eq!(producer.tokenize(&chat.request()).await, None, "a chat template needs render");
        let metrics = &context.metrics.kv_cache;
        assert_eq!(
            (metrics.token_requests.get(), metrics.token_local.get(), metrics.token_failures.get()),
            (3, 2, 1)
        );
        assert_rejects(factory, json!({"tokenizerFile": "/nonexistent/tokenizer.json"}), "tokenizerFile");
        assert_rejects(factory, json!({"udsTokenizerConfig": {}}), "udsTokenizerConfig");
    }

    #[tokio::test]
    async fn chat_prompts_are_rendered_from_the_template_and_what_it_cannot_render_is_left_to_render() {
        let file = local_tokens_test_file();
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("tokenizer_config.json");
        let template = r#"{"chat_template": "{% for m in messages %}{{ m.content }} {% endfor %}again"}"#;
        std::fs::write(&config, template).expect("write");
        let (tokenizer, config) = (file.path().to_str().expect("utf-8"), config.to_str().expect("utf-8"));
        let params = json!({"tokenizerFile": tokenizer, "tokenizerConfigFile": config});
        let context = ctx();
        let producer =
            factory("p", Some(&params), &context).expect("builds").token_producer.expect("producer");
        let chat = |messages: &str| {
            let mut fixture = RequestFixture::with_prompt("m", messages);
            fixture.parsed.api = crate::request::ApiKind::ChatCompletions;
            fixture.body = format!(r#"{{"model":"m","messages":{messages}}}"#).into_bytes();
            fixture
        };
        let plain = chat(r#"[{"role":"user","content":"hello"},{"role":"assistant","content":"world"}]"#);
        assert_eq!(producer.tokenize(&plain.request()).await, Some(vec![1, 2, 3]));
        let tool = chat(r#"[{"role":"tool","content":"hello","tool_call_id":"1"}]"#);
        assert_eq!(producer.tokenize(&tool.request()).await, None, "no render client to ask");
        let metrics = &context.metrics.kv_cache;
        assert_eq!((metrics.token_local.get(), metrics.token_failures.get()), (1, 1));

        let rejects = |params, field| assert_rejects(factory, params, field);
        rejects(json!({"tokenizerConfigFile": config}), "tokenizerFile");
        rejects(
            json!({"tokenizerFile": tokenizer, "tokenizerConfigFile": "/nonexistent/c.json"}),
            "tokenizerConfigFile",
        );
        let bad_format = json!({"tokenizerFile": tokenizer, "tokenizerConfigFile": config, "chatTemplateContentFormat": "x"});
        rejects(bad_format, "chatTemplateContentFormat");
        rejects(json!({"chatTemplateContentFormat": "string"}), "chatTemplateContentFormat");
    }
}
