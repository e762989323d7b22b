//! Why one scrape failed: the scrape loop's error, shared by its two clients (`super::http1`, reqwest).

use std::time::Duration;

use super::extractor::ExtractError;

/// Why one scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("building the HTTP client: {0}")]
    Client(String),
    #[error("scrape timed out after {0:?}")]
    Timeout(Duration),
    #[error("request failed: {0}")]
    Request(String),
    #[error("unexpected HTTP status {0}")]
    Status(u16),
    #[error("page larger than {0} bytes")]
    TooLarge(usize),
    /// The page was read and what could be extracted was published, but something was missing.
    #[error("{0}")]
    Extract(#[from] ExtractError),
}
