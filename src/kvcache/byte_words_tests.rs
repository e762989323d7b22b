use super::*;

/// Two small byte-level BPE tokenizers in the shapes of GPT-2's and Llama 3's (every byte a token, a few
/// merges: " t", "he", " the", "in", "ing", "12"; one added token; the pre-tokenizers as those models'
/// tokenizer.json files write them). The fuzz target `byte_words` loads the same files.
const GPT2: &str = include_str!("../../tests/fixtures/byte-level-bpe-gpt2.tokenizer.json");
const LLAMA3: &str = include_str!("../../tests/fixtures/byte-level-bpe-llama3.tokenizer.json");

fn tokenizer(json: &str) -> tokenizers::Tokenizer {
    json.parse().expect("tokenizer")
}

/// `GPT2` with another pre-tokenizer.
fn with_pre_tokenizer(pre_tokenizer: &str) -> tokenizers::Tokenizer {
    let mut json: serde_json::Value = serde_json::from_str(GPT2).expect("json");
    json["pre_tokenizer"] = serde_json::from_str(pre_tokenizer).expect("pre-tokenizer");
    tokenizer(&json.to_string())
}

/// Texts drawn from letters, digits, apostrophes, punctuation, every kind of white space and multi-byte
/// characters, so the splits' edges (a space before a word, runs of spaces before a word or a line's
/// end, contractions, digits in threes) all come up.
fn texts() -> impl Iterator<Item = String> {
    let alphabet = [
        "the",
        "thing",
        "in",
        "12",
        "3",
        "4567",
        " ",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        "'s",
        "'re",
        "'T",
        "DON'T",
        ",",
        "!?",
        "-",
        "caf\u{e9}",
        "\u{4e2d}\u{6587}",
        "\u{1f35c}",
        "\u{430}\u{431}",
        "x=y",
        "\u{a0}",
    ];
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(7);
    (0..400).map(move |_| {
        let words = rand::Rng::random_range(&mut rng, 0..24);
        (0..words).map(|_| alphabet[rand::Rng::random_range(&mut rng, 0..alphabet.len())]).collect()
    })
}

fn assert_same_as_library(json: &str) {
    let tokenizer = tokenizer(json);
    let words = ByteWords::for_tokenizer(&tokenizer).expect("the shape is supported and the probe agrees");
    for round in 0..2 {
        for text in texts() {
            let mut ids = Vec::new();
            words.encode(&tokenizer, &text, &mut ids, &mut Budget::unbounded()).expect("encode");
            let library = tokenizer.encode(text.as_str(), false).expect("library").get_ids().to_vec();
            assert_eq!(ids, library, "round {round}: {text:?}");
        }
    }
    assert!(!words.words.read().expect("lock").is_empty(), "splits are remembered");
}

#[test]
fn gpt2_byte_level_gives_the_librarys_ids() {
    assert_same_as_library(GPT2);
}

#[test]
fn llama3_split_then_byte_level_gives_the_librarys_ids() {
    assert_same_as_library(LLAMA3);
}

#[test]
fn other_pipelines_are_left_to_the_library() {
    let prefix_space =
        r#"{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}"#;
    assert!(ByteWords::for_tokenizer(&with_pre_tokenizer(prefix_space)).is_none(), "a prefix space");
    let metaspace =
        r#"{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}"#;
    assert!(ByteWords::for_tokenizer(&with_pre_tokenizer(metaspace)).is_none(), "Metaspace");
    let whitespace = r#"{"type": "Whitespace"}"#;
    assert!(ByteWords::for_tokenizer(&with_pre_tokenizer(whitespace)).is_none(), "another pre-tokenizer");
    let mut normalized = tokenizer(GPT2);
    normalized.with_normalizer(Some(tokenizers::normalizers::NFC)).expect("normalizer");
    assert!(ByteWords::for_tokenizer(&normalized).is_none(), "a normalizer");
}

#[test]
fn byte_table_is_gpt2s() {
    let chars = byte_chars();
    assert_eq!(chars[usize::from(b'a')], 'a');
    assert_eq!(chars[usize::from(b' ')], '\u{120}', "the space is 'Ġ'");
    assert_eq!(chars[usize::from(b'\n')], '\u{10a}', "the new line is 'Ċ'");
    assert_eq!(chars[0xAD], '\u{143}');
    let distinct: std::collections::HashSet<char> = chars.iter().copied().collect();
    assert_eq!(distinct.len(), 256);
}
