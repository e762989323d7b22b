//! Scheduling: the plugin framework and the built-in plugins.
//!
//! A cycle is synchronous and pure over an immutable view of the pool: the candidates carry the telemetry
//! loaded once at the start of the cycle, and the request carries the clock. That keeps it fast, testable
//! without gRPC, and usable in virtual time.

pub(crate) mod candidates;
pub(crate) mod kv_cache_metrics;
pub(crate) mod latency_metrics;
pub(crate) mod metrics;
pub(crate) mod observer;
pub(crate) mod pipeline;
pub(crate) mod plugin;
pub(crate) mod plugin_metrics;
pub mod plugins;
pub(crate) mod profile;
pub(crate) mod registry;
pub(crate) mod saturation;
pub(crate) mod types;

pub use candidates::CandidateSet;
pub use kv_cache_metrics::KvCacheMetrics;
pub use latency_metrics::{LatencyKind, LatencyMetrics, PredictionLabels};
pub use metrics::SchedulerMetrics;
pub use observer::{ExtensionPoint, NoopObserver, Observer};
pub use pipeline::Pipeline;
pub use plugin::*;
pub use plugin_metrics::{InflightMetrics, PluginMetrics, PrefixIndexerMetrics};
pub use profile::{Profile, WeightedScorer};
pub use registry::{parse_params, FactoryContext, PluginError, Registry};
pub use saturation::{PendingLoad, SaturationDetector, StageSaturation};
pub use types::*;

/// Usage is the request domain's; the response hooks receive it.
pub use crate::request::Usage;
