//! One scrape loop per endpoint: fetch `/metrics`, extract, publish into the endpoint's telemetry slot.
//!
//! Timing follows the Go EPP (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/datalayer/collector.go): a 50ms ticker that delays
//! rather than bursts after a slow poll, a 1s bound on each poll, a 10s HTTP client timeout behind it,
//! non-200 as an error. A plain-`http` endpoint's loop keeps its own connection alive and speaks HTTP/1.1
//! itself ([`super::http1`], for the idle cost); `https` goes through one `reqwest::Client` shared by all
//! loops, which keeps connections alive per endpoint. Errors are logged only when the state changes (healthy → failing, one failure → a different one,
//! failing → recovered): at 20 polls a second a down endpoint would otherwise flood the log.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::engines::{EngineMapping, EngineSet};
use super::extractor::extract;
use super::http1::Http1Scrape;
use super::name_filter::{Answer, PageFilter};
pub use super::scrape_error::ScrapeError;
use crate::datastore::Endpoint;

/// Called after each scrape that published new telemetry (the flow controller uses it to wake dispatch).
pub type TelemetryUpdated = Arc<dyn Fn() + Send + Sync>;

/// How endpoints are scraped.
#[derive(Clone)]
pub struct ScrapeConfig {
    /// Time between polls of one endpoint (`--refresh-metrics-interval`, default 50ms).
    pub refresh_interval: Duration,
    /// Bound on one poll, request and body together (default 1s).
    pub poll_timeout: Duration,
    /// The HTTP client's own timeout (default 10s); the poll timeout normally fires first (the lower of
    /// the two bounds a plain-http poll).
    pub http_timeout: Duration,
    /// Accept any TLS certificate for `https` scrapes (`insecureSkipVerify`, default true).
    pub insecure_skip_verify: bool,
    /// A page larger than this is an error rather than a memory spike (default 16 MiB).
    pub max_page_bytes: usize,
    /// Ask each server for only the families epp reads (`metrics-data-source`'s `nameFilter`, default
    /// true; [`super::name_filter`]).
    pub name_filter: bool,
    pub engines: Arc<EngineSet>,
    pub on_update: Option<TelemetryUpdated>,
}

impl Default for ScrapeConfig {
    fn default() -> Self {
        Self {
            refresh_interval: Duration::from_millis(50),
            poll_timeout: Duration::from_secs(1),
            http_timeout: Duration::from_secs(10),
            insecure_skip_verify: true,
            max_page_bytes: 16 << 20,
            name_filter: true,
            engines: Arc::new(EngineSet::builtin()),
            on_update: None,
        }
    }
}

impl fmt::Debug for ScrapeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrapeConfig")
            .field("refresh_interval", &self.refresh_interval)
            .field("poll_timeout", &self.poll_timeout)
            .field("http_timeout", &self.http_timeout)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("max_page_bytes", &self.max_page_bytes)
            .field("name_filter", &self.name_filter)
            .field("engines", &self.engines)
            .field("on_update", &self.on_update.is_some())
            .finish()
    }
}

/// What one endpoint's scrape loop keeps between polls: the page buffer, which form of the page it asks
/// for, and for a plain-http URL its own connection.
#[derive(Debug)]
pub struct ScrapeConnection {
    page: Vec<u8>,
    filter: PageFilter,
    plain: Option<Http1Scrape>,
}

impl ScrapeConnection {
    /// A connection that asks for the whole page.
    pub fn new(metrics_url: &str) -> Self {
        Self::filtered(metrics_url, &[], false)
    }

    /// A connection that asks for only `names` when `enabled`, as far as the server honours it.
    pub fn filtered(metrics_url: &str, names: &[String], enabled: bool) -> Self {
        let filter = PageFilter::new(metrics_url, names, enabled);
        let mut plain = Http1Scrape::for_url(metrics_url);
        if let Some(plain) = &mut plain {
            plain.set_url(filter.url());
        }
        Self { page: Vec::new(), filter, plain }
    }

