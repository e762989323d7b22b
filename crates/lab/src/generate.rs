//! Turns a [`Workload`] into the exact request stream every routing config is run on, and writes each
//! request's OpenAI chat body when it arrives.
//!
//! Why a compact plan plus late materialisation: an hour of traffic is hundreds of thousands of requests
//! of kilobytes each, too much to hold as bodies. The plan keeps, per request, only its arrival time and
//! where its texts lie in a shared pseudo-random corpus; the body is written into a reused buffer at
//! arrival. Texts are slices of the corpus, so requests sharing a system prompt or a conversation share
//! their leading bytes exactly, and hence (through the stand-in tokenizer) their leading tokens.
//!
//! Two generators draw from the seed: one for arrival times, one for contents, so that changing a
//! content knob (say, the prompt length) does not move every arrival.

use std::io::Write;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::values::{exponential, weighted_index};
use super::workload::{Arrival, Workload};

/// Bytes of text per token: the stand-in tokenizer makes one token of every 4 bytes.
pub const BYTES_PER_TOKEN: usize = 4;
/// Size of the shared text corpus (slices longer than this wrap around).
const CORPUS_BYTES: usize = 1 << 22;

/// Where a text lies in the corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub offset: u32,
    pub len: u32,
}

/// One exchange of a conversation: the user's new text and the assistant's reply (which the next turn
/// resends as history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub user: Span,
    pub assistant: Span,
    pub output_tokens: u32,
}

/// One request of the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedRequest {
    /// Virtual seconds from the start of the run.
    pub arrival: f64,
    /// Index of the conversation's first turn in [`Plan::turns`].
    pub first_turn: u32,
    /// Which turn of its conversation this is (0 for single requests).
    pub turn: u32,
    /// Shared system prompt group, if any.
    pub system: Option<u32>,
    /// Index into the workload's LoRA adapters; `None` is the base model.
    pub lora: Option<u16>,
    pub priority: i32,
}

/// The request stream of a workload, in arrival order.
#[derive(Debug, Clone)]
pub struct Plan {
    pub requests: Vec<PlannedRequest>,
    pub turns: Vec<Turn>,
    pub system_prompts: Vec<Span>,
    corpus: Vec<u8>,
    /// `model` values as JSON string literals: the base model, then each adapter.
    model_literals: Vec<String>,
    adapter_names: Vec<String>,
}

impl Plan {
    /// Plans every request that arrives within the workload's duration. Deterministic in the seed.
    pub fn new(workload: &Workload) -> Self {
        let mut content_rng = SmallRng::seed_from_u64(workload.seed ^ 0x636f_6e74_656e_7473);
        let corpus = build_corpus(&mut content_rng);
        let span = |rng: &mut SmallRng, tokens: u32| Span {
            offset: rng.random_range(0..CORPUS_BYTES as u32),
            len: tokens.saturating_mul(BYTES_PER_TOKEN as u32),
        };
        let system_prompts: Vec<Span> = match &workload.shared_prefixes {
            Some(p) => (0..p.groups)
                .map(|_| {
                    let tokens = p.prefix_tokens.sample(&mut content_rng);
                    span(&mut content_rng, tokens)
                })
                .collect(),
            None => Vec::new(),
        };
        let (lora_weights, adapter_names) = match &workload.loras {
            Some(l) => (
                std::iter::once(l.base_weight).chain(l.adapters.iter().map(|a| a.weight)).collect(),
                l.adapters.iter().map(|a| a.name.clone()).collect(),
            ),
            None => (vec![1.0], Vec::new()),
        };
        let lora_total: f64 = lora_weights.iter().sum();
        let priority_total: f64 = workload.priorities.iter().map(|p| p.weight).sum();
        let priority_weights: Vec<f64> = workload.priorities.iter().map(|p| p.weight).collect();

        let mut requests = Vec::new();
        let mut turns = Vec::new();
        let duration = workload.duration.0;
        for start in arrival_times(&workload.arrival, duration, workload.seed) {
            let rng = &mut content_rng;
            let num_turns = match &workload.sessions {
                Some(s) if rng.random::<f64>() < s.fraction => s.turns.sample(rng),
                _ => 1,
            };
            let system = match &workload.shared_prefixes {
                Some(p) if rng.random::<f64>() < p.fraction => Some(rng.random_range(0..p.groups)),
                _ => None,
            };
            let lora = match weighted_index(rng, &lora_weights, lora_total) {
                0 => None,
                i => u16::try_from(i - 1).ok(),
            };
            let priority = match priority_weights.is_empty() {
                true => 0,
                false => workload.priorities[weighted_index(rng, &priority_weights, priority_total)].priority,
            };
            let first_turn = turns.len() as u32;
            let mut arrival = start;
            for turn in 0..num_turns {
                if turn > 0 {
                    let think = workload.sessions.as_ref().map_or(0.0, |s| s.think_time.0);
                    arrival += exponential(rng, think);
                    if arrival >= duration {
                        break;
                    }
                }
                let user_tokens = workload.prompt_tokens.sample(rng);
                let output_tokens = workload.output_tokens.sample(rng);
                turns.push(Turn {
                    user: span(rng, user_tokens),
                    assistant: span(rng, output_tokens),
                    output_tokens,
                });
                requests.push(PlannedRequest { arrival, first_turn, turn, system, lora, priority });
            }
        }
        // Stable: requests arriving at the same instant keep their planning order.
        requests.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
        let model_literals = std::iter::once(&workload.model)
            .chain(adapter_names.iter())
            .map(|m| serde_json::Value::String(m.clone()).to_string())
            .collect();
        Self { requests, turns, system_prompts, corpus, model_literals, adapter_names }
    }

