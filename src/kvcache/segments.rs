//! Tokenizing a rendered chat prompt piece by piece, with the pieces remembered: a chat template writes
//! special tokens (`<|im_start|>`, `<|eot_id|>`) between messages, and Hugging Face's tokenizer splits the
//! text at its added tokens before anything else (`AddedVocabulary::extract_and_normalize`), so each piece
//! between two of them is normalized, pre-tokenized and encoded on its own. A system prompt shared by every
//! request is then the same piece with the same ids every time: it is tokenized once and looked up after,
//! and a chat request costs the tokenizer only its new turns (llm-d's kv-cache manager keeps a prefix store
//! of tokenized text for the same reason).
//!
//! Exact only where a piece's ids do not depend on where it sits, so it is used only when:
//! - no added token strips whitespace around it or matches single words only (`lstrip`, `rstrip`,
//!   `single_word`), which would move the split points;
//! - nothing is `Metaspace`: its `prepend_scheme: first` marks only the piece at offset 0 of the whole
//!   input (SentencePiece-style models, Llama 2, Mistral's older tokenizers);
//! - and a probe text tokenizes the same both ways when the tokenizer loads.
//!
//! Otherwise the whole text is tokenized every time, as before.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};

use super::budget::{Budget, Stop};
use super::byte_words::ByteWords;

/// Pieces shorter than this are tokenized every time: cheaper than remembering them.
const MIN_CACHED_BYTES: usize = 64;
/// The remembered ids, in all; past it the memory is cleared and refilled (a shared prompt comes back at
/// once). About 16 MiB.
const MAX_CACHED_IDS: usize = 4 << 20;

/// The added tokens a text is split at, and the pieces already tokenized.
pub(super) struct Segmenter {
    splitter: AhoCorasick,
    /// A piece's splits remembered word by word, where that is exact ([`super::byte_words`]).
    words: Option<ByteWords>,
    /// The id of each of `splitter`'s patterns.
    ids: Vec<u32>,
    pieces: RwLock<Pieces>,
}

#[derive(Default)]
struct Pieces {
    by_hash: HashMap<u64, (usize, Arc<[u32]>)>,
    ids: usize,
}

impl std::fmt::Debug for Segmenter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segmenter").field("added_tokens", &self.ids.len()).finish_non_exhaustive()
    }
}

impl Segmenter {
    /// A segmenter for `tokenizer`; `None` where splitting would not be exact (the module's doc).
    pub(super) fn for_tokenizer(tokenizer: &tokenizers::Tokenizer) -> Option<Self> {
        let shape = |part: Option<String>| part.is_some_and(|json| json.contains("Metaspace"));
        if shape(tokenizer.get_normalizer().and_then(|n| serde_json::to_string(n).ok()))
            || shape(tokenizer.get_pre_tokenizer().and_then(|p| serde_json::to_string(p).ok()))
            || shape(tokenizer.get_decoder().and_then(|d| serde_json::to_string(d).ok()))
        {
            return None;
        }
        let mut added: Vec<(String, u32)> = Vec::new();
        for (id, token) in tokenizer.get_added_tokens_decoder() {
            if token.lstrip || token.rstrip || token.single_word {
                return None;
            }
            if !token.normalized {
                added.push((token.content, id));
            }
        }
        if added.is_empty() {
            return None;
        }
        added.sort_by_key(|(_, id)| *id);
        let splitter = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(added.iter().map(|(content, _)| content))
            .ok()?;
        let segmenter = Self {
            splitter,
            words: ByteWords::for_tokenizer(tokenizer),
            ids: added.iter().map(|(_, id)| *id).collect(),
            pieces: RwLock::default(),
        };
        segmenter.agrees_with(tokenizer, &added).then_some(segmenter)
    }

