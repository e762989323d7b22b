//! Precise prefix-cache state from the engines' own KV-cache events (issue 20, being built): what each
//! model server says it holds, block by block, instead of epp's guess from what it sent where.
//!
//! - [`events`]: decoding the msgpack batches vLLM and SGLang publish over ZMQ, in every encoding in use.
//! - [`frames`]: the ZMQ framing around them, live and replayed.
//! - [`block_keys`]: epp's own chain of block keys over token ids, as llm-d computes its own.
//! - [`index`]: which endpoint holds which block in which tier, and each endpoint's longest cached prefix.
//!
//! - [`subscriber`]: one endpoint's ZMQ subscription, applying its events to the shared index.
//!
//! Not built yet: starting subscribers as discovery adds and removes endpoints (and replay), the
//! `precise-prefix-cache-producer` plugin and the token producer that read the index.

mod block_keys;
mod events;
mod frames;
mod index;
mod msgpack;
mod subscriber;
#[cfg(test)]
mod test_data;

pub use block_keys::{BlockKeyHasher, HashAlgorithm};
pub use events::{decode_batch, BlockStored, DecodeError, EventBatch, KvEvent};
pub use frames::{
    parse_live, parse_replay, replay_request, topic_model, FrameError, LiveMessage, ReplayMessage,
    REPLAY_END_SEQ,
};
pub use index::{Applied, EndpointId, KvIndex, PrefixMatch, TierWeights};
pub use subscriber::{apply_message, run as run_subscriber, SharedIndex, SubscriberStats, Subscription};
