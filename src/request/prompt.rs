//! Classifies a completions `prompt` or an embeddings `input` without copying it.
//!
//! Both accept a string, a list of strings, a list of token IDs or a list of token-ID lists. A string is
//! recognised from its first byte, so the common case (one long string) costs nothing beyond the main
//! parse. Only an array is walked a second time, element by element, to check that its elements agree in
//! type and to count token IDs; strings inside it are skipped, never copied.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

/// What a prompt-like value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PromptShape {
    /// One string; `empty` when it is `""`.
    Text { empty: bool },
    /// A list of strings (may be empty).
    Texts(usize),
    /// A list of token IDs, or a list of token-ID lists; the total number of IDs.
    TokenIds(usize),
}

impl PromptShape {
    pub(crate) fn is_empty(self) -> bool {
        match self {
            PromptShape::Text { empty } => empty,
            PromptShape::Texts(n) | PromptShape::TokenIds(n) => n == 0,
        }
    }

    pub(crate) fn token_ids(self) -> Option<usize> {
        match self {
            PromptShape::TokenIds(n) => Some(n),
            _ => None,
        }
    }
}

/// Why a prompt-like value was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShapeError {
    /// Neither a string nor an array.
    NotStringOrArray,
    /// An array whose elements are not all of the first element's kind.
    Mixed,
    /// An element that is neither a string, a token ID nor a token-ID list.
    BadElement,
}

/// Classifies the raw JSON of a `prompt` / `input` value (which serde_json has already validated).
pub(crate) fn classify(text: &str) -> Result<PromptShape, ShapeError> {
    match text.as_bytes().first() {
        // A string literal is `""` when empty; anything longer holds at least one character or escape.
        Some(b'"') => Ok(PromptShape::Text { empty: text.len() == 2 }),
        Some(b'[') => {
            let mut de = serde_json::Deserializer::from_str(text);
            match de.deserialize_seq(ArrayVisitor) {
                Ok(shape) => shape,
                // The value was valid JSON in the main parse, so a failure here can only come from our
                // visitor rejecting an element.
                Err(_) => Err(ShapeError::BadElement),
            }
        }
        _ => Err(ShapeError::NotStringOrArray),
    }
}

/// One element of a top-level prompt array.
enum Element {
    Text,
    TokenId,
    /// A nested list of token IDs, with its length.
    TokenIdList(usize),
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ElementVisitor)
    }
}

struct ElementVisitor;

impl<'de> Visitor<'de> for ElementVisitor {
    type Value = Element;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a token ID or a list of token IDs")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Element, E> {
        Ok(Element::Text)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Element, E> {
        token_id(v).map(|_| Element::TokenId)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
        let mut count = 0usize;
        while seq.next_element::<TokenId>()?.is_some() {
            count += 1;
        }
        Ok(Element::TokenIdList(count))
    }
}

/// A token ID inside a nested list.
struct TokenId;

impl<'de> Deserialize<'de> for TokenId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TokenIdVisitor;
        impl<'de> Visitor<'de> for TokenIdVisitor {
            type Value = TokenId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token ID")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TokenId, E> {
                token_id(v).map(|_| TokenId)
            }
        }
        deserializer.deserialize_u64(TokenIdVisitor)
    }
}

/// Token IDs are vocabulary indices: vLLM and the Go EPP take them as 32-bit unsigned integers.
fn token_id<E: de::Error>(v: u64) -> Result<u32, E> {
    u32::try_from(v).map_err(|_| E::custom("token ID out of range"))
}

/// Walks the top-level array. The outer `Result` is serde's; the inner one carries our verdict so that
/// a type mix can be reported precisely (the remaining elements are skipped, not classified).
struct ArrayVisitor;

impl<'de> Visitor<'de> for ArrayVisitor {
    type Value = Result<PromptShape, ShapeError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let Some(first) = seq.next_element::<Element>()? else {
            return Ok(Ok(PromptShape::Texts(0)));
        };
        let mut shape = match first {
            Element::Text => PromptShape::Texts(1),
            Element::TokenId => PromptShape::TokenIds(1),
            Element::TokenIdList(n) => PromptShape::TokenIds(n),
        };
        let nested = matches!(first, Element::TokenIdList(_));
        while let Some(element) = seq.next_element::<Element>()? {
            match (&mut shape, element) {
                (PromptShape::Texts(n), Element::Text) => *n += 1,
                (PromptShape::TokenIds(n), Element::TokenId) if !nested => *n += 1,
                (PromptShape::TokenIds(n), Element::TokenIdList(m)) if nested => *n += m,
                _ => {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    return Ok(Err(ShapeError::Mixed));
                }
            }
        }
        Ok(Ok(shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(json: &str) -> Result<PromptShape, ShapeError> {
        classify(json)
    }

    #[test]
    fn strings() {
        assert_eq!(shape(r#""hi""#), Ok(PromptShape::Text { empty: false }));
        assert_eq!(shape(r#""""#), Ok(PromptShape::Text { empty: true }));
        assert_eq!(shape(r#""\n""#), Ok(PromptShape::Text { empty: false }));
        assert_eq!(shape(r#"["a", "", "c\u00e9"]"#), Ok(PromptShape::Texts(3)));
        assert_eq!(shape("[]"), Ok(PromptShape::Texts(0)));
        assert!(shape("[]").unwrap().is_empty());
    }

    #[test]
    fn token_ids_flat_and_nested() {
        assert_eq!(shape("[1, 2, 3]"), Ok(PromptShape::TokenIds(3)));
        assert_eq!(shape("[[1, 2], [3], []]"), Ok(PromptShape::TokenIds(3)));
        assert_eq!(shape("[[1, 2]]").unwrap().token_ids(), Some(2));
        assert_eq!(shape("[[]]"), Ok(PromptShape::TokenIds(0)));
    }

    #[test]
    fn rejects_bad_shapes() {
        assert_eq!(shape("42"), Err(ShapeError::NotStringOrArray));
        assert_eq!(shape("{}"), Err(ShapeError::NotStringOrArray));
        assert_eq!(shape("null"), Err(ShapeError::NotStringOrArray));
        assert_eq!(shape(r#"["a", 1]"#), Err(ShapeError::Mixed));
        assert_eq!(shape(r#"[1, "a"]"#), Err(ShapeError::Mixed));
        assert_eq!(shape("[1, [2]]"), Err(ShapeError::Mixed));
        assert_eq!(shape("[[1], 2]"), Err(ShapeError::Mixed));
        assert_eq!(shape("[-1]"), Err(ShapeError::BadElement));
        assert_eq!(shape("[1.5]"), Err(ShapeError::BadElement));
        assert_eq!(shape("[4294967296]"), Err(ShapeError::BadElement));
        assert_eq!(shape("[[\"a\"]]"), Err(ShapeError::BadElement));
        assert_eq!(shape("[null]"), Err(ShapeError::BadElement));
        assert_eq!(shape("[{}]"), Err(ShapeError::BadElement));
    }
}
