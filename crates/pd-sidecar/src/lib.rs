//! `epp-pd-sidecar`: the decode pod's sidecar for prefill/decode disaggregation.
//!
//! It listens where the InferencePool's target port points and proxies to the decode engine beside it.
//! When epp names a prefill pod in `x-prefiller-host-port`, it runs the prefill leg there and the decode
//! leg locally with the KV blocks the prefill left ([`nixl`]); otherwise the request passes through.
//! Compatible with llm-d's `pd-sidecar` flags where they overlap; safe by default where it is not: only
//! pool members may be named as prefillers, a malformed header is a 502 naming it, a prefill error's body
//! is never relayed, every leg is bounded in time, and a client that goes away cancels both legs.
//! See docs/pd-disaggregation.md.

pub mod cli;
pub mod error;
pub mod metrics;
pub mod nixl;
pub mod pool;
pub mod prefiller;
pub mod proxy;
pub mod usage;
