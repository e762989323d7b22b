//! `token-producer` (llm-d/llm-d-router:pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer):
//! each request's token ids, fetched before its scheduling cycle, for `precise-prefix-cache-producer`.
//!
//! Backends, as llm-d names them: `vllm` (the engine's render endpoints, [`crate::kvcache::RenderClient`])
//! or `estimate`, which produces no token ids here: llm-d's estimate (about 4 bytes a token) cannot match
//! an engine's blocks, so rather than index guesses, precise matching is skipped for the request (it scores
//! no prefix anywhere) and the failure is counted. `udsTokenizerConfig` (llm-d's tokenizer sidecar over a
//! Unix socket) is refused with an error saying to use `vllm`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;

use crate::kvcache::{RenderApi, RenderClient, RenderConfig};
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

/// The producer: a render client, or none (`estimate`).
#[derive(Debug)]
pub(crate) struct RenderTokenProducer {
    client: Option<RenderClient>,
    metrics: Arc<KvCacheMetrics>,
}

impl TokenProducer for RenderTokenProducer {
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

fn duration(
    name: &str,
    field: &str,
    value: Option<&str>,
    default: Duration,
) -> Result<Duration, PluginError> {
    match value {
        None => Ok(default),
        Some(text) => humantime::parse_duration(text)
            .map_err(|e| PluginError::new(name, TYPE_NAME, format!("parameter `{field}` {text:?}: {e}"))),
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
            config.timeout = duration(name, "vllm.timeout", v.timeout.as_deref(), config.timeout)?;
            duration(name, "vllm.mmTimeout", v.mm_timeout.as_deref(), config.timeout)?;
            if let Some(max) = v.max_response_bytes {
                config.max_response_bytes = max;
            }
            Some(RenderClient::new(config).map_err(|e| err(e.to_string()))?)
        }
    };
    tracing::debug!(plugin = name, model = ?p.model_name, render = client.is_some(), "token producer");
    let producer = Arc::new(RenderTokenProducer { client, metrics: ctx.metrics.kv_cache.clone() });
    Ok(BuiltPlugin::new(TYPE_NAME, name).token_producer(producer))
}
