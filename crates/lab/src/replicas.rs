//! The epp replicas of one run (`epp-lab --epp-replicas N`): N active epp pods behind one gateway.
//!
//! Requests are dealt to them in turn, as a gateway spreads its ext_proc streams over the pods. Each
//! replica is a whole pipeline of its own, so it knows only what it routed: its in-flight counts, its
//! approximate prefix index, its predictor's samples. All of them see the scraped metrics (the same
//! endpoints) and every engine's KV events (each pod subscribes to every engine). That is the case llm-d's
//! precise routing is for: with two replicas, each approximate index sees half the traffic.
//!
//! With `speculativePeers`, each replica's speculative entries reach the others as the server's datagrams
//! would, at the same instant. A response goes back to the replica that routed it. Baselines (random,
//! round-robin, the oracle) are one router whatever N is.

use std::sync::Arc;
use std::time::Instant;

use epp::datastore::{Datastore, Endpoint};
use epp::scheduling::{DispatchInfo, Usage};

use super::router::{Arriving, Refused, Routed, Router, RouterChoice, RouterSpec};
use super::training::PredictorReport;

pub(crate) struct Replicas {
    routers: Vec<Router>,
    /// Which replica routed each request of the plan.
    owner: Vec<u16>,
}

impl Replicas {
    /// `choice.epp_replicas` routers (one for a baseline), for a plan of `requests`.
    pub(crate) fn new(
        choice: &RouterChoice,
        datastore: &Arc<Datastore>,
        seed: u64,
        requests: usize,
    ) -> Result<Self, String> {
        let pipelines = matches!(choice.spec, RouterSpec::Default | RouterSpec::Config { .. });
        let n = if pipelines { choice.epp_replicas.clamp(1, usize::from(u16::MAX)) } else { 1 };
        let routers = (0..n as u64)
            .map(|k| Router::new(choice, datastore.clone(), seed.wrapping_add(k)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Replicas { routers, owner: vec![0; requests] })
    }

    fn first(&self) -> &Router {
        &self.routers[0]
    }

    pub(crate) fn is_oracle(&self) -> bool {
        matches!(self.first(), Router::Oracle)
    }

    pub(crate) fn reads_telemetry(&self) -> bool {
        self.first().reads_telemetry()
    }

    pub(crate) fn wants_kv_events(&self) -> bool {
        self.first().wants_kv_events()
    }

    /// Every replica indexes every engine's events.
    pub(crate) fn kv_events(&self, endpoint: &Endpoint, model: &str, payload: &[u8]) {
        for router in &self.routers {
            router.kv_events(endpoint, model, payload);
        }
    }

    /// The earliest retrain tick due among the replicas' predictors.
    pub(crate) fn next_retrain(&self) -> Option<f64> {
        self.routers.iter().filter_map(Router::next_retrain).min_by(f64::total_cmp)
    }

    /// Runs the retrain tick that is due (the earliest).
    pub(crate) fn retrain(&mut self) {
        let due = self.next_retrain();
        if let Some(router) = self.routers.iter_mut().find(|r| r.next_retrain() == due) {
            router.retrain();
        }
    }

    /// The first replica's predictor, as the run's.
    pub(crate) fn predictor_report(&self) -> Option<PredictorReport> {
        self.first().predictor_report()
    }

    /// The replica whose turn request `index` is.
    pub(crate) fn turn_of(&self, index: usize) -> usize {
        index % self.routers.len()
    }

    /// How many epp replicas share the traffic.
    pub(crate) fn len(&self) -> usize {
        self.routers.len()
    }

    /// Whether the config holds requests in flow control.
    pub(crate) fn flow_controls(&self) -> bool {
        self.first().flow_controls()
    }

    /// Whether replica `k`'s flow control would release a request now (always, without flow control).
    pub(crate) fn admits(&mut self, k: usize, endpoints: &[Arc<Endpoint>], now: Instant) -> bool {
        self.routers.get_mut(k).is_none_or(|r| r.admits(endpoints, now))
    }

    /// Routes request `index` on the replica whose turn it is.
    pub(crate) fn route(
        &mut self,
        index: usize,
        req: &Arriving<'_>,
        endpoints: &[Arc<Endpoint>],
    ) -> Result<Routed, Refused> {
        let k = self.turn_of(index);
        if let Some(owner) = self.owner.get_mut(index) {
            *owner = k as u16;
        }
        let routed = self.routers[k].route(req, endpoints);
        self.carry_peer_messages(req.now);
        routed
    }

    /// Hands what each replica's producers sent their peers (`speculativePeers`) to the other replicas'
    /// matching producers, at once: between pods of one cluster a datagram takes well under a
    /// millisecond, far below the engine steps and event delays the lab models.
    fn carry_peer_messages(&self, now: Instant) {
        for (k, router) in self.routers.iter().enumerate() {
            for (i, link) in router.peer_links().iter().enumerate() {
                for message in link.drain() {
                    let others = self.routers.iter().enumerate().filter(|&(j, _)| j != k);
                    for peer in others.filter_map(|(_, r)| r.peer_links().get(i)) {
                        peer.pool.apply_peer(k as u64, &message, now, peer.ttl);
                    }
                }
            }
        }
    }

    fn owner_of(&mut self, index: usize) -> &mut Router {
        let k = self.owner.get(index).map_or(0, |&k| usize::from(k));
        &mut self.routers[k]
    }

    pub(crate) fn on_first_token(&mut self, index: usize, dispatch: Option<&DispatchInfo>, now: Instant) {
        self.owner_of(index).on_first_token(dispatch, now);
        self.carry_peer_messages(now);
    }

    pub(crate) fn on_token(&mut self, index: usize, dispatch: Option<&DispatchInfo>, now: Instant) {
        self.owner_of(index).on_token(dispatch, now);
    }

    pub(crate) fn on_complete(
        &mut self,
        index: usize,
        dispatch: Option<DispatchInfo>,
        usage: Option<Usage>,
        first_token: Instant,
        now: Instant,
    ) {
        self.owner_of(index).on_complete(dispatch, usage, first_token, now);
        self.carry_peer_messages(now);
    }
}
