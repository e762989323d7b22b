//! Fuzz targets for every surface of epp that reads bytes it does not control: the `/metrics` pages of
//! model servers, OpenAI request bodies, response bodies (SSE and JSON `usage`), configuration files,
//! Envoy's ext_proc message sequences, the engines' KV-cache events, chat bodies rendered by a chat template,
//! the datagrams epp replicas send each other, and chat text tokenized in process.
//!
//! Each target is one function over `&[u8]` that must never panic and checks the invariants its surface
//! promises (an `assert!` that fails is a finding, like a crash). The same functions run in two places:
//! - libFuzzer, through the thin harness in `crates/fuzz/libfuzzer` (`make fuzz FUZZ_TARGET=…`, nightly);
//! - `cargo test`, which replays every input of the checked-in corpora (`crates/fuzz/corpus/<target>/`)
//!   plus the seeds of [`seeds`], so what a fuzzing campaign found stays covered on stable in `make test`.

pub mod byte_words;
pub mod chat_template;
pub mod config_loader;
pub mod extproc_stream;
pub mod frames;
pub mod kv_events;
pub mod metrics_text;
pub mod openai_request;
pub mod peer_datagram;
pub mod seeds;
pub mod sse_usage;

/// A fuzz target: never panics on any input.
pub type Target = fn(&[u8]);

/// Every target by the name its corpus directory and libFuzzer binary carry.
pub const TARGETS: &[(&str, Target)] = &[
    ("metrics_text", metrics_text::run),
    ("openai_request", openai_request::run),
    ("sse_usage", sse_usage::run),
    ("config_loader", config_loader::run),
    ("extproc_stream", extproc_stream::run),
    ("kv_events", kv_events::run),
    ("chat_template", chat_template::run),
    ("peer_datagram", peer_datagram::run),
    ("byte_words", byte_words::run),
];
