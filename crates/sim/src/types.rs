//! The engine's data types: its configuration, the requests it takes, the events and statistics it
//! gives back, and the stand-in tokenizer. Kept apart from the scheduler so that each file reads whole;
//! everything here is re-exported from [`super::engine`], the module callers use.

use super::profile::AcceleratorProfile;

/// Engine settings; [`EngineConfig::for_profile`] gives vLLM's defaults for the profile's GPU class.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    pub profile: AcceleratorProfile,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub block_size: usize,
    pub num_gpu_blocks: usize,
    pub enable_prefix_caching: bool,
    pub max_loras: usize,
    /// Relative standard deviation of each step's duration (0.05 = 5%).
    pub noise: f64,
    pub seed: u64,
}

/// A config value the engine cannot run with (the engine itself clamps instead of failing).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineConfigError {
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("noise must be a finite number in [0, 1], got {0}")]
    Noise(f64),
}

impl EngineConfig {
    pub fn for_profile(profile: AcceleratorProfile) -> Self {
        Self {
            max_num_seqs: profile.default_max_num_seqs,
            max_num_batched_tokens: profile.default_max_num_batched_tokens,
            block_size: 16,
            num_gpu_blocks: profile.default_num_gpu_blocks,
            enable_prefix_caching: true,
            max_loras: 1,
            noise: 0.05,
            seed: 0,
            profile,
        }
    }

    /// Checks what a user could set wrong, for a clear error at startup.
    pub fn validate(&self) -> Result<(), EngineConfigError> {
        let sizes = [
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("block_size", self.block_size),
            ("num_gpu_blocks", self.num_gpu_blocks),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(EngineConfigError::Zero(name));
        }
        if !self.noise.is_finite() || !(0.0..=1.0).contains(&self.noise) {
            return Err(EngineConfigError::Noise(self.noise));
        }
        Ok(())
    }

    /// Tokens the whole KV cache holds: the longest request (prompt + output) the engine accepts.
    pub fn kv_capacity_tokens(&self) -> usize {
        self.num_gpu_blocks * self.block_size
    }
}

/// One generation request. Ids must be unique among live requests.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub max_output_tokens: u32,
    pub lora: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// Never produced by the engine itself (it always generates `max_output_tokens`); servers use it
    /// when the client set no limit and the default length ended the request.
    Stop,
    Length,
    /// The request could not be served (too long for the KV cache).
    Abort,
}

impl FinishReason {
    /// vLLM's `finished_reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum RequestEvent {
    FirstToken { id: u64, cached_tokens: u32 },
    Token { id: u64 },
    Finished { id: u64, output_tokens: u32, reason: FinishReason },
}

impl RequestEvent {
    /// The request the event is about.
    pub fn id(&self) -> u64 {
        match *self {
            Self::FirstToken { id, .. } | Self::Token { id } | Self::Finished { id, .. } => id,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    pub duration: f64,
    pub events: Vec<RequestEvent>,
}

/// [`crate::Engine::backlog`]: what a new request would queue behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Prompt tokens not yet computed, over running and waiting requests.
    pub prefill_tokens: usize,
    /// Running requests part-way through their prompt.
    pub prefilling: usize,
    /// Running requests past their prompt.
    pub decoding: usize,
    pub waiting: usize,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineStats {
    pub waiting: usize,
    pub running: usize,
    pub kv_usage: f64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub preemptions: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub running_loras: Vec<String>,
    pub waiting_loras: Vec<String>,
}

/// Why [`Engine::try_add_request`](super::engine::Engine::try_add_request) refused a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AddRequestError {
    #[error("request needs {needed} tokens of KV cache ({prompt} prompt + {output} output) but the engine holds {capacity}")]
    TooLong { needed: usize, prompt: usize, output: u32, capacity: usize },
    #[error("request id {0} is already in the engine")]
    DuplicateId(u64),
}

/// Size of the simulated vocabulary.
const VOCAB: u64 = 128_000;

/// Deterministic stand-in tokenizer: one token per 4 bytes (hash of the chunk), so texts sharing a
/// prefix share a token prefix, and prompt lengths are about what a real BPE gives English text.
pub fn tokenize(text: &str) -> Vec<u32> {
    text.as_bytes().chunks(4).map(|chunk| (xxhash_rust::xxh64::xxh64(chunk, 0) % VOCAB) as u32).collect()
}
