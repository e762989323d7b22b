//! Chat templates in process (beyond llm-d, whose `token-producer` sends every chat request to the engine's
//! render endpoint): the model's Jinja chat template, rendered with MiniJinja as Hugging Face's
//! `apply_chat_template` renders it for vLLM, so a chat request's token ids cost no network round trip.
//!
//! Exactness is the point: a prompt rendered differently from the engine's has different tokens, and its
//! prefix matches nothing. So only what this module reproduces exactly is rendered here, and the rest goes
//! to render ([`ChatPrompt::NeedsRender`] says why). Rendered here: messages whose `content` is a string,
//! null or a list of text parts, with an optional `name`, and `add_generation_prompt`. Sent to render:
//! tools, documents, a per-request `chat_template` or `chat_template_kwargs`, `reasoning_effort`,
//! `continue_final_message`, `add_special_tokens`, the `developer` and `tool` roles, and any other part or
//! message field. What vLLM does with the plain case (vllm-project/vllm, 0.32):
//! - `vllm/renderers/chat_utils.py` (`_parse_chat_message_content`): a string content becomes one text
//!   part; parts are joined with `\n` when the template takes a string ("string" content format) or kept
//!   as `{"type": "text", "text": …}` dicts when it iterates over the content ("openai"); `name` is kept.
//! - `vllm/renderers/hf.py` (`_detect_content_format`): which format, from the template's syntax tree.
//!   [`ContentFormat::detect`] reads the same loops from the source text.
//! - transformers' `apply_chat_template` (`utils/chat_template_utils.py`): a sandboxed Jinja environment
//!   with `trim_blocks` and `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now` and a
//!   `tojson` that does not escape HTML; the context holds `messages`, `tools` and `documents` (both
//!   none), `add_generation_prompt` and the named special tokens (`bos_token`, `eos_token`, …); the text
//!   is then tokenized without adding special tokens.

use std::path::Path;

use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};
use serde_json::{Map, Value as Json};

/// The named special tokens transformers passes to every template (`SPECIAL_TOKENS_ATTRIBUTES`).
const SPECIAL_TOKENS: [&str; 7] =
    ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

/// Request fields that change the rendered prompt in ways only the engine reproduces.
const RENDER_ONLY_FIELDS: [&str; 5] =
    ["tools", "documents", "chat_template", "chat_template_kwargs", "reasoning_effort"];

/// vLLM drops this line from system prompts (`_strip_claude_code_billing_header`).
const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// How message content reaches the template, as vLLM's `--chat-template-content-format` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// A string: text parts joined with `\n`.
    String,
    /// A list of `{"type": "text", "text": …}` parts.
    OpenAi,
}

impl ContentFormat {
    /// vLLM's "auto": "openai" when the template loops over a message's content (`for x in
    /// message['content']`, `message.content`, or a variable named `content`), else "string".
    pub fn detect(template: &str) -> Self {
        let mut rest = template;
        while let Some(at) = rest.find("for ") {
            rest = &rest[at + 4..];
            let clause = rest.split("%}").next().unwrap_or(rest);
            let Some((_, iterable)) = clause.split_once(" in ") else { continue };
            let iterable = iterable.trim().trim_end_matches('-').trim();
            let iterable = iterable.split(" if ").next().unwrap_or(iterable).trim();
            if iterable == "content"
                || iterable.ends_with("['content']")
                || iterable.ends_with("[\"content\"]")
                || iterable.ends_with(".content")
            {
                return Self::OpenAi;
            }
        }
        Self::String
    }
}

/// Why a chat template did not load, or a request did not render.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("loading {path}: {message}")]
    Load { path: String, message: String },
    #[error("rendering the chat template: {0}")]
    Render(String),
}

/// What rendering a chat request gave.
#[derive(Debug, PartialEq, Eq)]
pub enum ChatPrompt {
    /// The prompt text, to tokenize without adding special tokens.
    Text(String),
    /// The request uses something only the engine renders exactly: the field or value named.
    NeedsRender(&'static str),
}

/// A model's chat template, compiled, with the special tokens its context carries.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    special_tokens: Vec<(&'static str, String)>,
    format: ContentFormat,
}

