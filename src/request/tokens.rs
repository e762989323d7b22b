//! The token estimate the in-flight load counters charge per request, before any tokenizer has run.
//!
//! It follows the Go EPP's `SimpleTokenEstimator` exactly
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/token_estimator.go)
//! so that token-load scores and dashboards read the same: the input is the raw body size divided by
//! characters-per-token, the output a fixed ratio of the input.

use serde::Deserialize;

use super::ParsedRequest;

/// Estimates input and total (input + expected output) tokens of a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenEstimator {
    /// Bytes of request body per input token (Go default 4).
    pub chars_per_token: f64,
    /// Expected output tokens per input token (Go default 1.5).
    pub output_ratio: f64,
}

impl Default for TokenEstimator {
    fn default() -> Self {
        Self { chars_per_token: 4.0, output_ratio: 1.5 }
    }
}

/// A token-estimator parameter that is not a positive, finite number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("token estimator parameter {name} must be a positive finite number, got {value}")]
pub struct TokenEstimatorError {
    pub name: &'static str,
    pub value: f64,
}

/// Plugin parameters for the estimator, as written in an EndpointPickerConfig (camelCase, as the Go
/// names). Missing fields take the Go defaults.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TokenEstimatorParams {
    pub characters_per_token: f64,
    pub output_ratio: f64,
}

impl Default for TokenEstimatorParams {
    fn default() -> Self {
        let d = TokenEstimator::default();
        Self { characters_per_token: d.chars_per_token, output_ratio: d.output_ratio }
    }
}

impl TryFrom<TokenEstimatorParams> for TokenEstimator {
    type Error = TokenEstimatorError;

    fn try_from(p: TokenEstimatorParams) -> Result<Self, Self::Error> {
        TokenEstimator::new(p.characters_per_token, p.output_ratio)
    }
}

impl TokenEstimator {
    /// An estimator with both parameters checked to be positive and finite.
    pub fn new(chars_per_token: f64, output_ratio: f64) -> Result<Self, TokenEstimatorError> {
        for (name, value) in [("charactersPerToken", chars_per_token), ("outputRatio", output_ratio)] {
            if !(value.is_finite() && value > 0.0) {
                return Err(TokenEstimatorError { name, value });
            }
        }
        Ok(Self { chars_per_token, output_ratio })
    }

    /// `(input_tokens, total_tokens)` with the Go semantics:
    /// - a non-empty body: input = max(⌊bytes / chars_per_token⌋, 1) (integer division for the default 4);
    /// - an empty body: the token-ID count when the prompt was given as IDs, else 0 (the Go fallback to
    ///   the prompt text needs the body, which an empty body does not have);
    /// - output = round(input × output_ratio), rounding half away from zero like Go's `math.Round`.
    pub fn estimate(&self, request_bytes: usize, parsed: Option<&ParsedRequest>) -> (u64, u64) {
        let input = self.input_tokens(request_bytes, parsed);
        (input, input.saturating_add(self.output_tokens(input)))
    }

    /// Like [`estimate`](Self::estimate), but the output estimate never exceeds the request's own
    /// `max_tokens` limit when it has one: a request cannot generate more than it allows.
    pub fn estimate_output_capped(&self, request_bytes: usize, parsed: Option<&ParsedRequest>) -> (u64, u64) {
        let input = self.input_tokens(request_bytes, parsed);
        let mut output = self.output_tokens(input);
        if let Some(limit) = parsed.and_then(|p| p.max_tokens) {
            output = output.min(limit);
        }
        (input, input.saturating_add(output))
    }

    fn input_tokens(&self, request_bytes: usize, parsed: Option<&ParsedRequest>) -> u64 {
        if request_bytes > 0 {
            // `as` saturates for out-of-range floats; body sizes are far below 2^53 so this is exact.
            let tokens = (request_bytes as f64 / self.chars_per_token).floor() as u64;
            return tokens.max(1);
        }
        parsed.and_then(|p| p.prompt_token_ids).map_or(0, |n| n as u64)
    }

    fn output_tokens(&self, input: u64) -> u64 {
        (input as f64 * self.output_ratio).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::parse_request;

    #[test]
    fn go_semantics_on_body_size() {
        let e = TokenEstimator::default();
        assert_eq!(e.estimate(0, None), (0, 0));
        assert_eq!(e.estimate(1, None), (1, 3)); // max(0, 1) = 1; round(1.5) = 2
        assert_eq!(e.estimate(7, None), (1, 3));
        assert_eq!(e.estimate(8, None), (2, 5));
        assert_eq!(e.estimate(12, None), (3, 8)); // round(4.5) = 5, half away from zero
        assert_eq!(e.estimate(220_000, None), (55_000, 55_000 + 82_500));
    }

    #[test]
    fn empty_body_falls_back_to_token_ids() {
        let e = TokenEstimator::default();
        let p = parse_request("/v1/completions", br#"{"model":"m","prompt":[1,2,3,4]}"#).unwrap();
        assert_eq!(e.estimate(0, Some(&p)), (4, 10));
        // A body size wins over the hint, as in Go.
        assert_eq!(e.estimate(100, Some(&p)), (25, 25 + 38));
        let text = parse_request("/v1/completions", br#"{"model":"m","prompt":"x"}"#).unwrap();
        assert_eq!(e.estimate(0, Some(&text)), (0, 0));
    }

    #[test]
    fn custom_parameters() {
        let e = TokenEstimator::new(2.5, 0.5).unwrap();
        assert_eq!(e.estimate(10, None), (4, 6));
        assert_eq!(e.estimate(9, None), (3, 5)); // 3.6 → 3; round(1.5) = 2
    }

    #[test]
    fn capped_output_respects_max_tokens() {
        let e = TokenEstimator::default();
        let p = parse_request("/v1/completions", br#"{"model":"m","prompt":"x","max_tokens":10}"#).unwrap();
        assert_eq!(e.estimate_output_capped(400, Some(&p)), (100, 110));
        assert_eq!(e.estimate(400, Some(&p)), (100, 250));
        assert_eq!(e.estimate_output_capped(4, Some(&p)), (1, 3));
        assert_eq!(e.estimate_output_capped(400, None), (100, 250));
    }

    #[test]
    fn params_deserialize_and_validate() {
        let p: TokenEstimatorParams =
            serde_json::from_str(r#"{"charactersPerToken":3,"outputRatio":2}"#).unwrap();
        assert_eq!(TokenEstimator::try_from(p).unwrap(), TokenEstimator::new(3.0, 2.0).unwrap());
        let p: TokenEstimatorParams = serde_json::from_str("{}").unwrap();
        assert_eq!(TokenEstimator::try_from(p).unwrap(), TokenEstimator::default());
        assert!(serde_json::from_str::<TokenEstimatorParams>(r#"{"chars":3}"#).is_err());
        for (cpt, ratio, bad) in [(0.0, 1.0, "charactersPerToken"), (-1.0, 1.0, "charactersPerToken")] {
            assert_eq!(TokenEstimator::new(cpt, ratio).unwrap_err().name, bad);
        }
        assert_eq!(TokenEstimator::new(4.0, f64::NAN).unwrap_err().name, "outputRatio");
        assert_eq!(TokenEstimator::new(f64::INFINITY, 1.0).unwrap_err().name, "charactersPerToken");
        let e = TokenEstimator::new(4.0, 0.0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "token estimator parameter outputRatio must be a positive finite number, got 0"
        );
    }
}
