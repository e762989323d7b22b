//! The model's own tokenizer, for prompts (`--tokenizer-dir`): a directory holding `tokenizer.json` and,
//! for chat, `tokenizer_config.json` (its chat template). With it, a replica counts and caches the token
//! ids a real vLLM would compute for the same request, so an epp that tokenizes in process
//! (`token-producer`'s `tokenizerFile` and `tokenizerConfigFile`) matches the blocks this replica announces
//! in its KV events without asking its render endpoint. It uses epp's own template and tokenizer code,
//! which `make test-vllm` checks against real vLLM, but through the library's whole pipeline every time
//! (`encode_whole`, `encode_rendered_whole`), as an engine tokenizes: epp's remembered pieces and words
//! must then give the same blocks. Without it, the stand-in tokenizer of
//! [`super::engine::tokenize`] (one token per 4 bytes of the request's JSON) is used, as before.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use epp::kvcache::{completions_prompt, ChatPrompt, ChatTemplate, LocalTokenizer, Prompt};
use epp::request::{ApiKind, ParsedRequest};

/// A loaded model tokenizer and, when the directory has one, its chat template.
#[derive(Debug, Clone)]
pub struct ModelTokenizer {
    dir: PathBuf,
    tokenizer: LocalTokenizer,
    chat: Option<Arc<ChatTemplate>>,
}

/// Two are the same when loaded from the same directory (the options compare by value).
impl PartialEq for ModelTokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.dir == other.dir
    }
}

impl ModelTokenizer {
    /// Loads `dir/tokenizer.json`, and `dir/tokenizer_config.json`'s chat template when the file exists.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let flag = |e: &dyn std::fmt::Display| format!("--tokenizer-dir {}: {e}", dir.display());
        let tokenizer = LocalTokenizer::load(&dir.join("tokenizer.json")).map_err(|e| flag(&e))?;
        let config = dir.join("tokenizer_config.json");
        let chat = if config.exists() {
            Some(Arc::new(ChatTemplate::load(&config, None).map_err(|e| flag(&e))?))
        } else {
            None
        };
        Ok(Self { dir: dir.to_path_buf(), tokenizer, chat })
    }

    /// The request's prompt ids as vLLM computes them: a completions prompt with the tokenizer's special
    /// tokens, a chat rendered by the template and tokenized as it is. `None` for what this cannot
    /// tokenize (a chat the template leaves to render, a failed render, no template), which the caller
    /// tokenizes with the stand-in. The whole text every time, as vLLM does: no remembered pieces.
    pub fn prompt_ids(&self, parsed: &ParsedRequest, body: &[u8]) -> Option<Vec<u32>> {
        match parsed.api {
            ApiKind::ChatCompletions => match self.chat.as_ref()?.render(body) {
                Ok(ChatPrompt::Text(text)) => self.tokenizer.encode_rendered_whole(&text).ok(),
                Ok(ChatPrompt::NeedsRender(_)) | Err(_) => None,
            },
            _ => match completions_prompt(parsed, body)? {
                Prompt::Text(text) => self.tokenizer.encode_whole(&text).ok(),
                Prompt::TokenIds(ids) => Some(ids),
            },
        }
    }
}
