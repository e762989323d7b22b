//! Model-server telemetry: scrape each endpoint's Prometheus `/metrics` page and publish what it says
//! about load (queue, running batch, KV usage, LoRA adapters, KV-cache geometry) into the datastore.
//!
//! The pieces, bottom up: [`parser`] walks the text format without copying and skips every family the
//! engine does not need; [`MetricSpec`] selects series the way the Go EPP's engine configs do;
//! [`EngineSet`] holds the per-engine mappings (vLLM, SGLang, TensorRT-LLM, Triton) built from the
//! `core-metrics-extractor` parameters; [`extract`] turns one page into [`EndpointTelemetry`]; and
//! [`spawn_scrapers`] keeps one scrape loop per datastore endpoint, which asks its server for only the
//! families its mapping reads where the server honours that (`name_filter`).
//!
//! [`EndpointTelemetry`]: crate::datastore::EndpointTelemetry

mod engines;
mod extractor;
mod http1;
mod name_filter;
pub mod parser;
mod pool_metrics;
mod scrape_error;
mod scraper;
mod spec;
mod supervisor;

pub use engines::{
    DataSourceParams, EngineConfigParams, EngineMapping, EngineSet, ExtractorParams, MetricsScheme,
    SeriesAggregation, TelemetryConfigError, DEFAULT_ENGINE, DEFAULT_ENGINE_LABEL_KEY, RESERVED_ENGINE_NAME,
};
pub use extractor::{extract, ExtractError, ExtractProblem, Extraction};
pub use parser::{Labels, Sample, SampleIter};
pub use pool_metrics::PoolMetrics;
pub use scraper::{ScrapeConfig, ScrapeConnection, ScrapeError, Scraper, TelemetryUpdated};
pub use spec::{MetricSpec, SpecError};
pub use supervisor::{spawn_scrapers, ScrapeLoops};

#[cfg(test)]
#[path = "name_filter_tests.rs"]
mod name_filter_tests;
#[cfg(test)]
mod test_data;
