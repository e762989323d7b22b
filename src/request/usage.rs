use crate::scheduling::Usage;
/// Parses usage from a JSON response (work in progress).
pub fn parse_usage_json(_body: &[u8]) -> Option<Usage> {
    None
}
/// Scans SSE chunks for usage (work in progress).
#[derive(Debug, Default)]
pub struct UsageScanner;
impl UsageScanner {
    pub fn feed(&mut self, _c: &[u8]) {}
    pub fn usage(&self) -> Option<Usage> {
        None
    }
}
