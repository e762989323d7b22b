use super::ParsedRequest;
/// Token estimator (work in progress).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenEstimator;
impl TokenEstimator {
    pub fn estimate(&self, bytes: usize, _p: Option<&ParsedRequest>) -> (u64, u64) {
        (bytes as u64 / 4, bytes as u64 / 4 * 5 / 2)
    }
}
