//! epp-sim: a vLLM simulator whose latency behaves like vLLM's, so routing can be judged without GPUs.
//!
//! Why: every routing claim must be measured, and a fixed-latency fake backend rewards the wrong
//! choices (it has no queue, no batch slowdown, no prefix cache). [`engine`] is a pure, deterministic
//! model of one vLLM V1 engine (continuous batching, chunked prefill, a ref-counted KV block pool with
//! prefix caching and LRU eviction, preemption, LoRA slots) whose step durations come from an
//! accelerator profile. The `epp-sim` binary drives engines in real time behind an OpenAI API and a
//! vLLM-format `/metrics`; a virtual-time lab can drive the same engine without a clock.

pub mod engine;
pub mod exposition;
mod histograms;
mod kv;
mod kv_events;
mod model_tokens;
mod name_filter;
mod openai;
mod pd;
mod profile;
mod replica;
pub mod server;
mod types;

pub use engine::{
    tokenize, AcceleratorProfile, AddRequestError, Backlog, Engine, EngineConfig, EngineConfigError,
    EngineStats, FinishReason, RequestEvent, SimRequest, StepResult, StepShape,
};

pub use exposition::{go_float, CacheInfo, LoraInfo, VllmPage};
pub use kv_events::{encode_batch, KvCacheEvent};
pub use model_tokens::ModelTokenizer;
pub use server::{serve, FaultOptions, MetricsMode, ServeOptions, SimError};

#[cfg(test)]
mod characterisation;