    /// The model a request asks for (its adapter's name, or the base model).
    pub fn model_of(&self, req: &PlannedRequest) -> Option<&str> {
        req.lora.and_then(|i| self.adapter_names.get(usize::from(i))).map(String::as_str)
    }

    /// Output tokens the request generates.
    pub fn output_tokens(&self, req: &PlannedRequest) -> u32 {
        self.turns[(req.first_turn + req.turn) as usize].output_tokens
    }

    /// Writes the request's OpenAI chat-completions body into `out` (cleared first).
    pub fn write_body(&self, req: &PlannedRequest, out: &mut Vec<u8>) {
        out.clear();
        let model = &self.model_literals[req.lora.map_or(0, |i| usize::from(i) + 1)];
        out.extend_from_slice(b"{\"model\":");
        out.extend_from_slice(model.as_bytes());
        // Writing into a Vec cannot fail.
        let _ = write!(out, ",\"stream\":true,\"max_tokens\":{},\"messages\":[", self.output_tokens(req));
        let mut first = true;
        let mut message = |out: &mut Vec<u8>, role: &str, span: Span| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"role\":\"");
            out.extend_from_slice(role.as_bytes());
            out.extend_from_slice(b"\",\"content\":\"");
            self.write_text(span, out);
            out.extend_from_slice(b"\"}");
        };
        if let Some(group) = req.system {
            message(out, "system", self.system_prompts[group as usize]);
        }
        let start = req.first_turn as usize;
        for (k, turn) in self.turns[start..=start + req.turn as usize].iter().enumerate() {
            message(out, "user", turn.user);
            if k < req.turn as usize {
                message(out, "assistant", turn.assistant);
            }
        }
        out.extend_from_slice(b"]}");
    }

    /// Appends a corpus slice, wrapping around the corpus end.
    fn write_text(&self, span: Span, out: &mut Vec<u8>) {
        let mut offset = span.offset as usize % self.corpus.len();
        let mut left = span.len as usize;
        while left > 0 {
            let take = left.min(self.corpus.len() - offset);
            out.extend_from_slice(&self.corpus[offset..offset + take]);
            left -= take;
            offset = 0;
        }
    }
}

/// Pseudo-random lower-case words: JSON-safe text whose 4-byte chunks rarely repeat by accident.
fn build_corpus(rng: &mut SmallRng) -> Vec<u8> {
    let mut corpus = Vec::with_capacity(CORPUS_BYTES);
    while corpus.len() < CORPUS_BYTES {
        let word_len = rng.random_range(2..9);
        for _ in 0..word_len {
            corpus.push(b'a' + rng.random_range(0..26u8));
        }
        corpus.push(b' ');
    }
    corpus.truncate(CORPUS_BYTES);
    corpus
}

/// Arrival times in `[0, duration)`, in order.
fn arrival_times(arrival: &Arrival, duration: f64, seed: u64) -> Vec<f64> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6172_7269_7661_6c73);
    let mut times = Vec::new();
    match *arrival {
        Arrival::Constant { rate } => {
            let mut k = 0u64;
            while (k as f64) / rate < duration {
                times.push(k as f64 / rate);
                k += 1;
            }
        }
        Arrival::Poisson { rate } => {
            let mut t = exponential(&mut rng, 1.0 / rate);
            while t < duration {
                times.push(t);
                t += exponential(&mut rng, 1.0 / rate);
            }
        }
        Arrival::Bursts { base_rate, burst_rate, burst_duration, period } => {
            // Thinning: candidates at the peak rate, each kept with probability rate(t) / peak.
            let peak = burst_rate.max(base_rate);
            let mut t = exponential(&mut rng, 1.0 / peak);
            while t < duration {
                let in_burst = t % period.0 < burst_duration.0;
                let rate = if in_burst { burst_rate } else { base_rate };
                if rng.random::<f64>() * peak < rate {
                    times.push(t);
                }
                t += exponential(&mut rng, 1.0 / peak);
            }
        }
        Arrival::Diurnal { min_rate, max_rate, period } => {
            let rate_at = |t: f64| {
                let phase = std::f64::consts::TAU * t / period.0;
                min_rate + (max_rate - min_rate) * 0.5 * (1.0 - phase.cos())
            };
            let mut t = exponential(&mut rng, 1.0 / max_rate);
            while t < duration {
                if rng.random::<f64>() * max_rate < rate_at(t) {
                    times.push(t);
                }
                t += exponential(&mut rng, 1.0 / max_rate);
            }
        }
    }
    times
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
