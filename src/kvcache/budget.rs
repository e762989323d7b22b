//! A budget for tokenizing in place: how much text a bounded encode may still give the model, the rest
//! of its input found remembered ([`super::segments`], [`super::byte_words`]). `token-producer` tokenizes
//! a request on its async task only within one, so no request holds a worker for long; past it the
//! encode stops and the request is tokenized on a blocking thread.

/// What the model costs, in bytes charged, per call on top of the text it is given: a short split is
/// not free.
const CALL_BYTES: usize = 64;

/// How much text a bounded encode may still give the model (the rest must be remembered), in bytes,
/// each call charged [`CALL_BYTES`] more; unbounded for a plain encode.
#[derive(Debug)]
pub(super) struct Budget(Option<usize>);

impl Budget {
    pub(super) fn unbounded() -> Self {
        Self(None)
    }

    pub(super) fn bytes(bytes: usize) -> Self {
        Self(Some(bytes))
    }

    /// Pays for `text_bytes` through the model, or stops the encode if that is more than is left.
    pub(super) fn spend(&mut self, text_bytes: usize) -> Result<(), Stop> {
        if let Some(left) = &mut self.0 {
            *left = left.checked_sub(text_bytes + CALL_BYTES).ok_or(Stop::OverBudget)?;
        }
        Ok(())
    }
}

/// Why an encode stopped.
#[derive(Debug)]
pub(super) enum Stop {
    /// The tokenizer failed.
    Failed(String),
    /// It needed the model for more than its [`Budget`].
    OverBudget,
}
