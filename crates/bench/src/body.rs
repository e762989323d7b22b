//! Builds each request of a run: the OpenAI body (shared system prompt, conversation history, fresh
//! question) and the gateway headers (SLOs, objective, fairness id, extras).
//!
//! Why deterministic per (conversation, turn): the text of a request depends only on the seed and its
//! place in the run, never on scheduling order, so two runs with one seed send byte-identical bodies and
//! turn `t` of a conversation really resends turns `0..t` (which is what prefix-aware routing keys on).
//! One "token" is one short word plus a space ([`BYTES_PER_TOKEN`], ~6.2 bytes), close enough to what
//! tokenizers do with English to size prompts, and exactly what epp-test-backend counts.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::workload::{Api, Workload};

/// Header carrying the time-to-first-token SLO.
pub const SLO_TTFT_HEADER: &str = "x-slo-ttft-ms";
/// Header carrying the time-per-output-token SLO.
pub const SLO_TPOT_HEADER: &str = "x-slo-tpot-ms";
pub const OBJECTIVE_HEADER: &str = "x-gateway-inference-objective";
pub const FAIRNESS_HEADER: &str = "x-gateway-inference-fairness-id";

const VOCABULARY: &[&str] = &[
    "the", "model", "server", "token", "cache", "route", "pick", "queue", "load", "score", "prefix", "batch",
    "stream", "chunk", "gateway", "envoy", "latency", "request", "answer", "prompt", "block", "memory",
    "engine", "worker", "shard", "weight", "layer", "vector", "query", "reply", "time", "rate", "burst",
    "node", "pool", "light", "fast", "slow", "warm", "cold", "north", "south", "east", "west", "green",
    "blue", "amber", "violet", "river", "stone", "cloud", "field", "forest", "ocean", "metal", "paper",
    "signal", "market", "garden", "window", "bridge", "harbor", "summit", "valley",
];

/// Average bytes of one epp-bench token: a vocabulary word and its space (what converts other
/// generators' token counts, e.g. the lab's, into epp-bench's; see [`crate::lab_workload`]).
pub const BYTES_PER_TOKEN: f64 = vocabulary_bytes() as f64 / VOCABULARY.len() as f64;

/// Bytes before the words of a shared system prompt (`System prompt 0: `; one more from group 10 on).
pub const PREFIX_HEADER_BYTES: usize = "System prompt 0: ".len();

const fn vocabulary_bytes() -> usize {
    let (mut i, mut bytes) = (0, 0);
    while i < VOCABULARY.len() {
        bytes += VOCABULARY[i].len() + 1;
        i += 1;
    }
    bytes
}

/// One request, ready to send.
#[derive(Debug, Clone)]
pub struct PlannedRequest {
    pub body: Bytes,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Tokens in the prompt as built (prefix + history + question).
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    pub objective: Option<String>,
}

/// Makes the requests of one workload.
#[derive(Debug, Clone)]
pub struct RequestFactory {
    workload: Workload,
    prefixes: Vec<String>,
    fixed_headers: Vec<(HeaderName, HeaderValue)>,
}

/// Appends `tokens` words drawn from `rng`.
fn push_words(text: &mut String, tokens: u64, rng: &mut SmallRng) {
    text.reserve(tokens as usize * 6);
    for _ in 0..tokens {
        text.push_str(VOCABULARY[rng.random_range(0..VOCABULARY.len())]);
        text.push(' ');
    }
}

fn words(tokens: u64, rng: &mut SmallRng) -> String {
    let mut text = String::new();
    push_words(&mut text, tokens, rng);
    text
}

