//! epp: an Endpoint Picker for LLM inference gateways.
//!
//! The request path, top to bottom: [`extproc`] (the Envoy ext_proc stream) → [`request`] (OpenAI body
//! parsing) → [`director`] (rewrite, admission, candidates) → [`flowcontrol`] → [`scheduling`] (plugin
//! pipeline) → back to [`extproc`] with the chosen endpoint. Beside it: [`datastore`] (endpoints and their
//! telemetry), [`telemetry`] (scrapers and the metrics text parser), [`metrics`] (epp's own Prometheus
//! registry) and [`config`] (the EndpointPickerConfig loader).

pub mod app;

pub mod cli;
pub mod config;
pub mod datastore;
pub mod director;
pub mod error;
pub mod extproc;
pub mod flowcontrol;

pub mod metrics;
pub mod request;
pub mod scheduling;

pub mod telemetry;
pub mod wire;