    /// The ids of `text` (no special tokens added), piece by piece.
    pub(super) fn encode(&self, tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>, String> {
        self.encode_within(tokenizer, text, &mut Budget::unbounded()).map_err(|stop| match stop {
            Stop::Failed(message) => message,
            Stop::OverBudget => "an unbounded encode ran over its budget".to_string(),
        })
    }

    /// [`Self::encode`], the text the model is given paid for from `budget`: a bounded encode stops
    /// as soon as what is not remembered costs more (what it finished before stays remembered; the piece
    /// it stopped in does not).
    pub(super) fn encode_within(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        text: &str,
        budget: &mut Budget,
    ) -> Result<Vec<u32>, Stop> {
        let mut ids = Vec::new();
        let mut at = 0;
        for found in self.splitter.find_iter(text) {
            self.encode_piece(tokenizer, &text[at..found.start()], &mut ids, budget)?;
            ids.push(self.ids[found.pattern().as_usize()]);
            at = found.end();
        }
        self.encode_piece(tokenizer, &text[at..], &mut ids, budget)?;
        Ok(ids)
    }

    fn encode_piece(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        piece: &str,
        ids: &mut Vec<u32>,
        budget: &mut Budget,
    ) -> Result<(), Stop> {
        if piece.is_empty() {
            return Ok(());
        }
        if piece.len() < MIN_CACHED_BYTES {
            return self.encode_new(tokenizer, piece, ids, budget);
        }
        let hash = xxhash_rust::xxh64::xxh64(piece.as_bytes(), 0);
        let known =
            self.pieces.read().unwrap_or_else(std::sync::PoisonError::into_inner).by_hash.get(&hash).cloned();
        if let Some((_, cached)) = known.filter(|(len, _)| *len == piece.len()) {
            ids.extend_from_slice(&cached);
            return Ok(());
        }
        let start = ids.len();
        self.encode_new(tokenizer, piece, ids, budget)?;
        let encoded: Arc<[u32]> = ids[start..].into();
        let mut pieces = self.pieces.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if pieces.ids + encoded.len() > MAX_CACHED_IDS {
            *pieces = Pieces::default();
        }
        pieces.ids += encoded.len();
        pieces.by_hash.insert(hash, (piece.len(), encoded));
        Ok(())
    }

    /// Appends the ids of a piece not remembered whole.
    fn encode_new(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        piece: &str,
        ids: &mut Vec<u32>,
        budget: &mut Budget,
    ) -> Result<(), Stop> {
        match &self.words {
            Some(words) => words.encode(tokenizer, piece, ids, budget),
            None => {
                budget.spend(piece.len())?;
                ids.extend(encode_ids(tokenizer, piece, false).map_err(Stop::Failed)?);
                Ok(())
            }
        }
    }

    /// Whether the pieces' splits are remembered word by word ([`super::byte_words`]).
    pub(super) fn remembers_words(&self) -> bool {
        self.words.is_some()
    }

    /// Whether a probe holding two of the added tokens, spaces and new lines around them, and a piece long
    /// enough to be remembered, tokenizes the same piece by piece as whole.
    fn agrees_with(&self, tokenizer: &tokenizers::Tokenizer, added: &[(String, u32)]) -> bool {
        let first = &added[0].0;
        let last = &added[added.len() - 1].0;
        let long = "A shared system prompt, long enough to be remembered: 1, 2, 3.\n\n  Indented 'quotes'. ";
        let probe =
            format!("{first}system\n{long}{last} \n{first}user\n  hi there \u{e9}\u{1f35c}{last}\n{first}");
        let whole = encode_ids(tokenizer, &probe, false);
        let pieces = self.encode(tokenizer, &probe).and_then(|_| self.encode(tokenizer, &probe));
        let agrees = matches!((&whole, &pieces), (Ok(a), Ok(b)) if a == b);
        *self.pieces.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Pieces::default();
        agrees
    }
}

/// The ids of `text`, with the tokenizer's special tokens added or not.
pub(super) fn encode_ids(
    tokenizer: &tokenizers::Tokenizer,
    text: &str,
    add_special_tokens: bool,
) -> Result<Vec<u32>, String> {
    let encoding = tokenizer.encode(text, add_special_tokens).map_err(|e| e.to_string())?;
    Ok(encoding.get_ids().to_vec())
}
