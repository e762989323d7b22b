//! A study for the per-request samples only (`epp-lab --samples`): the *shadow*, a fresh copy of the
//! chosen replica's engine holding only what epp knows of its work, played forward with the request as the
//! look-ahead plays the real engine. Its TTFT error, beside the look-ahead's, says how much of the
//! look-ahead's accuracy survives epp's partial knowledge (BENCHMARKS.md §7, "Where the predictor's error
//! comes from").
//!
//! What epp knows, and so the shadow holds: the requests it sent to the replica and has not seen finish,
//! in the order sent, with their prompts (as a tokenizing epp would have them); the leading part of each
//! its prefix index matched, computed once beforehand so that it sits in the shadow's prefix cache;
//! whether their first token came (then they decode, their prompt's KV in place) and how many tokens they
//! streamed; the mean answer length of the requests that finished so far; the step in progress, from the
//! time since the replica last streamed and that step's length (prompts sent before it started that fit
//! its token budget are taken to be in it). What it is given that epp would have to learn: the engine's
//! step-time model and limits (the replica's true configuration, without noise). What it does not know:
//! how far a prompt's prefill got, what the engine's cache really holds, and the answers' lengths (which
//! do not move the TTFT: given the true lengths instead, the figures moved by at most 0.4 points).

use epp::predictor::features::Observation;
use epp_sim::{Engine, RequestEvent, SimRequest};

use super::oracle;

/// Answer length assumed before any request finished.
const FIRST_ANSWER_GUESS: u32 = 128;

/// What epp knows of one request it sent and has not seen finish.
#[derive(Debug, Clone)]
struct Sent {
    id: u64,
    /// The prompt as the engine tokenises it (what a tokenizing epp would have).
    prompt: Vec<u32>,
    /// Its leading tokens epp's prefix index matched on the replica.
    matched: usize,
    first_token: bool,
    streamed: u32,
    /// When epp sent it, virtual seconds.
    sent_at: f64,
}

/// Per replica, the requests in flight as epp sees them; and the answers seen so far.
#[derive(Default)]
pub(super) struct Ledger {
    sent: Vec<Vec<Sent>>,
    answers: (u64, u64),
}

impl Ledger {
    pub(super) fn new(replicas: usize) -> Self {
        Ledger { sent: vec![Vec::new(); replicas], answers: (0, 0) }
    }

    fn mean_answer(&self) -> u32 {
        match self.answers.0.checked_div(self.answers.1) {
            None => FIRST_ANSWER_GUESS,
            Some(mean) => mean.clamp(1, u64::from(u32::MAX)) as u32,
        }
    }

    /// The shadow's TTFT for `new` sent to `replica`, seconds, from what epp observed of it.
    pub(super) fn ttft(
        &self,
        replica: usize,
        engine_of_replica: &Engine,
        new: &SimRequest,
        o: &Observation,
        now: f64,
    ) -> f64 {
        let mut cfg = engine_of_replica.config().clone();
        cfg.noise = 0.0;
        // The step in progress started when the replica last streamed (it steps back to back while busy);
        // the prompts sent before then that fit its token budget are being prefilled by it, so their
        // first token comes at its end, which `busy_for` below already counts.
        let step_started = now - f64::from(o.ms_since_last_token) / 1e3;
        let mut budget = cfg.max_num_batched_tokens.saturating_sub(o.running as usize);
        let mut shadow = Engine::new(cfg);
        let sent = self.sent.get(replica).map_or(&[][..], Vec::as_slice);
        let new_matched = matched_of(o, new.prompt.len());
        // What epp's index says the replica holds: each matched prefix computed once beforehand (its time
        // not counted), so that it sits in the shadow's prefix cache.
        let warm = sent.iter().map(|s| &s.prompt[..s.matched]).chain([&new.prompt[..new_matched]]);
        for (k, prefix) in warm.filter(|p| !p.is_empty()).enumerate() {
            let _ = shadow.try_add_request(request(WARM_ID + k as u64, prefix.to_vec(), 1));
        }
        for _ in 0..WARM_STEPS {
            if !shadow.has_work() {
                break;
            }
            shadow.step();
        }
        let answer = self.mean_answer();
        for s in sent {
            let in_step = !s.first_token && s.sent_at < step_started && {
                let uncached = s.prompt.len() - s.matched;
                let fits = uncached <= budget;
                budget = budget.saturating_sub(uncached);
                fits
            };
            // One the shadow cannot hold is left out, as the engine would have refused it.
            let _ = if s.first_token || in_step {
                let rest = answer.saturating_sub(s.streamed).max(1);
                shadow.try_add_transferred(request(s.id, s.prompt.clone(), rest))
            } else {
                shadow.try_add_request(request(s.id, s.prompt.clone(), answer))
            };
        }
        // What is left of the step in progress, from the stream: a step as long as the last one.
        let busy_for = f64::from((o.last_step_ms - o.ms_since_last_token).max(0.0)) / 1e3;
        oracle::look_ahead(&shadow, busy_for, request(new.id, new.prompt.clone(), answer)).ttft
    }

    pub(super) fn sent(&mut self, replica: usize, new: &SimRequest, o: &Observation, now: f64) {
        if let Some(list) = self.sent.get_mut(replica) {
            let matched = matched_of(o, new.prompt.len());
            let prompt = new.prompt.clone();
            list.push(Sent { id: new.id, prompt, matched, first_token: false, streamed: 0, sent_at: now });
        }
    }

    /// What epp sees of `event` from `replica`'s stream.
    pub(super) fn observe(&mut self, replica: usize, event: &RequestEvent) {
        match *event {
            RequestEvent::FirstToken { id, .. } => self.first_token(replica, id),
            RequestEvent::Token { id } => self.token(replica, id),
            RequestEvent::Finished { id, output_tokens, .. } => self.finished(replica, id, output_tokens),
        }
    }

    fn find(&mut self, replica: usize, id: u64) -> Option<&mut Sent> {
        self.sent.get_mut(replica)?.iter_mut().find(|s| s.id == id)
    }

    pub(super) fn first_token(&mut self, replica: usize, id: u64) {
        if let Some(s) = self.find(replica, id) {
            s.first_token = true;
            s.streamed = 1;
        }
    }

    pub(super) fn token(&mut self, replica: usize, id: u64) {
        if let Some(s) = self.find(replica, id) {
            s.streamed += 1;
        }
    }

    pub(super) fn finished(&mut self, replica: usize, id: u64, output_tokens: u32) {
        if let Some(list) = self.sent.get_mut(replica) {
            list.retain(|s| s.id != id);
        }
        self.answers.0 += u64::from(output_tokens);
        self.answers.1 += 1;
    }
}

/// Ids of the warm-up requests, above any request of a plan.
const WARM_ID: u64 = 1 << 62;

/// The most engine steps the warm-up runs (a bound, not a figure: prefixes take a few dozen).
const WARM_STEPS: usize = 100_000;

/// The leading tokens of a `len`-token prompt epp's prefix index matched.
fn matched_of(o: &Observation, len: usize) -> usize {
    let score = f64::from(o.prefix_cache_score.clamp(0.0, 1.0));
    ((len as f64 * score).round() as usize).min(len)
}

fn request(id: u64, prompt: Vec<u32>, answer: u32) -> SimRequest {
    SimRequest { id, prompt, max_output_tokens: answer, lora: None }
}
