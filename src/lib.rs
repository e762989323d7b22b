//! epp: an Endpoint Picker for LLM inference gateways.
//!
//! The request path, top to bottom: [`extproc`] (the Envoy ext_proc stream) → [`director`] (prepare:
//! [`request`] parsing and rewrite; admit: [`flowcontrol`]; decide: [`scheduling`]'s plugin pipeline;
//! finish: the routing answer) → back to [`extproc`] with the chosen endpoint; the response flows back
//! through the director's `ActiveRequest` into [`request`]'s response reader. Beside it: [`datastore`]
//! (endpoints, their telemetry and breaker state, subset queries), [`telemetry`] (scrapers, the metrics
//! text parser, pool gauges), [`health`] (which endpoints may receive requests: staleness, the breaker), [`discovery`] (the
//! pool's endpoints from Kubernetes: InferencePool or standalone selector, list/watch),
//! [`metrics`] (the registry each component registers its own families in), [`wire`] (header and
//! metadata names), [`error`], and [`config`] (builds every part from the EndpointPickerConfig). The
//! layers are drawn in docs/architecture.md and checked by `scripts/check-layers.py`.

pub mod access;
pub mod app;
pub mod cli;
pub mod config;
pub mod datastore;
pub mod director;
pub mod discovery;
pub mod error;
pub mod extproc;
pub mod flowcontrol;
pub mod health;
pub mod kvcache;
pub mod metrics;
pub mod otel;
pub mod predictor;
pub mod request;
pub mod scheduling;
pub mod telemetry;
pub mod tls;
pub mod wire;
