use super::ParsedRequest;
use crate::error::RequestError;

/// Parses an OpenAI request body (work in progress).
pub fn parse_request(_path: &str, _body: &[u8]) -> Result<ParsedRequest, RequestError> {
    Err(RequestError::internal("not yet"))
}
