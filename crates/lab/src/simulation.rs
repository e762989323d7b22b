//! The virtual-time event loop: one run of one routing config over the planned request stream.
//!
//! Three kinds of event advance the clock: a request arrives (it is written as an OpenAI body, parsed by
//! epp's parser, routed, tokenised and queued in its replica's engine), a replica's engine step ends (its
//! token events take effect, each token reaching the pipeline's response hooks as one streamed chunk, and
//! the replica steps again while it has work), and a telemetry scrape (every
//! replica's engine stats become the endpoint's metrics, which stay as they are until the next scrape: stale
//! in between, as in production). An engine step is computed when it starts, so its events are held until its
//! end (and a scrape during a step already sees the batch it scheduled, as vLLM's own stats, logged after
//! scheduling, do). A fourth, for configs with a latency predictor: its retrain tick (every 10 s of virtual
//! time, see [`super::training`]). Ties go: scrape, then retrain, then step ends, then arrivals; replicas
//! in index order. Nothing reads a clock: `Instant`s handed to plugins are a fixed base plus virtual time.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashSet};
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fleet::Fleet;
use super::generate::Plan;
use super::oracle::{self, Lookahead};
use super::replicas::Replicas;
use super::report::{summarize, Outcome, Record, ReplicaSummary, RunReport};
use super::router::{Arriving, Routed, RouterChoice};
use super::samples::{self, Dispatched};
use super::workload::Workload;
use super::LabError;
use epp::datastore::{Datastore, Endpoint, EndpointTelemetry};
use epp::request::parse_request;
use epp::scheduling::{DispatchInfo, Usage};
use epp_sim::{encode_batch, tokenize, Engine, FinishReason, RequestEvent, SimRequest};

mod flow;
mod lookahead;
mod pd;
mod shadow;

const CHAT_PATH: &str = "/v1/chat/completions";

/// A point of virtual time ordered by `total_cmp`, so it can key the event heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct VirtualTime(f64);

impl Eq for VirtualTime {}

