/// Replaces the model literal (work in progress).
pub fn splice_model(body: &[u8], _span: std::ops::Range<usize>, _model: &str) -> Vec<u8> {
    body.to_vec()
}
/// Rewrites the model name in a response chunk (work in progress).
pub fn rewrite_response_model(_chunk: &[u8], _from: &str, _to: &str) -> Option<Vec<u8>> {
    None
}
