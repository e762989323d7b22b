//! Prefill/decode disaggregation in the lab, as the decode sidecar runs it: when epp names a prefill
//! endpoint, the request's prefill leg (one output token) runs on that replica; when it finishes, the
//! prompt's KV takes the fleet's transfer time to reach the decode replica, where the request enters the
//! engine with its prompt computed but its last token (`Engine::try_add_transferred`). The client's first
//! token is the decode replica's, so TTFT counts prefill, transfer and the decode queue. A prefill leg
//! the engine refuses fails the request, as the sidecar's 502 does.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::{Outcome, Run, VirtualTime};
use crate::LabError;
use epp_sim::{FinishReason, SimRequest};

/// Prefill legs' engine ids: the request's index with this bit set.
const PREFILL_LEG: u64 = 1 << 62;

/// Requests between their legs.
#[derive(Default)]
pub(super) struct Transfers {
    /// Decode legs waiting for their prefill leg: request index → (decode replica, request).
    parked: HashMap<usize, (usize, SimRequest)>,
    /// Decode legs whose KV is on its way, by arrival time.
    in_flight: BinaryHeap<Reverse<(VirtualTime, usize)>>,
}

impl Transfers {
    /// When the next transferred request reaches its decode replica.
    pub(super) fn next_time(&self) -> Option<f64> {
        self.in_flight.peek().map(|Reverse((t, _))| t.0)
    }
}

/// The request index of a prefill leg's engine id.
pub(super) fn prefill_leg_of(id: u64) -> Option<u64> {
    (id & PREFILL_LEG != 0).then_some(id & !PREFILL_LEG)
}

impl Run<'_> {
    /// The replica epp named for `dispatch`'s prefill leg, if it disaggregated.
    pub(super) fn prefill_replica(&self, dispatch: Option<&epp::scheduling::DispatchInfo>) -> Option<usize> {
        let prefill = dispatch?.prefill_endpoint.as_ref()?;
        self.endpoints.iter().position(|e| Arc::ptr_eq(e, prefill))
    }

    /// Starts `request`'s prefill leg on `prefill`; its decode leg waits for it, then goes to `decode`.
    pub(super) fn start_prefill(
        &mut self,
        index: usize,
        request: SimRequest,
        prefill: usize,
        decode: usize,
        t: f64,
    ) {
        let leg = SimRequest { id: request.id | PREFILL_LEG, max_output_tokens: 1, ..request.clone() };
        self.transfers.parked.insert(index, (decode, request));
        let replica = &mut self.replicas[prefill];
        replica.engine.add_request(leg);
        if replica.in_step.is_none() {
            self.start_step(prefill, t);
        }
    }

    /// A prefill leg's engine finished it: the KV leaves for the decode replica, or the request fails.
    pub(super) fn prefill_finished(
        &mut self,
        index: usize,
        reason: FinishReason,
        t: f64,
    ) -> Result<(), LabError> {
        let Some((_, request)) = self.transfers.parked.get(&index) else {
            return Err(LabError::Internal(format!("prefill leg of request {index} finished twice")));
        };
        if reason == FinishReason::Abort {
            self.transfers.parked.remove(&index);
            self.fail(index, t);
            return Ok(());
        }
        let arrival = t + request.prompt.len() as f64 * self.kv_seconds_per_token;
        self.transfers.in_flight.push(Reverse((VirtualTime(arrival), index)));
        Ok(())
    }

    /// The next transferred request reaches its decode replica.
    pub(super) fn transfer_arrives(&mut self, t: f64) {
        let Some(Reverse((_, index))) = self.transfers.in_flight.pop() else { return };
        let Some((decode, request)) = self.transfers.parked.remove(&index) else { return };
        let replica = &mut self.replicas[decode];
        if replica.engine.try_add_transferred(request).is_err() {
            return self.fail(index, t);
        }
        if replica.in_step.is_none() {
            self.start_step(decode, t);
        }
    }

    /// Ends a request that could not be served, releasing what epp holds for it.
    fn fail(&mut self, index: usize, t: f64) {
        let record = &mut self.records[index];
        record.outcome = Outcome::Aborted;
        record.finish = t;
        let now = self.clock.at(t);
        self.router.on_complete(index, self.dispatches[index].take(), None, now, now);
    }
}
