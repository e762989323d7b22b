//! A client's OpenAI request body: the one-pass parser, the model splice a rewrite makes, the token
//! estimate.
//!
//! Input: one byte choosing the request path, then the body. Invariants beyond "no panic":
//! - the parse (its fast structural walk, or serde_json where the walk declines a body) gives exactly
//!   what serde_json alone gives, error messages included;
//! - the parsed `model_span` holds exactly the JSON string literal of the parsed `model`, and the
//!   prefix span lies within the body;
//! - splicing another model name into the span gives a body that parses again with that name and with
//!   everything else routing reads unchanged (a rewrite must not corrupt the request).

use epp::request::{
    api_kind_for_path, is_inference_create, parse_request, parse_request_with_serde, splice_model,
    TokenEstimator,
};

/// Paths a request may arrive on: every API, prefixed and query-string forms, and non-inference paths.
pub const PATHS: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/conversations",
    "/openai/v1/chat/completions?api-version=1",
    "/v1/models",
    "/",
];

/// A replacement name that needs escaping in JSON.
const NEW_MODEL: &str = "rewritten \"model\" \u{e9}\\/\n";

pub fn run(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else { return };
    let path = PATHS[usize::from(selector) % PATHS.len()];
    let _ = (api_kind_for_path(path), is_inference_create(path));
    let result = parse_request(path, body);
    assert_eq!(result, parse_request_with_serde(path, body), "the fast parse and serde_json disagree");
    let Ok(parsed) = result else { return };

    let literal = body.get(parsed.model_span.clone()).expect("the model span lies within the body");
    let unescaped: String = serde_json::from_slice(literal).expect("the model span is a JSON string literal");
    assert_eq!(unescaped, parsed.model, "the model span holds another string than the parsed model");
    assert!(parsed.prefix_span.end <= body.len(), "the prefix span ends past the body");
    assert!(parsed.prefix_span.start <= parsed.prefix_span.end, "an inverted prefix span");

    let estimator = TokenEstimator::default();
    let (input, output) = estimator.estimate(body.len(), Some(&parsed));
    let _ = estimator.estimate_output_capped(body.len(), Some(&parsed));
    let _ = input.checked_add(output);

    let spliced = splice_model(body, parsed.model_span.clone(), NEW_MODEL);
    let reparsed = parse_request(path, &spliced).expect("a body with a rewritten model parses");
    assert_eq!(reparsed.model, NEW_MODEL);
    assert_eq!(
        (reparsed.api, reparsed.stream, reparsed.max_tokens, reparsed.prompt_token_ids, &reparsed.cache_salt),
        (parsed.api, parsed.stream, parsed.max_tokens, parsed.prompt_token_ids, &parsed.cache_salt),
        "the rewrite changed what routing reads"
    );
    assert_eq!(
        reparsed.prefix_bytes(&spliced),
        parsed.prefix_bytes(body),
        "the rewrite changed the prompt bytes hashed for prefix affinity"
    );
}