impl ChatTemplate {
    /// Loads the template and special tokens from a model's `tokenizer_config.json`, as transformers
    /// does: its `chat_template` (a string, or the entry named `default` of a list), else a
    /// `chat_template.jinja` beside it; special tokens missing from it are read from a
    /// `special_tokens_map.json` beside it. `format` overrides the detected content format.
    pub fn load(config_path: &Path, format: Option<ContentFormat>) -> Result<Self, ChatTemplateError> {
        let load_error = |path: &Path, message: String| ChatTemplateError::Load {
            path: path.display().to_string(),
            message,
        };
        let read_json = |path: &Path| -> Result<Map<String, Json>, ChatTemplateError> {
            let text = std::fs::read_to_string(path).map_err(|e| load_error(path, e.to_string()))?;
            serde_json::from_str(&text).map_err(|e| load_error(path, format!("not a JSON object: {e}")))
        };
        let config = read_json(config_path)?;
        let dir = config_path.parent().unwrap_or(Path::new("."));
        let template = match config.get("chat_template") {
            Some(Json::String(template)) => template.clone(),
            Some(Json::Array(named)) => named_template(named).ok_or_else(|| {
                load_error(config_path, "`chat_template` has no entry named `default`".into())
            })?,
            Some(_) => {
                return Err(load_error(config_path, "`chat_template` is neither a string nor a list".into()))
            }
            None => {
                let jinja = dir.join("chat_template.jinja");
                std::fs::read_to_string(&jinja).map_err(|e| {
                    load_error(config_path, format!("no `chat_template`, and {}: {e}", jinja.display()))
                })?
            }
        };
        let map_path = dir.join("special_tokens_map.json");
        let fallback = if map_path.exists() { read_json(&map_path)? } else { Map::new() };
        let special_tokens = SPECIAL_TOKENS
            .iter()
            .filter_map(|&name| {
                let token =
                    config.get(name).and_then(token_text).or_else(|| fallback.get(name).and_then(token_text));
                token.map(|token| (name, token))
            })
            .collect();
        Self::new(template, special_tokens, format).map_err(|e| load_error(config_path, e.to_string()))
    }