    /// True while the server answers with only the families asked for.
    pub fn is_filtered(&self) -> bool {
        self.filter.is_filtered()
    }

    /// The URL the next poll asks for.
    pub fn url(&self) -> &str {
        self.filter.url()
    }

    /// Records what the current form of the page got; true when the caller should fetch again now.
    fn record(&mut self, answer: Answer) -> bool {
        let form = self.filter.form();
        let again = self.filter.record(answer);
        // Most polls keep the form (a filtering server answers Filtered every time): rebuild the request
        // only when it changed.
        if self.filter.form() != form {
            if let Some(plain) = &mut self.plain {
                plain.set_url(self.filter.url());
            }
            if self.filter.is_whole() {
                tracing::debug!(url = %self.filter.url(), "the server does not filter its page by name: scraping it whole");
            }
        }
        again
    }
}

/// Shared by every endpoint's scrape loop: the HTTP client and the configuration.
#[derive(Debug)]
pub struct Scraper {
    client: reqwest::Client,
    config: ScrapeConfig,
}

impl Scraper {
    pub fn new(config: ScrapeConfig) -> Result<Self, ScrapeError> {
        let client = reqwest::Client::builder()
            .timeout(config.http_timeout)
            .pool_max_idle_per_host(2)
            .danger_accept_invalid_certs(config.insecure_skip_verify)
            .build()
            .map_err(|e| ScrapeError::Client(error_chain(&e)))?;
        Ok(Self { client, config })
    }

    pub fn config(&self) -> &ScrapeConfig {
        &self.config
    }