impl PartialOrd for VirtualTime {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for VirtualTime {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

struct Replica {
    engine: Engine,
    endpoint: Arc<Endpoint>,
    /// Events of the step in progress, delivered when it ends; `None` while idle.
    in_step: Option<Vec<RequestEvent>>,
    /// When the step in progress ends (meaningful while `in_step` is `Some`).
    step_end: f64,
    step_started: f64,
    /// When the last step ended and how long it took (what a client streaming from the replica sees).
    last_step: (f64, f64),
}

/// Maps virtual seconds to the `Instant`s plugins see.
#[derive(Clone, Copy)]
struct Clock {
    base: Instant,
}

impl Clock {
    fn at(self, t: f64) -> Instant {
        self.base + Duration::from_secs_f64(t.max(0.0))
    }
}

/// The state of one run.
struct Run<'a> {
    plan: &'a Plan,
    router: Replicas,
    replicas: Vec<Replica>,
    endpoints: Vec<Arc<Endpoint>>,
    records: Vec<Record>,
    dispatches: Vec<Option<DispatchInfo>>,
    steps: BinaryHeap<Reverse<(VirtualTime, usize)>>,
    clock: Clock,
    engine_steps: u64,
    body: Vec<u8>,
    request_id: String,
    /// The objectives every request carries (zeros unless the workload sends its SLO).
    slo: epp::request::Slo,
    /// Requests the pipeline refused with a 429 (load: shed, nothing schedulable, an admitter's denial).
    rejected_429: u64,
    /// The objectives the oracle routes for (the workload's SLO, sent or not).
    oracle_slo: Option<super::workload::Slo>,
    /// Reused by the oracle for each request's per-replica lookaheads.
    lookaheads: Vec<Lookahead>,
    /// Per-request samples, when the choice asks for them (empty otherwise).
    samples: Vec<Dispatched>,
    /// The workload's base model: what the engines' KV events are about when they name no adapter.
    model: &'a str,
    /// P/D: requests between their prefill and decode legs, and the KV transfer time per prompt token.
    transfers: pd::Transfers,
    kv_seconds_per_token: f64,
    /// Requests held by flow control (configs with the `flowControl` gate).
    flow: flow::Queues,
    /// What epp knows of each replica's work, for the samples' shadow column (only with samples).
    shadow: Option<shadow::Ledger>,
}

/// Simulates `plan` on `fleet` routed by `choice`. Deterministic: same inputs, same report.
pub fn run(
    fleet: &Fleet,
    workload: &Workload,
    plan: &Plan,
    choice: &RouterChoice,
) -> Result<RunReport, LabError> {
    let datastore = Arc::new(Datastore::new("lab"));
    datastore.set_endpoints(fleet.replicas.iter().enumerate().map(|(i, r)| endpoint(i, r)).collect());
    let endpoints: Vec<Arc<Endpoint>> = datastore.endpoints().iter().cloned().collect();
    let router = Replicas::new(choice, &datastore, workload.seed, plan.requests.len())
        .map_err(|message| LabError::Router { name: choice.name.clone(), message })?;
    let replicas = fleet
        .replicas
        .iter()
        .zip(&endpoints)
        .enumerate()
        .map(|(i, (spec, ep))| {
            let mut cfg = spec.engine.clone();
            cfg.seed = workload.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i as u64);
            Replica {
                engine: Engine::new(cfg),
                endpoint: ep.clone(),
                in_step: None,
                step_end: 0.0,
                step_started: 0.0,
                last_step: (f64::NAN, f64::NAN),
            }
        })
        .collect();
    let n = plan.requests.len();
    let n_routers = router.len();
    let mut run = Run {
        plan,
        router,
        replicas,
        endpoints,
        records: plan.requests.iter().map(|r| Record::new(r.arrival)).collect(),
        dispatches: (0..n).map(|_| None).collect(),
        steps: BinaryHeap::new(),
        clock: Clock { base: Instant::now() },
        engine_steps: 0,
        body: Vec::new(),
        request_id: String::new(),
        slo: if choice.slo_headers { workload.slo_as_objectives() } else { workload.request_slo() },
        rejected_429: 0,
        oracle_slo: workload.slo,
        lookaheads: Vec::with_capacity(fleet.replicas.len()),
        samples: if choice.samples.is_some() { vec![Dispatched::default(); n] } else { Vec::new() },
        model: &workload.model,
        transfers: pd::Transfers::default(),
        kv_seconds_per_token: fleet.kv_transfer_seconds_per_token,
        flow: flow::Queues::new(n_routers),
        shadow: choice.samples.is_some().then(|| shadow::Ledger::new(fleet.replicas.len())),
    };
    if run.router.wants_kv_events() {
        for r in &mut run.replicas {
            r.engine.enable_kv_events();
        }
    }
    let makespan = run.event_loop(fleet.scrape_interval)?;
    let summaries: Vec<ReplicaSummary> = run
        .replicas
        .iter()
        .map(|r| ReplicaSummary {
            name: r.endpoint.name.clone(),
            profile: r.engine.config().profile.name.clone(),
            preemptions: r.engine.stats().preemptions,
        })
        .collect();
    let mut report =
        summarize(&choice.name, &run.records, &summaries, workload.slo, makespan, run.engine_steps);
    report.rejected_429 = run.rejected_429;
    run.flow.report(&mut report);
    report.predictor = run.router.predictor_report();
    if let Some(dir) = &choice.samples {
        let path = dir.join(format!("{}.csv", choice.name));
        let profiles: Vec<String> = summaries.iter().map(|s| s.profile.clone()).collect();
        samples::write(&path, &run.records, &run.samples, &profiles)
            .map_err(|e| LabError::Internal(format!("writing {}: {e}", path.display())))?;
    }
    Ok(report)
}

fn endpoint(index: usize, spec: &super::fleet::ReplicaSpec) -> Endpoint {
    let octets = (index as u16).to_be_bytes();
    let addr = std::net::SocketAddr::from(([10, 0, octets[0], octets[1]], 8000));
    Endpoint::new(spec.name.clone(), addr).with_labels(spec.labels.clone())
}