    /// Compiles `template`. `format` overrides the detected content format.
    pub fn new(
        template: String,
        special_tokens: Vec<(&'static str, String)>,
        format: Option<ContentFormat>,
    ) -> Result<Self, ChatTemplateError> {
        let format = format.unwrap_or_else(|| ContentFormat::detect(&template));
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| ChatTemplateError::Render(e.to_string()))?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        });
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", super::chat_json::tojson);
        env.add_template_owned("chat", template).map_err(|e| ChatTemplateError::Render(format!("{e:#}")))?;
        Ok(Self { env, special_tokens, format })
    }

    /// The content format in use.
    pub fn format(&self) -> ContentFormat {
        self.format
    }

    /// Renders a chat completions body, or says why only the engine can.
    pub fn render(&self, body: &[u8]) -> Result<ChatPrompt, ChatTemplateError> {
        let request: Map<String, Json> =
            serde_json::from_slice(body).map_err(|e| ChatTemplateError::Render(format!("the body: {e}")))?;
        for field in RENDER_ONLY_FIELDS {
            if request.get(field).is_some_and(|v| !v.is_null()) {
                return Ok(ChatPrompt::NeedsRender(field));
            }
        }
        for (field, default) in [("continue_final_message", false), ("add_special_tokens", false)] {
            if flag(&request, field, default)? != default {
                return Ok(ChatPrompt::NeedsRender(field));
            }
        }
        let add_generation_prompt = flag(&request, "add_generation_prompt", true)?;
        let Some(Json::Array(raw)) = request.get("messages") else {
            return Err(ChatTemplateError::Render("`messages` is not a list".into()));
        };
        let mut messages = Vec::with_capacity(raw.len());
        for message in raw {
            match self.message(message) {
                Ok(value) => messages.push(value),
                Err(reason) => return Ok(ChatPrompt::NeedsRender(reason)),
            }
        }
        let mut context: Vec<(&str, Value)> =
            self.special_tokens.iter().map(|(name, token)| (*name, Value::from(token.as_str()))).collect();
        context.extend([
            ("messages", Value::from(messages)),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
        ]);
        let template = self.env.get_template("chat").map_err(|e| ChatTemplateError::Render(e.to_string()))?;
        let text = template.render(dict(context)).map_err(|e| ChatTemplateError::Render(format!("{e:#}")))?;
        Ok(ChatPrompt::Text(text))
    }

    /// One message as vLLM hands it to the template, or the reason it cannot be rendered here.
    fn message(&self, message: &Json) -> Result<Value, &'static str> {
        let Json::Object(fields) = message else { return Err("a message that is not an object") };
        let Some(Json::String(role)) = fields.get("role") else { return Err("a message without a role") };
        if role == "developer" || role == "tool" {
            return Err("the developer or tool role");
        }
        if let Some(other) = fields.keys().find(|k| !matches!(k.as_str(), "role" | "content" | "name")) {
            return Err(if other == "tool_calls" {
                "tool_calls"
            } else {
                "a message field other than role, content and name"
            });
        }
        let texts: Vec<&str> = match fields.get("content") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::String(text)) => vec![text.as_str()],
            Some(Json::Array(parts)) => {
                parts.iter().map(text_part).collect::<Option<_>>().ok_or("a non-text content part")?
            }
            Some(_) => return Err("a content that is neither a string nor a list"),
        };
        if role == "system" && texts.iter().any(|t| t.starts_with(BILLING_HEADER)) {
            return Err("a billing header in a system prompt");
        }
        let content = match self.format {
            ContentFormat::String => {
                Value::from(texts.iter().filter(|t| !t.is_empty()).copied().collect::<Vec<_>>().join("\n"))
            }
            ContentFormat::OpenAi => Value::from_iter(
                texts.iter().map(|&text| dict([("type", Value::from("text")), ("text", Value::from(text))])),
            ),
        };
        let mut out = vec![("role", Value::from(role.as_str())), ("content", content)];
        match fields.get("name") {
            Some(Json::String(name)) => out.push(("name", Value::from(name.as_str()))),
            None | Some(Json::Null) => {}
            Some(_) => return Err("a name that is not a string"),
        }
        Ok(dict(out))
    }
}

/// A Python dict: keys in insertion order.
fn dict<'k>(pairs: impl IntoIterator<Item = (&'k str, Value)>) -> Value {
    Value::from(
        pairs.into_iter().map(|(k, v)| (Value::from(k), v)).collect::<indexmap::IndexMap<Value, Value>>(),
    )
}

/// A template list's entry named `default` (transformers' choice when none is asked for).
fn named_template(named: &[Json]) -> Option<String> {
    named.iter().find_map(|entry| {
        (entry.get("name")?.as_str()? == "default")
            .then(|| entry.get("template")?.as_str().map(str::to_owned))?
    })
}

/// A special token's text: a string, or an `AddedToken` object's `content`.
fn token_text(value: &Json) -> Option<String> {
    match value {
        Json::String(text) => Some(text.clone()),
        Json::Object(token) => token.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// A text part's text: a string part, or `{"type": "text", "text": …}`.
fn text_part(part: &Json) -> Option<&str> {
    match part {
        Json::String(text) => Some(text),
        Json::Object(part) if part.get("type")?.as_str()? == "text" => part.get("text")?.as_str(),
        _ => None,
    }
}

/// A boolean request field, `default` when absent or null.
fn flag(request: &Map<String, Json>, field: &str, default: bool) -> Result<bool, ChatTemplateError> {
    match request.get(field) {
        None | Some(Json::Null) => Ok(default),
        Some(Json::Bool(value)) => Ok(*value),
        Some(_) => Err(ChatTemplateError::Render(format!("`{field}` is not a boolean"))),
    }
}

/// transformers' `strftime_now`: the local time, formatted.
fn strftime_now(format: String) -> Result<String, Error> {
    let now = jiff::Zoned::now();
    jiff::fmt::strtime::format(format.as_str(), &now)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("strftime_now({format:?}): {e}")))
}

#[cfg(test)]
#[path = "chat_template_tests.rs"]
mod tests;