    /// One poll of `endpoint` over `connection` (kept across polls): fetch, extract with `engine`,
    /// publish. On an extraction problem the partial metrics are still published and the problem returned.
    pub async fn scrape_once(
        &self,
        endpoint: &Endpoint,
        engine: &EngineMapping,
        connection: &mut ScrapeConnection,
    ) -> Result<(), ScrapeError> {
        let extraction = loop {
            let fetched = self.fetch_page(connection).await;
            let whole = connection.filter.is_whole();
            let body = match fetched {
                // A 4xx, or a redirect (epp does not follow them): this form is not served here. A 5xx is
                // the server's trouble, whatever the form.
                Err(ScrapeError::Status(status)) if !whole && !(500..600).contains(&status) => {
                    connection.record(Answer::Refused);
                    continue;
                }
                fetched => fetched?,
            };
            let extraction = extract(&connection.page[body], engine, &endpoint.telemetry(), Instant::now());
            if whole {
                break extraction;
            }
            let answer = match (extraction.found_load_families, extraction.unwanted_samples) {
                (false, _) => Answer::Refused,
                (true, 0) => Answer::Filtered,
                (true, _) => Answer::Ignored,
            };
            if !connection.record(answer) {
                break extraction;
            }
        };
        endpoint.update_telemetry(extraction.metrics);
        if let Some(notify) = &self.config.on_update {
            notify();
        }
        match extraction.error {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }

    /// Fetches the page in the form `connection` asks for; returns where it lies in its buffer.
    async fn fetch_page(&self, connection: &mut ScrapeConnection) -> Result<Range<usize>, ScrapeError> {
        let ScrapeConnection { page, filter, plain } = connection;
        match plain {
            Some(plain) => {
                let timeout = self.config.poll_timeout.min(self.config.http_timeout);
                tokio::time::timeout(timeout, plain.get(page, self.config.max_page_bytes))
                    .await
                    .map_err(|_| ScrapeError::Timeout(timeout))?
            }
            None => {
                let timeout = self.config.poll_timeout;
                tokio::time::timeout(timeout, self.fetch(filter.url(), page))
                    .await
                    .map_err(|_| ScrapeError::Timeout(timeout))??;
                Ok(0..page.len())
            }
        }
    }

    async fn fetch(&self, url: &str, body: &mut Vec<u8>) -> Result<(), ScrapeError> {
        body.clear();
        let request_failed = |e: reqwest::Error| ScrapeError::Request(error_chain(&e));
        let mut response = self.client.get(url).send().await.map_err(request_failed)?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(ScrapeError::Status(response.status().as_u16()));
        }
        while let Some(chunk) = response.chunk().await.map_err(request_failed)? {
            if body.len() + chunk.len() > self.config.max_page_bytes {
                return Err(ScrapeError::TooLarge(self.config.max_page_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(())
    }

    /// Starts the scrape loop of one endpoint; it runs until the handle is aborted.
    pub fn spawn_endpoint(self: &Arc<Self>, endpoint: Arc<Endpoint>) -> JoinHandle<()> {
        let scraper = Arc::clone(self);
        tokio::spawn(async move { scraper.run_endpoint(endpoint).await })
    }

    async fn run_endpoint(&self, endpoint: Arc<Endpoint>) {
        // Labels are fixed for an endpoint's lifetime (a label change makes a new endpoint), so the
        // engine is chosen once.
        let engine = Arc::clone(self.config.engines.for_labels(&endpoint.labels));
        // tokio's interval panics on a zero period; a configuration of 0 means "as fast as allowed".
        let period = self.config.refresh_interval.max(Duration::from_millis(1));
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut connection =
            ScrapeConnection::filtered(&endpoint.metrics_url, engine.wanted_names(), self.config.name_filter);
        let mut health = ScrapeHealth::default();
        loop {
            ticker.tick().await;
            let result = self.scrape_once(&endpoint, &engine, &mut connection).await;
            match health.observe(result.err().map(|e| e.to_string())) {
                Transition::Failed(reason) => tracing::warn!(
                    endpoint = %endpoint.name,
                    url = %endpoint.metrics_url,
                    engine = %engine.name,
                    error = %reason,
                    "metrics scrape failed"
                ),
                Transition::Recovered => tracing::info!(
                    endpoint = %endpoint.name,
                    url = %endpoint.metrics_url,
                    "metrics scrape recovered"
                ),
                Transition::Unchanged => {}
            }
        }
    }
}

/// The error state of one endpoint's scrapes, so that only changes are logged.
#[derive(Debug, Default)]
pub(crate) struct ScrapeHealth {
    last_error: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Transition<'a> {
    /// Newly failing, or failing for a different reason than last time.
    Failed(&'a str),
    Recovered,
    Unchanged,
}

impl ScrapeHealth {
    pub(crate) fn observe(&mut self, error: Option<String>) -> Transition<'_> {
        match error {
            None => match self.last_error.take() {
                Some(_) => Transition::Recovered,
                None => Transition::Unchanged,
            },
            Some(e) if self.last_error.as_deref() == Some(e.as_str()) => Transition::Unchanged,
            Some(e) => Transition::Failed(self.last_error.insert(e)),
        }
    }
}

/// `reqwest`'s top-level message names only the URL; the cause (refused, reset, DNS) is in the chain.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transitions_are_reported() {
        let mut health = ScrapeHealth::default();
        assert_eq!(health.observe(None), Transition::Unchanged);
        assert_eq!(health.observe(Some("status 500".into())), Transition::Failed("status 500"));
        assert_eq!(health.observe(Some("status 500".into())), Transition::Unchanged);
        assert_eq!(health.observe(Some("timed out".into())), Transition::Failed("timed out"));
        assert_eq!(health.observe(Some("timed out".into())), Transition::Unchanged);
        assert_eq!(health.observe(None), Transition::Recovered);
        assert_eq!(health.observe(None), Transition::Unchanged);
        assert_eq!(health.observe(Some("status 500".into())), Transition::Failed("status 500"));
    }

    #[test]
    fn default_config_matches_the_go_defaults() {
        let c = ScrapeConfig::default();
        assert_eq!(c.refresh_interval, Duration::from_millis(50));
        assert_eq!(c.poll_timeout, Duration::from_secs(1));
        assert_eq!(c.http_timeout, Duration::from_secs(10));
        assert!(c.insecure_skip_verify);
        assert!(format!("{c:?}").contains("on_update: false"));
    }
}