/// A stream of the seed for one purpose, so adding a draw in one place leaves the others unchanged.
fn rng_for(seed: u64, purpose: u64, index: u64) -> SmallRng {
    let mixed = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(purpose.wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        .wrapping_add(index.wrapping_mul(0x1656_67B1_9E37_79F9));
    SmallRng::seed_from_u64(mixed)
}

const PURPOSE_PREFIX: u64 = 1;
const PURPOSE_CONVERSATION: u64 = 2;
const PURPOSE_REQUEST: u64 = 3;

fn header_value(value: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(value).ok()
}

impl RequestFactory {
    /// Prepares the shared prefixes and fixed headers. The workload must be validated (invalid header
    /// values are skipped here rather than reported).
    pub fn new(workload: &Workload) -> Self {
        let prefixes = (0..workload.prefix_groups)
            .map(|group| {
                let mut rng =
                    rng_for(workload.prefix_seed.unwrap_or(workload.seed), PURPOSE_PREFIX, u64::from(group));
                let mut text = format!("System prompt {group}: ");
                push_words(&mut text, workload.prefix_tokens, &mut rng);
                text
            })
            .collect();
        let mut fixed_headers = Vec::new();
        let slos = [(SLO_TTFT_HEADER, workload.slo_ttft_ms), (SLO_TPOT_HEADER, workload.slo_tpot_ms)];
        for (name, slo) in slos {
            if let Some(value) = slo.and_then(|ms| header_value(&ms.to_string())) {
                fixed_headers.push((HeaderName::from_static(name), value));
            }
        }
        for (name, value) in &workload.headers {
            if let (Ok(name), Some(value)) = (HeaderName::from_bytes(name.as_bytes()), header_value(value)) {
                fixed_headers.push((name, value));
            }
        }
        Self { workload: workload.clone(), prefixes, fixed_headers }
    }

    /// Request number `index` of the run, as turn `turn` of conversation `conversation`.
    pub fn build(&self, conversation: u64, turn: u32, index: u64) -> PlannedRequest {
        let w = &self.workload;
        let mut conv_rng = rng_for(w.seed, PURPOSE_CONVERSATION, conversation);
        let prefix = if self.prefixes.is_empty() {
            None
        } else {
            Some(&self.prefixes[conv_rng.random_range(0..self.prefixes.len())])
        };
        let mut prompt_tokens = if prefix.is_some() { w.prefix_tokens } else { 0 };
        // (question, reply) per earlier turn, then this turn's question.
        let mut exchanges: Vec<(String, Option<String>)> = Vec::with_capacity(turn as usize + 1);
        for t in 0..=turn {
            let question_tokens = w.prompt_tokens.sample(&mut conv_rng);
            let reply_tokens = w.output_tokens.sample(&mut conv_rng).max(1);
            let question = words(question_tokens, &mut conv_rng);
            prompt_tokens += question_tokens;
            let reply = (t < turn).then(|| {
                prompt_tokens += reply_tokens;
                words(reply_tokens, &mut conv_rng)
            });
            exchanges.push((question, reply));
        }
        let mut request_rng = rng_for(w.seed, PURPOSE_REQUEST, index);
        let max_tokens = w.output_tokens.sample(&mut request_rng).max(1);
        let mut body = match w.api {
            Api::Chat => {
                let mut messages = Vec::with_capacity(exchanges.len() * 2 + 1);
                if let Some(prefix) = prefix {
                    messages.push(json!({"role": "system", "content": prefix}));
                }
                for (question, reply) in exchanges {
                    messages.push(json!({"role": "user", "content": question}));
                    if let Some(reply) = reply {
                        messages.push(json!({"role": "assistant", "content": reply}));
                    }
                }
                json!({"model": w.model, "messages": messages, "max_tokens": max_tokens})
            }
            Api::Completions => {
                let mut prompt = prefix.cloned().unwrap_or_default();
                for (question, reply) in exchanges {
                    prompt.push_str(&question);
                    if let Some(reply) = reply {
                        prompt.push_str(&reply);
                    }
                }
                json!({"model": w.model, "prompt": prompt, "max_tokens": max_tokens})
            }
        };
        if let Value::Object(fields) = &mut body {
            fields.insert("stream".into(), Value::Bool(w.stream));
            if w.stream {
                fields.insert("stream_options".into(), json!({"include_usage": true}));
            }
            if w.ignore_eos {
                fields.insert("ignore_eos".into(), Value::Bool(true));
            }
        }
        let mut headers = self.fixed_headers.clone();
        let objective = w.objectives.as_ref().map(|mix| mix.pick(request_rng.random::<f64>()).to_string());
        if let Some(value) = objective.as_deref().and_then(header_value) {
            headers.push((HeaderName::from_static(OBJECTIVE_HEADER), value));
        }
        if !w.fairness_ids.is_empty() {
            let id = &w.fairness_ids[(index % w.fairness_ids.len() as u64) as usize];
            if let Some(value) = header_value(id) {
                headers.push((HeaderName::from_static(FAIRNESS_HEADER), value));
            }
        }
        PlannedRequest { body: Bytes::from(body.to_string()), headers, prompt_tokens, max_tokens, objective }
    }

    /// The smallest request of this workload, for the preflight check: one token out, no streaming.
    pub fn preflight(&self) -> PlannedRequest {
        let w = &self.workload;
        let body = match w.api {
            Api::Chat => json!({"model": w.model, "max_tokens": 1,
                "messages": [{"role": "user", "content": "ping"}]}),
            Api::Completions => json!({"model": w.model, "prompt": "ping", "max_tokens": 1}),
        };
        PlannedRequest {
            body: Bytes::from(body.to_string()),
            headers: self.fixed_headers.clone(),
            prompt_tokens: 1,
            max_tokens: 1,
            objective: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::Distribution;

    fn workload() -> Workload {
        Workload {
            url: Some("http://127.0.0.1:1".into()),
            prompt_tokens: Distribution::Fixed(10),
            output_tokens: Distribution::Fixed(4),
            ..Default::default()
        }
    }

    fn json_of(r: &PlannedRequest) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    fn header<'a>(r: &'a PlannedRequest, name: &str) -> Option<&'a str> {
        r.headers.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.to_str().ok())
    }

    #[test]
    fn chat_body_streams_with_usage_and_sized_prompt() {
        let r = RequestFactory::new(&workload()).build(0, 0, 0);
        let body = json_of(&r);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["max_tokens"], 4);
        let content = body["messages"][0]["content"].as_str().unwrap();
        assert_eq!(content.split_whitespace().count(), 10);
        assert_eq!(r.prompt_tokens, 10);
    }

    #[test]
    fn same_seed_same_bytes_and_prefix_groups_share_the_system_prompt() {
        let w = Workload { prefix_groups: 2, prefix_tokens: 50, ..workload() };
        let f = RequestFactory::new(&w);
        assert_eq!(f.build(3, 0, 3).body, RequestFactory::new(&w).build(3, 0, 3).body);
        let systems: std::collections::HashSet<String> = (0..40)
            .map(|c| json_of(&f.build(c, 0, c))["messages"][0]["content"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(systems.len(), 2);
        assert!(systems.iter().all(|s| s.split_whitespace().count() == 53)); // "System prompt N:" + 50
        assert_ne!(f.build(1, 0, 1).body, f.build(2, 0, 2).body);
    }

    #[test]
    fn later_turns_resend_the_conversation() {
        let w = Workload { turns: 3, ..workload() };
        let f = RequestFactory::new(&w);
        let first = json_of(&f.build(5, 0, 10));
        let third = json_of(&f.build(5, 2, 12));
        let messages = third["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 5); // user, assistant, user, assistant, user
        assert_eq!(messages[0], first["messages"][0]);
        assert_eq!(messages[1]["role"], "assistant");
        assert_eq!(f.build(5, 2, 12).prompt_tokens, 10 * 3 + 4 * 2);
    }

    #[test]
    fn completions_prompt_and_gateway_headers() {
        let w = Workload {
            api: Api::Completions,
            stream: false,
            slo_ttft_ms: Some(200.0),
            slo_tpot_ms: Some(25.5),
            objectives: Some("interactive".parse().unwrap()),
            fairness_ids: vec!["a".into(), "b".into()],
            ..workload()
        };
        let f = RequestFactory::new(&w);
        let r = f.build(0, 0, 0);
        let body = json_of(&r);
        assert!(body["prompt"].is_string());
        assert!(body.get("stream_options").is_none());
        assert_eq!(header(&r, SLO_TTFT_HEADER), Some("200"));
        assert_eq!(header(&r, SLO_TPOT_HEADER), Some("25.5"));
        assert_eq!(header(&r, OBJECTIVE_HEADER), Some("interactive"));
        assert_eq!(header(&r, FAIRNESS_HEADER), Some("a"));
        assert_eq!(header(&f.build(1, 0, 1), FAIRNESS_HEADER), Some("b"));
        assert_eq!(header(&f.build(2, 0, 2), FAIRNESS_HEADER), Some("a"));
    }
}
