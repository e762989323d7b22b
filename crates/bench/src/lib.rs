//! epp-bench's library: a live load generator for OpenAI-compatible endpoints (Envoy in front of epp, or
//! a model server directly) and the side-by-side overhead comparison behind `make bench`.
//!
//! Why it lives in the crate: every claim epp makes about speed is checked against a baseline measured
//! in the same run, and the integration tests drive the same code the binary runs. Layout: [`workload`]
//! (what to send; the YAML schema; [`lab_workload`] reads the lab's workload file instead) → [`body`] (each request's body and headers, seeded) → [`runner`]
//! (preflight, open/closed loop) → [`client`] (one request: timings, error class) with [`sse`] (stream
//! timing) → [`report`] / [`stats`] / [`svg`] (summaries and charts); [`compare`] runs several setups in
//! interleaved rounds; [`criterion`] tabulates the micro-benchmarks; [`backend`] is the benchmark's own
//! minimal model server.

pub mod backend;
pub mod body;
pub mod client;
pub mod compare;
pub mod criterion;
pub mod dist;
pub mod lab_workload;
pub mod objective;
pub mod progress;
pub mod replay;
pub mod report;
pub mod runner;
pub mod sse;
pub mod stats;
pub mod svg;
pub mod workload;

pub use client::{ErrorKind, Sample};
pub use compare::{compare, CompareOptions, Comparison, Setup};
pub use dist::Distribution;
pub use report::Report;
pub use runner::{run, run_with_client, RunOptions, RunResult};
pub use workload::{Api, LoadShape, ObjectiveMix, Workload, WorkloadError};

/// Why a benchmark could not run (failed requests are results, not errors).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("cannot reach {url}: {detail} (is it running? --no-preflight skips this check)")]
    Unreachable { url: String, detail: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}
