//! In-process tokenization (beyond llm-d, whose `token-producer` always asks a server): the model's own
//! `tokenizer.json`, loaded with Hugging Face's `tokenizers` library (the same code vLLM's fast tokenizers
//! run), so a completions request costs no network round trip.
//!
//! What it covers, and why: a completions `prompt` given as a string (tokenized with the tokenizer's
//! special tokens, as vLLM's `/v1/completions` does by default) or as token ids (used as they are); and a
//! chat prompt that [`super::chat_template`] rendered (tokenized as it is: the template wrote its special
//! tokens). A chat request the template cannot render exactly goes to render (`vllm.url`), or gets no
//! token ids when none is configured.

use std::path::Path;
use std::sync::Arc;

use crate::request::{ApiKind, ParsedRequest};

/// A loaded tokenizer.
#[derive(Clone)]
pub struct LocalTokenizer {
    tokenizer: Arc<tokenizers::Tokenizer>,
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTokenizer").finish_non_exhaustive()
    }
}

/// Why a tokenizer did not load, or a prompt was not tokenized.
#[derive(Debug, thiserror::Error)]
pub enum LocalTokensError {
    #[error("loading {path}: {message}")]
    Load { path: String, message: String },
    #[error("tokenizing: {0}")]
    Encode(String),
}

/// What a completions request's prompt is, for tokenizing.
#[derive(Debug, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    TokenIds(Vec<u32>),
}

impl LocalTokenizer {
    /// Loads `tokenizer.json` (the file a model repository ships).
    pub fn load(path: &Path) -> Result<Self, LocalTokensError> {
        let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| LocalTokensError::Load {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(Self { tokenizer: Arc::new(tokenizer) })
    }

    /// The token ids of `text`, with the tokenizer's special tokens (a BOS where the model has one).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LocalTokensError> {
        let encoding =
            self.tokenizer.encode(text, true).map_err(|e| LocalTokensError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The token ids of `text` as it is: a rendered chat prompt, whose template wrote its special tokens
    /// (what transformers' `apply_chat_template` does, `add_special_tokens=False`).
    pub fn encode_rendered(&self, text: &str) -> Result<Vec<u32>, LocalTokensError> {
        let encoding =
            self.tokenizer.encode(text, false).map_err(|e| LocalTokensError::Encode(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }
}

/// The prompt of a completions request that can be tokenized here: a string (the first of a list), or
/// token ids. `None` for chat and other APIs, and for prompts of other shapes.
pub fn completions_prompt(parsed: &ParsedRequest, body: &[u8]) -> Option<Prompt> {
    if parsed.api != ApiKind::Completions {
        return None;
    }
    let raw = parsed.prefix_bytes(body);
    if let Ok(text) = serde_json::from_slice::<String>(raw) {
        return Some(Prompt::Text(text));
    }
    if let Ok(ids) = serde_json::from_slice::<Vec<u32>>(raw) {
        return Some(Prompt::TokenIds(ids));
    }
    let mut texts = serde_json::from_slice::<Vec<String>>(raw).ok()?;
    (!texts.is_empty()).then(|| Prompt::Text(texts.swap_remove(0)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::request::parse_request;

    /// A word-level `tokenizer.json`: whitespace-split words, 0 for unknown ones.
    pub(crate) const WORD_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
        "added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,
        "decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2,"again":3},
        "unk_token":"[UNK]"}}"#;

    pub(crate) fn word_tokenizer_file() -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), WORD_TOKENIZER).expect("write");
        file
    }

    fn prompt(body: &str) -> Option<Prompt> {
        let path = if body.contains("messages") { "/v1/chat/completions" } else { "/v1/completions" };
        let parsed = parse_request(path, body.as_bytes()).expect("parses");
        completions_prompt(&parsed, body.as_bytes())
    }

    #[test]
    fn completions_prompts_of_every_shape_and_chat_left_to_render() {
        assert_eq!(
            prompt(r#"{"model":"m","prompt":"hello \"world\""}"#),
            Some(Prompt::Text("hello \"world\"".into()))
        );
        assert_eq!(prompt(r#"{"model":"m","prompt":["a","b"]}"#), Some(Prompt::Text("a".into())));
        assert_eq!(prompt(r#"{"model":"m","prompt":[5,6,7]}"#), Some(Prompt::TokenIds(vec![5, 6, 7])));
        assert_eq!(prompt(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#), None);
    }

    #[test]
    fn a_tokenizer_file_encodes_and_a_bad_one_is_an_error_naming_it() {
        let file = word_tokenizer_file();
        let tokenizer = LocalTokenizer::load(file.path()).expect("loads");
        assert_eq!(tokenizer.encode("hello world again nope").expect("encodes"), [1, 2, 3, 0]);
        let missing = LocalTokenizer::load(Path::new("/nonexistent/tokenizer.json")).expect_err("missing");
        assert!(missing.to_string().contains("/nonexistent/tokenizer.json"), "{missing}");
    }
}
