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

use super::budget::{Budget, Stop};
use super::segments::{encode_ids, Segmenter};
use crate::request::{ApiKind, ParsedRequest};

/// A loaded tokenizer.
#[derive(Clone)]
pub struct LocalTokenizer {
    tokenizer: Arc<tokenizers::Tokenizer>,
    /// Rendered chat prompts piece by piece, pieces remembered; `None` where that would not be exact.
    segments: Option<Arc<Segmenter>>,
    /// What the post-processor puts around a text's ids when special tokens are added, where the
    /// segmenter remembers words: a completions prompt is then those and the segmenter's ids.
    specials: Option<Arc<Specials>>,
}

/// The ids a tokenizer's post-processor adds before and after a single text's own (a BOS, say).
#[derive(Debug, PartialEq, Eq)]
struct Specials {
    before: Vec<u32>,
    after: Vec<u32>,
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
        let segments = Segmenter::for_tokenizer(&tokenizer).map(Arc::new);
        let specials =
            segments.as_ref().filter(|s| s.remembers_words()).and_then(|s| specials(&tokenizer, s));
        Ok(Self { tokenizer: Arc::new(tokenizer), segments, specials: specials.map(Arc::new) })
    }

    /// Whether rendered prompts are tokenized piece by piece with the pieces remembered
    /// ([`super::segments`]).
    pub fn remembers_pieces(&self) -> bool {
        self.segments.is_some()
    }

    /// Whether, within a piece, each split's ids are remembered too, past the library's per-character
    /// pipeline ([`super::byte_words`]: byte-level BPE tokenizers).
    pub fn remembers_words(&self) -> bool {
        self.segments.as_ref().is_some_and(|s| s.remembers_words())
    }

    /// The token ids of `text`, with the tokenizer's special tokens (a BOS where the model has one).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LocalTokensError> {
        self.encode_within(text, &mut Budget::unbounded()).unwrap_or_else(|| self.encode_whole(text))
    }

    /// [`Self::encode`] if at most `model_bytes` of the text (each call to the model charged 64 bytes
    /// more) are not remembered; `None` if more are, or if this tokenizer remembers nothing, and the
    /// caller encodes it off the async workers. Bounds the work done in place.
    pub fn encode_remembered(
        &self,
        text: &str,
        model_bytes: usize,
    ) -> Option<Result<Vec<u32>, LocalTokensError>> {
        self.encode_within(text, &mut Budget::bytes(model_bytes))
    }

    /// [`Self::encode`] piece by piece within `budget`; `None` where this tokenizer remembers nothing
    /// (or its post-processor's tokens are unknown) or the encode ran over the budget.
    fn encode_within(&self, text: &str, budget: &mut Budget) -> Option<Result<Vec<u32>, LocalTokensError>> {
        let (segments, specials) = (self.segments.as_ref()?, self.specials.as_ref()?);
        let own = within(segments.encode_within(&self.tokenizer, text, budget))?;
        Some(own.map(|own| [&specials.before[..], &own, &specials.after].concat()))
    }

    /// [`Self::encode`] through the library's whole pipeline every time, as an engine tokenizes a prompt
    /// (the simulator stands in for one).
    pub fn encode_whole(&self, text: &str) -> Result<Vec<u32>, LocalTokensError> {
        encode_ids(&self.tokenizer, text, true).map_err(LocalTokensError::Encode)
    }

    /// The token ids of `text` as it is: a rendered chat prompt, whose template wrote its special tokens
    /// (what transformers' `apply_chat_template` does, `add_special_tokens=False`).
    pub fn encode_rendered(&self, text: &str) -> Result<Vec<u32>, LocalTokensError> {
        self.encode_rendered_within(text, &mut Budget::unbounded())
            .unwrap_or_else(|| self.encode_rendered_whole(text))
    }

    /// [`Self::encode_rendered`] bounded as [`Self::encode_remembered`] is.
    pub fn encode_rendered_remembered(
        &self,
        text: &str,
        model_bytes: usize,
    ) -> Option<Result<Vec<u32>, LocalTokensError>> {
        self.encode_rendered_within(text, &mut Budget::bytes(model_bytes))
    }

    /// [`Self::encode_rendered`] piece by piece within `budget`; `None` where this tokenizer remembers
    /// nothing or the encode ran over the budget.
    fn encode_rendered_within(
        &self,
        text: &str,
        budget: &mut Budget,
    ) -> Option<Result<Vec<u32>, LocalTokensError>> {
        within(self.segments.as_ref()?.encode_within(&self.tokenizer, text, budget))
    }

    /// [`Self::encode_rendered`] without remembered pieces: the whole text every time, as an engine
    /// tokenizes it (the simulator stands in for one).
    pub fn encode_rendered_whole(&self, text: &str) -> Result<Vec<u32>, LocalTokensError> {
        encode_ids(&self.tokenizer, text, false).map_err(LocalTokensError::Encode)
    }
}

