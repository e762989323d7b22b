//! Precise prefix-cache state from the engines' own KV-cache events (issue 20, being built): what each
//! model server says it holds, block by block, instead of epp's guess from what it sent where.
//!
//! - [`events`]: decoding the msgpack batches vLLM and SGLang publish over ZMQ, in every encoding in use.
//! - [`frames`]: the ZMQ framing around them, live and replayed.
//! - [`block_keys`]: epp's own chain of block keys over token ids, as llm-d computes its own.
//! - [`index`]: which endpoint holds which block in which tier, and each endpoint's longest cached prefix.
//!
//! - [`subscriber`]: one endpoint's ZMQ subscription, applying its events to the shared index.
//! - [`replay`]: asking a publisher's ROUTER for the batches a subscriber missed.
//! - [`pool`]: one subscriber per endpoint of the datastore, following it as endpoints come and go.
//! - [`central`]: or one socket epp binds, which every engine publishes to (`zmqEndpoint`).
//! - `speculation`: a routed request's blocks held by its target until the engine confirms them.
//! - [`peers`] and [`peer_link`]: those entries shared with the other epp replicas (`speculativePeers`).
//! - [`render`] and [`local_tokens`]: a request's token ids, from the engine's `render` endpoints
//!   (llm-d's `token-producer`) or an in-process tokenizer; [`chat_template`] renders chat requests'
//!   prompts in process for it.
//!
//! The plugins that read the index are `precise-prefix-cache-producer` and `token-producer`
//! (`scheduling::plugins`).

mod block_keys;
mod budget;
mod byte_words;
mod central;
mod chat_json;
mod chat_template;
mod events;
mod frames;
mod index;
mod local_tokens;
mod msgpack;
mod peer_link;
mod peers;
mod pool;
mod pools;
mod render;
mod replay;
mod segments;
mod slots;
mod subscriber;
mod supervisor;
#[cfg(test)]
mod test_data;
mod tiers;

pub use block_keys::{BlockKeyHasher, HashAlgorithm};
pub(crate) use central::bind_address;
pub use chat_template::{ChatPrompt, ChatTemplate, ChatTemplateError, ContentFormat};
pub use events::{decode_batch, BlockStored, DecodeError, EventBatch, KvEvent};
pub use frames::{
    parse_live, parse_replay, replay_request, topic_model, FrameError, LiveMessage, ReplayMessage,
    REPLAY_END_SEQ,
};
pub use index::{Applied, EndpointId, KvIndex, PrefixMatch, TierWeights, DEFAULT_MAX_BLOCKS};
#[cfg(test)]
pub(crate) use local_tokens::tests::word_tokenizer_file as local_tokens_test_file;
pub use local_tokens::{completions_prompt, LocalTokenizer, LocalTokensError, Prompt};
pub use peer_link::{bind as bind_peer_socket, spawn_peers, PeerConfig, PeerLink, PeerOutbox, PeerTransport};
pub use peers::{decode as decode_peer, encode as encode_peer, PeerDatagram, PeerDecodeError, PeerMessage};
pub use pool::{KvEventPool, PoolConfig, Subscribers};
pub use pools::KvPools;
pub use render::{parse_rendered, RenderApi, RenderClient, RenderConfig, RenderError};
pub use subscriber::{
    apply_message, run as run_subscriber, Sequence, SharedIndex, SubscriberStats, Subscription,
};
pub use supervisor::{spawn_pool, PoolTask};

/// The index for reading, even if a writer panicked (every mutation leaves it consistent between events).
pub fn read_index(index: &SharedIndex) -> std::sync::RwLockReadGuard<'_, KvIndex> {
    subscriber::read(index)
}

/// The index for writing, as [`read_index`].
pub fn lock_index(index: &SharedIndex) -> std::sync::RwLockWriteGuard<'_, KvIndex> {
    subscriber::lock(index)
}
