//! Byte-level BPE without Hugging Face's per-character bookkeeping, for the pieces of a rendered chat
//! ([`super::segments`]). The library's pipeline keeps an alignment per byte of every split and a string
//! and offsets per token, which is most of its time (a profile of `kvcache_chat/live_*`: the `ByteLevel`
//! pre-tokenizer about half of it, `malloc`/`free` about 40%); epp needs the ids alone. So a piece is
//! split with the tokenizer's own regex, as its pre-tokenizer splits it, and each split's ids are
//! remembered by its text, the model (the library's BPE, with its merges and options) asked only for
//! splits not seen yet.
//!
//! Exact only for the tokenizers whose pipeline is that and nothing more, so it is used only when:
//! - there is no normalizer, truncation or padding, and no added token is matched after normalization
//!   (the segmenter splits the others out before a piece gets here);
//! - the pre-tokenizer is `ByteLevel` with its regex and no prefix space (GPT-2, SmolLM2), or a regex
//!   `Split` isolating its matches followed by `ByteLevel` without its regex (Llama 3, Qwen 2);
//! - the model is BPE without dropout;
//! - and a probe text tokenizes the same both ways when the tokenizer loads.
//!
//! (`huggingface/tokenizers:tokenizers/src/pre_tokenizers/byte_level.rs` and
//! `tokenizers/src/tokenizer/pattern.rs`: the split, its gaps and the byte-to-character table.)

use std::collections::HashMap;
use std::sync::RwLock;

use tokenizers::utils::SysRegex;
use tokenizers::Model;

use super::budget::{Budget, Stop};

/// GPT-2's split, as the `ByteLevel` pre-tokenizer writes it when `use_regex` is on.
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Splits longer than this are not remembered (long runs of spaces or of symbols are rare, and would
/// fill the memory).
const MAX_REMEMBERED_BYTES: usize = 48;
/// Remembered splits, in all; past it the memory is cleared and refilled.
const MAX_REMEMBERED: usize = 1 << 17;

/// The splitter and the remembered splits of one tokenizer.
pub(super) struct ByteWords {
    split: SysRegex,
    chars: [char; 256],
    words: RwLock<HashMap<Box<str>, Box<[u32]>>>,
}

impl std::fmt::Debug for ByteWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteWords").finish_non_exhaustive()
    }
}

impl ByteWords {
    /// The encoder for `tokenizer`; `None` where it would not be exact (the module's doc).
    pub(super) fn for_tokenizer(tokenizer: &tokenizers::Tokenizer) -> Option<Self> {
        if tokenizer.get_normalizer().is_some()
            || tokenizer.get_truncation().is_some()
            || tokenizer.get_padding().is_some()
            || tokenizer.get_added_tokens_decoder().values().any(|token| token.normalized)
        {
            return None;
        }
        let model = serde_json::to_value(tokenizer.get_model()).ok()?;
        if model["type"] != "BPE" || !model["dropout"].is_null() {
            return None;
        }
        let pattern = split_pattern(&serde_json::to_value(tokenizer.get_pre_tokenizer()?).ok()?)?;
        let encoder =
            Self { split: SysRegex::new(&pattern).ok()?, chars: byte_chars(), words: RwLock::default() };
        encoder.agrees_with(tokenizer).then_some(encoder)
    }

    /// Appends the ids of `piece` (a text holding no added token) to `ids`, each split not remembered
    /// paid for from `budget`.
    pub(super) fn encode(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        piece: &str,
        ids: &mut Vec<u32>,
        budget: &mut Budget,
    ) -> Result<(), Stop> {
        let mut learned: Vec<(std::ops::Range<usize>, Box<[u32]>)> = Vec::new();
        {
            let words = self.words.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut mapped = String::new();
            let mut word = |range: std::ops::Range<usize>| -> Result<(), Stop> {
                let text = &piece[range.clone()];
                if let Some(known) = words.get(text) {
                    ids.extend_from_slice(known);
                    return Ok(());
                }
                budget.spend(text.len())?;
                mapped.clear();
                mapped.extend(text.bytes().map(|b| self.chars[usize::from(b)]));
                let tokens =
                    tokenizer.get_model().tokenize(&mapped).map_err(|e| Stop::Failed(e.to_string()))?;
                let start = ids.len();
                ids.extend(tokens.iter().map(|token| token.id));
                if text.len() <= MAX_REMEMBERED_BYTES {
                    learned.push((range, ids[start..].into()));
                }
                Ok(())
            };
            // As the library's `Pattern for &SysRegex`: matches and the gaps between them, each a split.
            let mut at = 0;
            for (start, end) in self.split.find_iter(piece) {
                if at != start {
                    word(at..start)?;
                }
                word(start..end)?;
                at = end;
            }
            if at != piece.len() {
                word(at..piece.len())?;
            }
        }
        if !learned.is_empty() {
            let mut words = self.words.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            if words.len() + learned.len() > MAX_REMEMBERED {
                words.clear();
            }
            for (range, word_ids) in learned {
                words.entry(piece[range].into()).or_insert(word_ids);
            }
        }
        Ok(())
    }

    /// Whether a probe of letters, digits, contractions, runs of spaces and new lines, accented, CJK and
    /// emoji text tokenizes the same here as through the library, the first time and from memory.
    fn agrees_with(&self, tokenizer: &tokenizers::Tokenizer) -> bool {
        let probe =
            "Hello, world! It's 2026-12-07; we've 3 tasks:\n\n  - caf\u{e9} \u{4e2d}\u{6587} \u{1f35c}  \t\
                     x=y+1  \n \u{430}\u{431}\u{432} l'\u{e9}t\u{e9} DON'T   stop.\r\n   ";
        let whole = tokenizer.encode(probe, false).map(|encoding| encoding.get_ids().to_vec());
        let here = |_| {
            let mut ids = Vec::new();
            self.encode(tokenizer, probe, &mut ids, &mut Budget::unbounded()).map(|()| ids)
        };
        let agrees = [0, 1].map(here).iter().all(|ids| matches!((&whole, ids), (Ok(a), Ok(b)) if a == b));
        self.words.write().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        agrees
    }
}

/// The regex the pre-tokenizer splits with, when it is one of the two shapes this module reproduces.
fn split_pattern(pre_tokenizer: &serde_json::Value) -> Option<String> {
    let byte_level = |p: &serde_json::Value, use_regex: bool| {
        p["type"] == "ByteLevel" && p["add_prefix_space"] == false && p["use_regex"] == use_regex
    };
    if byte_level(pre_tokenizer, true) {
        return Some(GPT2_SPLIT.to_string());
    }
    let steps = pre_tokenizer["pretokenizers"].as_array().filter(|_| pre_tokenizer["type"] == "Sequence")?;
    let [split, last] = steps.as_slice() else { return None };
    let isolated = split["type"] == "Split" && split["behavior"] == "Isolated" && split["invert"] == false;
    if !isolated || !byte_level(last, false) {
        return None;
    }
    split["pattern"]["Regex"].as_str().map(str::to_string)
}

/// GPT-2's table from bytes to the printable characters byte-level vocabularies are written in.
fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut chars = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        chars[usize::from(b)] = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\0');
            next += 1;
            c
        };
    }
    chars
}

#[cfg(test)]
#[path = "byte_words_tests.rs"]
mod tests;