/// A bounded encode's ids or error; `None` where it ran over its budget.
fn within(encoded: Result<Vec<u32>, Stop>) -> Option<Result<Vec<u32>, LocalTokensError>> {
    match encoded {
        Ok(ids) => Some(Ok(ids)),
        Err(Stop::Failed(message)) => Some(Err(LocalTokensError::Encode(message))),
        Err(Stop::OverBudget) => None,
    }
}

/// What the post-processor adds around a text, read off two probes encoded with and without special
/// tokens; `None` unless both show the text's own ids whole between the same ids.
fn specials(tokenizer: &tokenizers::Tokenizer, segments: &Segmenter) -> Option<Specials> {
    let mut found: Option<Specials> = None;
    for probe in ["Hello, world! It's 2026.", "  two\n\nlines \u{1f35c} 12345 "] {
        let with = encode_ids(tokenizer, probe, true).ok()?;
        let own = segments.encode(tokenizer, probe).ok()?;
        let at = (0..=with.len().checked_sub(own.len())?).find(|&at| with[at..at + own.len()] == own[..])?;
        let these = Specials { before: with[..at].to_vec(), after: with[at + own.len()..].to_vec() };
        if found.as_ref().is_some_and(|f| *f != these) {
            return None;
        }
        found = Some(these);
    }
    found
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

    /// The word tokenizer with special tokens between which a chat template writes its messages.
    fn chat_tokenizer(lstrip: bool, pre_tokenizer: &str) -> tempfile::NamedTempFile {
        let added = |id: u32, content: &str| {
            format!(
                r#"{{"id":{id},"content":"{content}","single_word":false,"lstrip":{lstrip},"rstrip":false,"normalized":false,"special":true}}"#
            )
        };
        let json = WORD_TOKENIZER
            .replace(
                r#""added_tokens":[]"#,
                &format!(r#""added_tokens":[{},{}]"#, added(4, "<|s|>"), added(5, "<|e|>")),
            )
            .replace(r#"{"type":"Whitespace"}"#, pre_tokenizer);
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), json).expect("write");
        file
    }

    /// A byte-level tokenizer that remembers words: a completions prompt's ids are the post-processor's
    /// (a BOS in the Llama 3 shaped fixture, nothing in the GPT-2 shaped one) around the segmenter's, the
    /// same as the library's whole pipeline gives.
    #[test]
    fn completions_prompts_through_remembered_words_are_the_librarys_ids() {
        for (fixture, bos) in [("gpt2", None), ("llama3", Some(262))] {
            let path = format!(
                "{}/tests/fixtures/byte-level-bpe-{fixture}.tokenizer.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let tokenizer = LocalTokenizer::load(Path::new(&path)).expect("loads");
            assert!(tokenizer.remembers_words() && tokenizer.specials.is_some(), "{fixture}");
            for text in ["", "the thing", "  It's 12345 caf\u{e9}\n\n  x <|im_end|> in  ", "\u{1f35c}\r\n"] {
                let whole = tokenizer.encode_whole(text).expect("encodes");
                assert_eq!(tokenizer.encode(text).expect("encodes"), whole, "{fixture}: {text:?}");
                assert_eq!(
                    tokenizer.encode(text).expect("encodes"),
                    whole,
                    "{fixture}, remembered: {text:?}"
                );
                assert_eq!(whole.first().copied().filter(|_| bos.is_some()), bos, "{fixture}: {text:?}");
            }
        }
    }

    /// A bounded encode does at most its budget's work: new text over it is refused (the caller then
    /// encodes off the async workers); remembered text costs nothing and gives the same ids.
    #[test]
    fn bounded_encodes_refuse_new_text_over_budget_and_take_remembered_text_for_free() {
        for fixture in ["gpt2", "llama3"] {
            let path = format!(
                "{}/tests/fixtures/byte-level-bpe-{fixture}.tokenizer.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let tokenizer = LocalTokenizer::load(Path::new(&path)).expect("loads");
            let text = "A system prompt every request shares, long enough to be remembered. ".repeat(4);
            assert!(tokenizer.encode_remembered(&text, 256).is_none(), "{fixture}: new text, over budget");
            assert!(tokenizer.encode_rendered_remembered(&text, 256).is_none(), "{fixture}: rendered");
            let whole = tokenizer.encode_whole(&text).expect("encodes");
            let bounded = |text: &str, budget| tokenizer.encode_remembered(text, budget).and_then(Result::ok);
            assert_eq!(bounded(&text, 1 << 20).as_ref(), Some(&whole), "{fixture}: within a large budget");
            assert_eq!(bounded(&text, 0).as_ref(), Some(&whole), "{fixture}: remembered, for free");
            let rendered = tokenizer.encode_rendered_whole(&text).expect("encodes");
            let rendered_bounded = tokenizer.encode_rendered_remembered(&text, 0).and_then(Result::ok);
            assert_eq!(rendered_bounded, Some(rendered), "{fixture}: rendered, remembered");
            let longer = format!("{text}zebra");
            let longer_whole = tokenizer.encode_whole(&longer).expect("encodes");
            assert_eq!(bounded(&longer, 128), Some(longer_whole), "{fixture}: one new word, within budget");
        }
        let plain = word_tokenizer_file();
        let remembers_nothing = LocalTokenizer::load(plain.path()).expect("loads");
        assert!(remembers_nothing.encode_remembered("hello world", 1 << 20).is_none());
        assert!(remembers_nothing.encode_rendered_remembered("hello world", 1 << 20).is_none());
    }

    #[test]
    fn rendered_prompts_are_tokenized_piece_by_piece_exactly_and_only_where_that_is_exact() {
        let file = chat_tokenizer(false, r#"{"type":"Whitespace"}"#);
        let tokenizer = LocalTokenizer::load(file.path()).expect("loads");
        assert!(tokenizer.remembers_pieces());
        let long = "hello world again ".repeat(8);
        let text = format!("<|s|>system {long}<|e|>\n<|s|>user hello<|e|><|s|><|s|>nope again<|e|>");
        let whole = tokenizer.tokenizer.encode(text.as_str(), false).expect("encodes").get_ids().to_vec();
        assert_eq!(tokenizer.encode_rendered(&text).expect("encodes"), whole, "the first time");
        assert_eq!(tokenizer.encode_rendered(&text).expect("encodes"), whole, "with the pieces remembered");
        assert_eq!(&whole[..2], [4, 0], "the special token, then the unknown word 'system'");

        let stripping = chat_tokenizer(true, r#"{"type":"Whitespace"}"#);
        assert!(!LocalTokenizer::load(stripping.path()).expect("loads").remembers_pieces(), "lstrip");
        let metaspace =
            r#"{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":true}"#;
        let first_only = chat_tokenizer(false, metaspace);
        assert!(!LocalTokenizer::load(first_only.path()).expect("loads").remembers_pieces(), "Metaspace");
        let plain = word_tokenizer_file();
        assert!(!LocalTokenizer::load(plain.path()).expect("loads").remembers_pieces(), "no added tokens");
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