impl Run<'_> {
    /// Runs until every request has been handled; returns the time of the last event.
    fn event_loop(&mut self, scrape_interval: f64) -> Result<f64, LabError> {
        let scrapes = self.router.reads_telemetry();
        let mut next_arrival = 0;
        let mut ticks = 0u64;
        let mut now: f64 = 0.0;
        loop {
            let step_end = self.steps.peek().map(|Reverse((t, _))| t.0);
            let transfer = self.transfers.next_time();
            let arrival = self.plan.requests.get(next_arrival).map(|r| r.arrival);
            let tick = ticks as f64 * scrape_interval;
            let next_work = [step_end, transfer, arrival].into_iter().flatten().min_by(f64::total_cmp);
            if next_work.is_none() && (self.flow.is_empty() || !scrapes) {
                break;
            }
            let next_work = next_work.unwrap_or(f64::INFINITY);
            if scrapes && tick <= next_work {
                self.scrape(tick);
                ticks += 1;
                now = now.max(tick);
                self.release_after_scrape(tick, next_work.is_infinite())?;
                continue;
            }
            if self.router.next_retrain().is_some_and(|t| t <= next_work) {
                self.router.retrain();
                continue;
            }
            now = next_work;
            if step_end == Some(next_work) {
                if let Some(Reverse((_, replica))) = self.steps.pop() {
                    self.end_step(replica, now)?;
                }
            } else if transfer == Some(next_work) {
                self.transfer_arrives(now);
            } else {
                self.arrive(next_arrival, now)?;
                next_arrival += 1;
            }
        }
        Ok(now)
    }

    fn scrape(&mut self, t: f64) {
        let update_time = Some(self.clock.at(t));
        for r in &self.replicas {
            let stats = r.engine.stats();
            let cfg = r.engine.config();
            r.endpoint.update_telemetry(EndpointTelemetry {
                waiting_queue_size: stats.waiting as u64,
                running_requests: stats.running as u64,
                kv_cache_usage: stats.kv_usage,
                active_models: stats.running_loras.into_iter().collect::<HashSet<_>>(),
                waiting_models: stats.waiting_loras.into_iter().collect::<HashSet<_>>(),
                max_active_models: cfg.max_loras,
                cache_block_size: cfg.block_size,
                cache_num_blocks: cfg.num_gpu_blocks,
                update_time,
            });
        }
    }

    /// Writes, parses, routes and queues request `index` in its replica's engine at `t` (its arrival, or
    /// its release from flow control).
    fn dispatch(&mut self, index: usize, t: f64) -> Result<(), LabError> {
        let planned = self.plan.requests[index];
        self.plan.write_body(&planned, &mut self.body);
        let parsed = parse_request(CHAT_PATH, &self.body).map_err(|e| {
            LabError::Internal(format!("request {index}: the lab wrote an unparsable body: {e}"))
        })?;
        self.request_id.clear();
        // Writing into a String cannot fail.
        let _ = write!(self.request_id, "lab-{index}");
        let prompt = tokenize(std::str::from_utf8(parsed.prefix_bytes(&self.body)).unwrap_or(""));
        let request = SimRequest {
            id: index as u64,
            prompt,
            max_output_tokens: self.plan.output_tokens(&planned),
            lora: self.plan.model_of(&planned).map(str::to_string),
        };
        let arriving = Arriving {
            request_id: &self.request_id,
            body: &self.body,
            parsed: &parsed,
            priority: planned.priority,
            slo: self.slo,
            now: self.clock.at(t),
            token_ids: &request.prompt,
        };
        let routed = if self.router.is_oracle() {
            Ok(Routed { replica: self.oracle_pick(&request, t), dispatch: None })
        } else {
            self.router.route(index, &arriving, &self.endpoints)
        };
        let routed = match routed {
            Ok(r) => r,
            Err(refused) => {
                self.rejected_429 += u64::from(refused.status == 429);
                self.records[index].outcome = Outcome::Rejected;
                return Ok(());
            }
        };
        let record = &mut self.records[index];
        record.replica = routed.replica as u32;
        record.prompt_tokens = request.prompt.len() as u32;
        if !self.samples.is_empty() {
            self.samples[index] = self.sample(routed.replica, &routed, &request, t);
            if let (Some(ledger), Some(o)) = (&mut self.shadow, self.samples[index].observation) {
                ledger.sent(routed.replica, &request, &o, t);
            }
        }
        let prefill = self.prefill_replica(routed.dispatch.as_ref());
        self.dispatches[index] = routed.dispatch;
        if let Some(prefill) = prefill {
            self.start_prefill(index, request, prefill, routed.replica, t);
            return Ok(());
        }
        let replica = &mut self.replicas[routed.replica];
        replica.engine.add_request(request);
        if replica.in_step.is_none() {
            self.start_step(routed.replica, t);
        }
        Ok(())
    }

    fn start_step(&mut self, replica: usize, t: f64) {
        let r = &mut self.replicas[replica];
        let result = r.engine.step();
        self.engine_steps += 1;
        r.in_step = Some(result.events);
        r.step_end = t + result.duration;
        r.step_started = t;
        self.steps.push(Reverse((VirtualTime(r.step_end), replica)));
    }

    fn end_step(&mut self, replica: usize, t: f64) -> Result<(), LabError> {
        let r = &mut self.replicas[replica];
        let events = r.in_step.take().unwrap_or_default();
        r.last_step = (t, t - r.step_started);
        let now = self.clock.at(t);
        for event in &events {
            if let Some(leg) = pd::prefill_leg_of(event.id()) {
                // A prefill leg's tokens are not the client's; its end sends the KV on.
                if let RequestEvent::Finished { reason, .. } = *event {
                    self.prefill_finished(self.index(leg)?, reason, t)?;
                }
                continue;
            }
            if let Some(ledger) = &mut self.shadow {
                ledger.observe(replica, event);
            }
            match *event {
                RequestEvent::FirstToken { id, cached_tokens } => {
                    let i = self.index(id)?;
                    self.records[i].first_token = t;
                    self.records[i].cached_tokens = cached_tokens;
                    self.router.on_first_token(i, self.dispatches[i].as_ref(), now);
                }
                RequestEvent::Token { id } => {
                    let i = self.index(id)?;
                    self.router.on_token(i, self.dispatches[i].as_ref(), now);
                }
                RequestEvent::Finished { id, output_tokens, reason } => {
                    let i = self.index(id)?;
                    let record = &mut self.records[i];
                    if record.outcome != Outcome::Pending {
                        record.duplicate_finishes += 1;
                        continue;
                    }
                    record.finish = t;
                    record.output_tokens = output_tokens;
                    let usage = match reason {
                        FinishReason::Abort => {
                            record.outcome = Outcome::Aborted;
                            None
                        }
                        FinishReason::Stop | FinishReason::Length => {
                            record.outcome = Outcome::Completed;
                            Some(Usage {
                                prompt_tokens: u64::from(record.prompt_tokens),
                                completion_tokens: u64::from(output_tokens),
                                cached_tokens: u64::from(record.cached_tokens),
                            })
                        }
                    };
                    let first_token = self.clock.at(record.first_token);
                    self.router.on_complete(i, self.dispatches[i].take(), usage, first_token, now);
                }
            }
        }
        let r = &mut self.replicas[replica];
        let kv_events = r.engine.take_kv_events();
        if !kv_events.is_empty() {
            let payload = encode_batch(t, &kv_events, r.engine.config().block_size);
            self.router.kv_events(&r.endpoint, self.model, &payload);
        }
        if self.replicas[replica].engine.has_work() {
            self.start_step(replica, t);
        }
        self.release(t).map(|_| ())
    }

    fn index(&self, id: u64) -> Result<usize, LabError> {
        usize::try_from(id)
            .ok()
            .filter(|&i| i < self.records.len())
            .ok_or_else(|| LabError::Internal(format!("the engine reported unknown request id {id}")))
    }
}

#[cfg(test)]
#[path = "simulation_tests.rs"]
mod tests;
