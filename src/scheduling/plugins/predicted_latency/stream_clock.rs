//! Each endpoint's engine step, as epp sees it in the tokens it streams back: when the last one passed
//! and how far apart the last two steps were. An epp extension (llm-d's features have nothing like it).
//!
//! Why: a request dispatched to a busy engine first waits for the step in progress to end, and on an
//! engine serving short prompts that wait is much of its TTFT. The scraped metrics cannot show it; the
//! stream can, since an engine step ends by emitting one token to every request it decodes. In the lab
//! (`epp-lab --samples`, `scripts/predictor-study.py`, tuning scenarios, seed 101), giving the TTFT model
//! these two numbers took its held-out error from 18.1 to 9.0% on `chat-3fast-1slow` and from 27.5 to
//! 17.4% on `longtail-1to1`, about what the engine's true remaining step time gives it.
//!
//! Chunks less than [`SAME_STEP`] apart are one step's (an engine sends a step's tokens together); a gap
//! longer than [`IDLE`] is the engine idling, not a step, and does not replace the step length.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::datastore::Endpoint;

use super::super::endpoint_key::{endpoint_key, EndpointKey, IntBuildHasher};

const SHARDS: usize = 16;
/// Chunks closer than this belong to the same engine step.
pub(super) const SAME_STEP: Duration = Duration::from_millis(1);
/// Gaps longer than this are idle time, not a step.
pub(super) const IDLE: Duration = Duration::from_secs(2);
/// What "since the last token" reads when no token has passed, or longer ago than this: an idle engine.
pub(super) const IDLE_SINCE_MS: f32 = 10_000.0;

#[derive(Debug)]
struct Clock {
    /// Held so the key (the allocation's address) cannot be reused while the entry exists.
    _endpoint: Arc<Endpoint>,
    last: Instant,
    step_ms: f32,
}

/// The step clocks of every endpoint that streamed, sharded by endpoint.
#[derive(Debug)]
pub(super) struct StreamClocks {
    shards: [Mutex<HashMap<EndpointKey, Clock, IntBuildHasher>>; SHARDS],
}

impl Default for StreamClocks {
    fn default() -> Self {
        StreamClocks { shards: std::array::from_fn(|_| Mutex::new(HashMap::default())) }
    }
}

impl StreamClocks {
    fn shard(&self, key: EndpointKey) -> MutexGuard<'_, HashMap<EndpointKey, Clock, IntBuildHasher>> {
        // Keys are addresses, aligned: drop the low bits before picking a shard.
        let lock = &self.shards[(key >> 4) % SHARDS];
        lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A response chunk from `endpoint` passed at `now`.
    pub(super) fn tick(&self, endpoint: &Arc<Endpoint>, now: Instant) {
        let key = endpoint_key(endpoint);
        let mut shard = self.shard(key);
        match shard.get_mut(&key) {
            Some(clock) => {
                let gap = now.saturating_duration_since(clock.last);
                if gap < SAME_STEP {
                    return;
                }
                if gap <= IDLE {
                    clock.step_ms = gap.as_secs_f32() * 1e3;
                }
                clock.last = now;
            }
            None => {
                shard.insert(key, Clock { _endpoint: endpoint.clone(), last: now, step_ms: 0.0 });
            }
        }
    }

    /// Milliseconds since `endpoint`'s last token at `now` (at most [`IDLE_SINCE_MS`]), and the length
    /// of its last step (0 before one was seen).
    pub(super) fn read(&self, endpoint: &Arc<Endpoint>, now: Instant) -> (f32, f32) {
        let key = endpoint_key(endpoint);
        match self.shard(key).get(&key) {
            Some(clock) => {
                let since = now.saturating_duration_since(clock.last).as_secs_f32() * 1e3;
                (since.min(IDLE_SINCE_MS), clock.step_ms)
            }
            None => (IDLE_SINCE_MS, 0.0),
        }
    }

    /// Forgets endpoints that left the pool.
    pub(super) fn forget(&self, removed: &[Arc<Endpoint>]) {
        for endpoint in removed {
            let key = endpoint_key(endpoint);
            self.shard(key).remove(&key);
        }
    }

    /// Endpoints with a clock.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> Arc<Endpoint> {
        Arc::new(Endpoint::new("pod", std::net::SocketAddr::from(([10, 0, 0, 1], 8000))))
    }

    #[test]
    fn steps_are_the_gaps_between_bursts_of_chunks() {
        let (clocks, pod, t0) = (StreamClocks::default(), endpoint(), Instant::now());
        assert_eq!(clocks.read(&pod, t0), (IDLE_SINCE_MS, 0.0), "never streamed: idle");
        clocks.tick(&pod, t0);
        // Three more tokens of the same step, then the next step 30 ms later.
        for us in [100, 300, 900] {
            clocks.tick(&pod, t0 + Duration::from_micros(us));
        }
        clocks.tick(&pod, t0 + Duration::from_millis(30));
        let (since, step) = clocks.read(&pod, t0 + Duration::from_millis(42));
        assert!((since - 12.0).abs() < 0.01 && (step - 30.0).abs() < 0.01, "{since} {step}");
        // A long idle gap is not a step: the step length stays, "since" is capped.
        clocks.tick(&pod, t0 + Duration::from_secs(60));
        let (since, step) = clocks.read(&pod, t0 + Duration::from_secs(80));
        assert_eq!(since, IDLE_SINCE_MS);
        assert!((step - 30.0).abs() < 0.01);
        clocks.forget(std::slice::from_ref(&pod));
        assert_eq!(clocks.len(), 0);
    }
}
