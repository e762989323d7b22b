//! A deterministic, clock-free model of one vLLM V1 engine, stepped one scheduler iteration at a time.
//!
//! Why stepped and clock-free: routing claims must be measured, and the same engine serves two masters:
//! the real-time `epp-sim` server (a task loops `step()` and sleeps for its duration) and a virtual-time
//! routing lab (which advances a simulated clock by the duration). Neither works if the engine reads a
//! clock or does I/O, and both need identical runs under one seed.
//!
//! What a step does, as vLLM V1's scheduler does it: running requests are served first in admission
//! order (a decode costs one token of the `max_num_batched_tokens` budget; an unfinished prefill takes
//! a chunk of what is left); when a request needs a KV block and none is free, the most recently
//! admitted running request is preempted (its blocks freed, its progress recomputed later, put back at
//! the head of the waiting queue). Then, unless something was preempted, waiting requests are admitted
//! FCFS while the budget, `max_num_seqs`, KV blocks and the LoRA limit allow; each first takes the
//! longest run of its prompt's full blocks found in the prefix cache. The step's duration comes from
//! the [`AcceleratorProfile`] and the batch it computed; every event of the step happens at its end.

use std::collections::{BTreeSet, HashSet, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::kv::{block_hashes, BlockPool};
use super::kv_events::{KvCacheEvent, KvEventLog};
pub use super::profile::{AcceleratorProfile, StepShape};
pub use super::types::{
    tokenize, AddRequestError, Backlog, EngineConfig, EngineConfigError, EngineStats, FinishReason,
    RequestEvent, SimRequest, StepResult,
};

/// A request inside the engine.
#[derive(Debug, Clone)]
struct Seq {
    id: u64,
    prompt_len: usize,
    max_output: u32,
    lora: Option<String>,
    /// Chained hashes of the prompt's full blocks (empty without prefix caching).
    hashes: Vec<u64>,
    /// The prompt's tokens, kept only when the engine publishes KV events (they carry them).
    prompt: Vec<u32>,
    output: u32,
    computed: usize,
    blocks: Vec<u32>,
    /// Leading blocks already registered in (or taken from) the prefix cache.
    registered: usize,
    cached_tokens: u32,
    /// Tokens scheduled in the step being built.
    scheduled_now: usize,
    /// The prompt's KV was prefilled elsewhere and transferred here (P/D): admission computes only its
    /// last token. Cleared by a preemption, after which the prompt is recomputed locally.
    transferred: bool,
}

impl Seq {
    fn num_tokens(&self) -> usize {
        self.prompt_len + self.output as usize
    }
}

/// Cloneable so the lab's oracle can play a candidate's future forward on a copy (same noise stream).
#[derive(Clone)]
pub struct Engine {
    cfg: EngineConfig,
    pool: BlockPool,
    rng: SmallRng,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    live: HashSet<u64>,
    rejected: Vec<u64>,
    stats: EngineStats,
    last_shape: StepShape,
    admitted: Vec<u64>,
    /// What the prefix cache stored and evicted, when KV events are on.
    kv_events: Option<KvEventLog>,
}

impl Engine {
    /// Builds an engine; zero sizes are raised to 1 (use [`EngineConfig::validate`] to report them).
    pub fn new(mut cfg: EngineConfig) -> Self {
        cfg.max_num_seqs = cfg.max_num_seqs.max(1);
        cfg.max_num_batched_tokens = cfg.max_num_batched_tokens.max(1);
        cfg.block_size = cfg.block_size.max(1);
        cfg.num_gpu_blocks = cfg.num_gpu_blocks.max(1);
        cfg.noise = if cfg.noise.is_finite() { cfg.noise.clamp(0.0, 1.0) } else { 0.0 };
        Self {
            pool: BlockPool::new(cfg.num_gpu_blocks),
            rng: SmallRng::seed_from_u64(cfg.seed),
            waiting: VecDeque::new(),
            running: Vec::new(),
            live: HashSet::new(),
            rejected: Vec::new(),
            stats: EngineStats::default(),
            last_shape: StepShape::default(),
            admitted: Vec::new(),
            kv_events: None,
            cfg,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Queues a request. One the engine can never hold finishes with [`FinishReason::Abort`] and no
    /// output at the next step (vLLM would refuse it up front; see [`Engine::try_add_request`]).
    pub fn add_request(&mut self, req: SimRequest) {
        let id = req.id;
        if let Err(AddRequestError::TooLong { .. }) = self.try_add_request(req) {
            self.rejected.push(id);
        }
    }

    /// Queues a request, or says why it can never run.
    pub fn try_add_request(&mut self, req: SimRequest) -> Result<(), AddRequestError> {
        self.queue(req, false)
    }

    /// Queues a request whose prompt was prefilled on another engine and whose KV blocks arrived here
    /// (the decode side of P/D, vLLM's `do_remote_prefill`): it prefills only its last token.
    pub fn try_add_transferred(&mut self, req: SimRequest) -> Result<(), AddRequestError> {
        self.queue(req, true)
    }

    fn queue(&mut self, req: SimRequest, transferred: bool) -> Result<(), AddRequestError> {
        let prompt_len = req.prompt.len().max(1);
        let max_output = req.max_output_tokens.max(1);
        let needed = prompt_len + max_output as usize;
        let capacity = self.cfg.kv_capacity_tokens();
        if needed > capacity {
            return Err(AddRequestError::TooLong {
                needed,
                prompt: prompt_len,
                output: max_output,
                capacity,
            });
        }
        if !self.live.insert(req.id) {
            return Err(AddRequestError::DuplicateId(req.id));
        }
        let hashes = if self.cfg.enable_prefix_caching {
            block_hashes(&req.prompt, self.cfg.block_size, req.lora.as_deref())
        } else {
            Vec::new()
        };
        let prompt = if self.kv_events.is_some() { req.prompt } else { Vec::new() };
        self.waiting.push_back(Seq {
            id: req.id,
            prompt,
            prompt_len,
            max_output,
            lora: req.lora,
            hashes,
            output: 0,
            computed: 0,
            blocks: Vec::new(),
            registered: 0,
            cached_tokens: 0,
            scheduled_now: 0,
            transferred,
        });
        Ok(())
    }

    /// Removes a request wherever it is, freeing its blocks. False if the id is unknown or finished.
    pub fn abort(&mut self, id: u64) -> bool {
        if let Some(pos) = self.rejected.iter().position(|&r| r == id) {
            self.rejected.remove(pos);
            return true;
        }
        if !self.live.remove(&id) {
            return false;
        }
        if let Some(pos) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(pos);
        } else if let Some(pos) = self.running.iter().position(|s| s.id == id) {
            let seq = self.running.remove(pos);
            self.pool.free_all(&seq.blocks);
        }
        true
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.rejected.is_empty()
    }

    /// Requests the last [`Engine::step`] moved from waiting to running (first admission or resumption
    /// after preemption), in admission order: what a server needs for vLLM's queue-time metric.
    pub fn last_step_admitted(&self) -> &[u64] {
        &self.admitted
    }

    /// The batch the last [`Engine::step`] computed.
    pub fn last_step_shape(&self) -> StepShape {
        self.last_shape
    }

    /// Requests the engine holds, waiting or running: [`Engine::stats`]'s two counts without building
    /// its LoRA lists (the lab's oracle asks for every replica on every request).
    pub fn requests_held(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// The work queued ahead of a new request: prompt tokens still to prefill (a waiting request's
    /// whole prompt, since its cache hit is found at admission) and the running requests by phase.
    pub fn backlog(&self) -> Backlog {
        let left = |s: &Seq| s.prompt_len.saturating_sub(s.computed);
        let prefilling = self.running.iter().filter(|s| left(s) > 0).count();
        Backlog {
            prefill_tokens: self.running.iter().chain(&self.waiting).map(left).sum(),
            prefilling,
            decoding: self.running.len() - prefilling,
            waiting: self.waiting.len(),
        }
    }

    pub fn stats(&self) -> EngineStats {
        let loras = |seqs: &mut dyn Iterator<Item = &Seq>| -> Vec<String> {
            seqs.filter_map(|s| s.lora.clone()).collect::<BTreeSet<_>>().into_iter().collect()
        };
        EngineStats {
            waiting: self.waiting.len(),
            running: self.running.len(),
            kv_usage: self.pool.usage(),
            running_loras: loras(&mut self.running.iter()),
            waiting_loras: loras(&mut self.waiting.iter()),
            ..self.stats.clone()
        }
    }

    /// From now on, records the KV events vLLM would publish (requests queued before keep no tokens).
    pub fn enable_kv_events(&mut self) {
        self.pool.record_evictions();
        self.kv_events.get_or_insert_with(KvEventLog::default);
    }

    /// The KV events since the last call, oldest first (none unless enabled).
    pub fn take_kv_events(&mut self) -> Vec<KvCacheEvent> {
        self.kv_events.as_mut().map(|log| std::mem::take(&mut log.events)).unwrap_or_default()
    }

    /// One scheduler iteration. The caller advances its clock by `duration`; the events happen then.
    pub fn step(&mut self) -> StepResult {
        let mut events: Vec<RequestEvent> = self
            .rejected
            .drain(..)
            .map(|id| RequestEvent::Finished { id, output_tokens: 0, reason: FinishReason::Abort })
            .collect();
        self.admitted.clear();
        let mut budget = self.cfg.max_num_batched_tokens;
        let preempted = self.schedule_running(&mut budget);
        if !preempted {
            self.schedule_waiting(&mut budget);
        }
        if let Some(log) = &mut self.kv_events {
            log.removed(self.pool.take_evictions());
        }
        let shape = self.shape();
        self.last_shape = shape;
        let mut duration = self.cfg.profile.step_time(&shape);
        if duration == 0.0 && self.has_work() {
            // Nothing could be scheduled (cannot happen with a valid config); idle for one step.
            duration = self.cfg.profile.base_overhead;
        }
        if self.cfg.noise > 0.0 && duration > 0.0 {
            duration *= (1.0 + self.cfg.noise * self.standard_normal()).max(0.5);
        }
        self.apply(&mut events);
        StepResult { duration, events }
    }

    fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.cfg.block_size)
    }

    /// Schedules running requests in admission order, preempting from the back when KV runs out.
    /// Returns whether anything was preempted.
    fn schedule_running(&mut self, budget: &mut usize) -> bool {
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let seq = &self.running[i];
            let num_new = (seq.num_tokens() - seq.computed).min(*budget);
            let needed = self.blocks_for(seq.computed + num_new).saturating_sub(seq.blocks.len());
            let mut self_preempted = false;
            while self.pool.num_free() < needed {
                let Some(victim) = self.running.pop() else { break };
                self.preempt(victim);
                preempted = true;
                if self.running.len() == i {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            for _ in 0..needed {
                if let Some(block) = self.pool.allocate() {
                    self.running[i].blocks.push(block);
                }
            }
            self.running[i].scheduled_now = num_new;
            *budget -= num_new;
            i += 1;
        }
        preempted
    }

    fn preempt(&mut self, mut seq: Seq) {
        self.pool.free_all(&seq.blocks);
        seq.blocks.clear();
        seq.computed = 0;
        seq.registered = 0;
        seq.scheduled_now = 0;
        seq.transferred = false;
        self.stats.preemptions += 1;
        self.waiting.push_front(seq);
    }

    /// Admits waiting requests FCFS; a request whose adapter cannot be loaded is skipped, not blocking.
    fn schedule_waiting(&mut self, budget: &mut usize) {
        let max_loras = self.cfg.max_loras.max(1);
        let mut active: BTreeSet<String> = self.running.iter().filter_map(|s| s.lora.clone()).collect();
        let mut idx = 0;
        let mut hits: Vec<u32> = Vec::new();
        while idx < self.waiting.len() && *budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let seq = &self.waiting[idx];
            if let Some(lora) = &seq.lora {
                if !active.contains(lora) && active.len() >= max_loras {
                    idx += 1;
                    continue;
                }
            }
            // At least one token must be computed to sample from, so a full hit gives back its last block.
            let max_hit_blocks = (seq.num_tokens() - 1) / self.cfg.block_size;
            hits.clear();
            hits.extend(seq.hashes.iter().take(max_hit_blocks).map_while(|&h| self.pool.lookup(h)));
            let cached = hits.len() * self.cfg.block_size;
            // Transferred KV counts as computed, not as a prefix-cache hit.
            let computed = if seq.transferred { cached.max(seq.num_tokens() - 1) } else { cached };
            let num_new = (seq.num_tokens() - computed).min(*budget);
            let new_blocks = self.blocks_for(computed + num_new) - hits.len();
            let hits_free = hits.iter().filter(|&&b| self.pool.is_free(b)).count();
            if self.pool.num_free() - hits_free < new_blocks {
                break;
            }
            let Some(mut seq) = self.waiting.remove(idx) else { break };
            for &block in &hits {
                self.pool.touch(block);
            }
            seq.blocks.extend_from_slice(&hits);
            seq.blocks.extend((0..new_blocks).filter_map(|_| self.pool.allocate()));
            seq.computed = computed;
            seq.registered = hits.len();
            if seq.output == 0 {
                seq.cached_tokens = cached as u32;
            }
            if self.cfg.enable_prefix_caching {
                self.stats.prefix_queries += seq.num_tokens() as u64;
                self.stats.prefix_hits += cached as u64;
            }
            seq.scheduled_now = num_new;
            *budget -= num_new;
            if let Some(lora) = &seq.lora {
                active.insert(lora.clone());
            }
            self.admitted.push(seq.id);
            self.running.push(seq);
        }
    }

    fn shape(&self) -> StepShape {
        let mut shape = StepShape::default();
        for seq in self.running.iter().filter(|s| s.scheduled_now > 0) {
            let n = seq.scheduled_now;
            shape.context_tokens += seq.computed + n;
            if seq.output > 0 && n == 1 && seq.computed + 1 == seq.num_tokens() {
                shape.decode_seqs += 1;
            } else {
                shape.prefill_tokens += n;
                shape.prefill_attention_pairs += super::profile::attention_pairs(seq.computed, n);
            }
        }
        shape
    }

    /// Commits the scheduled work: advances progress, caches full prompt blocks, samples tokens,
    /// finishes requests and frees their blocks.
    fn apply(&mut self, events: &mut Vec<RequestEvent>) {
        let block_size = self.cfg.block_size;
        let mut any_finished = false;
        for seq in self.running.iter_mut().filter(|s| s.scheduled_now > 0) {
            seq.computed += std::mem::take(&mut seq.scheduled_now);
            let full = (seq.computed.min(seq.prompt_len) / block_size).min(seq.hashes.len());
            for b in seq.registered..full {
                let stored = self.pool.register(seq.blocks[b], seq.hashes[b]);
                if let Some(log) = self.kv_events.as_mut().filter(|_| stored) {
                    log.stored(&seq.hashes, &seq.prompt, b, block_size, seq.lora.as_deref());
                }
            }
            seq.registered = seq.registered.max(full);
            if seq.computed < seq.num_tokens() {
                continue;
            }
            seq.output += 1;
            self.stats.generation_tokens += 1;
            if seq.output == 1 {
                self.stats.prompt_tokens += seq.prompt_len as u64;
                events.push(RequestEvent::FirstToken { id: seq.id, cached_tokens: seq.cached_tokens });
            } else {
                events.push(RequestEvent::Token { id: seq.id });
            }
            if seq.output >= seq.max_output {
                events.push(RequestEvent::Finished {
                    id: seq.id,
                    output_tokens: seq.output,
                    reason: FinishReason::Length,
                });
                any_finished = true;
            }
        }
        if any_finished {
            let (done, kept): (Vec<Seq>, Vec<Seq>) =
                std::mem::take(&mut self.running).into_iter().partition(|s| s.output >= s.max_output);
            self.running = kept;
            for seq in done {
                self.pool.free_all(&seq.blocks);
                self.live.remove(&seq.id);
            }
        }
    }

    /// A standard normal draw (Box–Muller), so noise needs no extra dependency.
    fn standard_normal(&mut self) -> f64 {
        let u1: f64 = 1.0 - self.rng.random::<f64>();
        let u2: f64 = self.rng.random::<f64>();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
