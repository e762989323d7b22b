//! Chat text as `token-producer` tokenizes it in process (`tokenizerFile`): split at the added tokens,
//! each piece split with the byte-level pre-tokenizer's regex and its words' ids remembered
//! (`src/kvcache/byte_words.rs`), against the tokenizers library over the whole text. The text is the
//! user's, so any bytes.
//!
//! Invariant beyond "no panic": the ids are the library's, the first time and from memory, for a GPT-2
//! shaped pre-tokenizer and a Llama 3 shaped one (the input's first byte picks, its other bits a budget
//! for the bounded encodes epp runs in place, which give the same ids or none); and so are a completions
//! prompt's, the post-processor's special tokens (the Llama 3 shaped one's BOS) around them. The
//! tokenizers are small (every byte a token, a few merges, one added token), so the splits and their
//! edges are what is exercised, with the library's own BPE behind them.

use std::sync::LazyLock;

use epp::kvcache::LocalTokenizer;

/// Small byte-level BPE tokenizers in the shapes of GPT-2's and Llama 3's (the fixtures' provenance is in
/// `src/kvcache/byte_words_tests.rs`, whose unit tests load them too).
const TOKENIZER_FILES: [&str; 2] = [
    include_str!("../../../tests/fixtures/byte-level-bpe-gpt2.tokenizer.json"),
    include_str!("../../../tests/fixtures/byte-level-bpe-llama3.tokenizer.json"),
];

static TOKENIZERS: LazyLock<[Option<LocalTokenizer>; 2]> = LazyLock::new(|| TOKENIZER_FILES.map(load));

pub fn run(data: &[u8]) {
    let Some((&pick, text)) = data.split_first() else { return };
    let Some(tokenizer) = &TOKENIZERS[usize::from(pick & 1)] else {
        panic!("the fuzz tokenizer did not load, or loaded without remembered words")
    };
    let text = String::from_utf8_lossy(text);
    let whole = tokenizer.encode_rendered_whole(&text).map_err(|e| e.to_string());
    let prompt = tokenizer.encode_whole(&text).map_err(|e| e.to_string());
    // A bounded encode (what is tokenized in place) either declines or gives the same ids.
    let budget = usize::from(pick >> 1) * 16;
    if let Some(bounded) = tokenizer.encode_rendered_remembered(&text, budget) {
        assert_eq!(bounded.map_err(|e| e.to_string()), whole, "within {budget} bytes: {text:?}");
    }
    if let Some(bounded) = tokenizer.encode_remembered(&text, budget) {
        assert_eq!(bounded.map_err(|e| e.to_string()), prompt, "a prompt within {budget} bytes: {text:?}");
    }
    for round in 0..2 {
        let here = tokenizer.encode_rendered(&text).map_err(|e| e.to_string());
        assert_eq!(here, whole, "round {round}: {text:?}");
        let here = tokenizer.encode(&text).map_err(|e| e.to_string());
        assert_eq!(here, prompt, "round {round}, as a completions prompt: {text:?}");
    }
}

/// A tokenizer file loaded as epp loads one.
fn load(json: &str) -> Option<LocalTokenizer> {
    let path =
        std::env::temp_dir().join(format!("epp-fuzz-byte-words-{}-{}.json", std::process::id(), json.len()));
    std::fs::write(&path, json).ok()?;
    let loaded = LocalTokenizer::load(&path).ok();
    let _ = std::fs::remove_file(&path);
    loaded.filter(LocalTokenizer::remembers_words)
}
