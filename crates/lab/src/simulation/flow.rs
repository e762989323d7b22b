//! Flow control in the lab, for configs with `featureGates: [flowControl]`: an arriving request joins its
//! epp replica's queue, and the queue releases requests to scheduling while the config's saturation
//! detector says the pool has room, as the server's dispatch cycle does (src/flowcontrol/dispatch.rs):
//! higher priority first, first come first served within a priority (one flow: the lab's requests carry
//! no fairness ID), and a cycle stops at the first request it cannot release, so a lower priority never
//! overtakes. The cycle runs when something that changes saturation may have happened: an arrival, a
//! scrape (new telemetry), the end of an engine step (requests finished, in-flight counts moved).
//!
//! What the server does that this does not: queue capacity and TTLs (the server's defaults have no TTL;
//! a full queue would answer 429), the safety tick (telemetry never goes stale in the lab, so it would
//! change nothing) and pending load (a released request is scheduled at the same virtual instant, so
//! nothing is ever pending).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use super::{LabError, Outcome, Run, RunReport};

/// The held requests of each epp replica, by (priority, highest first; request index, i.e. arrival).
#[derive(Default)]
pub(super) struct Queues {
    held: Vec<BTreeSet<(Reverse<i32>, usize)>>,
    /// Requests that waited (were not released at the instant they arrived), and their total wait.
    waited: u64,
    wait_s: f64,
}

impl Queues {
    pub(super) fn new(replicas: usize) -> Self {
        Queues { held: vec![BTreeSet::new(); replicas], waited: 0, wait_s: 0.0 }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.held.iter().all(BTreeSet::is_empty)
    }

    /// The run's account of flow control: how many requests waited, and how long on average.
    pub(super) fn report(&self, report: &mut RunReport) {
        report.flow_waited = self.waited;
        report.flow_wait_mean_s = (self.waited > 0).then(|| self.wait_s / self.waited as f64);
    }
}

impl Run<'_> {
    /// Request `index` arrives at `t`: straight to scheduling without flow control, else into its
    /// replica's queue and through a dispatch cycle.
    pub(super) fn arrive(&mut self, index: usize, t: f64) -> Result<(), LabError> {
        if !self.router.flow_controls() {
            return self.dispatch(index, t);
        }
        let k = self.router.turn_of(index);
        let priority = self.plan.requests[index].priority;
        if let Some(queue) = self.flow.held.get_mut(k) {
            queue.insert((Reverse(priority), index));
        }
        self.release(t).map(|_| ())
    }

    /// The dispatch cycle after a scrape at `t`. When `only_held` (nothing but held requests is left) and
    /// it releases none, nothing ever will: the fleet is idle and the detector still reads it as full.
    pub(super) fn release_after_scrape(&mut self, t: f64, only_held: bool) -> Result<(), LabError> {
        if self.release(t)? == 0 && only_held {
            self.refuse_held();
        }
        Ok(())
    }

    /// One dispatch cycle on every replica's queue at `t`; returns how many requests it released.
    pub(super) fn release(&mut self, t: f64) -> Result<usize, LabError> {
        let mut released = 0;
        if self.flow.is_empty() {
            return Ok(released);
        }
        let now = self.clock.at(t);
        for k in 0..self.flow.held.len() {
            while let Some(&(_, index)) = self.flow.held[k].first() {
                if !self.router.admits(k, &self.endpoints, now) {
                    break;
                }
                self.flow.held[k].pop_first();
                let waited = t - self.records[index].arrival;
                if waited > 0.0 {
                    self.flow.waited += 1;
                    self.flow.wait_s += waited;
                }
                self.dispatch(index, t)?;
                released += 1;
            }
        }
        Ok(released)
    }

    /// Every held request refused (the server would hold them until their clients gave up).
    fn refuse_held(&mut self) {
        for queue in &mut self.flow.held {
            for (_, index) in std::mem::take(queue) {
                self.records[index].outcome = Outcome::Rejected;
                self.rejected_429 += 1;
            }
        }
    }
}
