//! The event loop's own tests: virtual time's order, a lone request's exact step times, admission (flow
//! control and legacy shedding) and the samples' shadow.

use super::*;
use crate::router::RouterSpec;
use epp_sim::AcceleratorProfile;

#[test]
fn virtual_time_orders_like_numbers_and_maps_monotonically() {
    let mut heap = BinaryHeap::new();
    for (t, r) in [(0.5, 0), (0.1, 2), (0.1, 1), (2.0, 0)] {
        heap.push(Reverse((VirtualTime(t), r)));
    }
    let order: Vec<(f64, usize)> =
        std::iter::from_fn(|| heap.pop().map(|Reverse((t, r))| (t.0, r))).collect();
    assert_eq!(order, [(0.1, 1), (0.1, 2), (0.5, 0), (2.0, 0)]);
    let clock = Clock { base: Instant::now() };
    assert!(clock.at(0.0) < clock.at(0.001) && clock.at(1.0) - clock.at(0.0) == Duration::from_secs(1));
}

#[test]
fn a_lone_request_takes_the_engines_step_times() {
    // No noise, one replica, one request of ~1000 prompt tokens and 3 output tokens: its TTFT is the
    // prefill step, and each later token one decode step.
    let fleet = Fleet::from_yaml("noise: 0\nreplicas: [{profile: h100-8b}]").unwrap();
    let workload = Workload::from_yaml(
        "duration: 0.5s\narrival: {constant: {rate: 2}}\nprompt_tokens: {constant: 990}\noutput_tokens: {constant: 3}\n",
    )
    .unwrap();
    let plan = Plan::new(&workload);
    assert_eq!(plan.requests.len(), 1);
    for name in ["round-robin", "default"] {
        let choice = RouterChoice::baseline(name).unwrap();
        let report = run(&fleet, &workload, &plan, &choice).unwrap();
        let ttft = report.ttft_s.unwrap().p50;
        let tpot = report.tpot_s.unwrap().p50;
        let h100 = AcceleratorProfile::h100_8b();
        assert!((0.060..0.080).contains(&ttft), "{name}: ttft {ttft}");
        let decode = h100.base_overhead + h100.c_decode_seq;
        assert!((decode..decode + 0.001).contains(&tpot), "{name}: tpot {tpot}");
        assert_eq!(report.engine_steps, 3);
        assert_eq!(report.endpoints[0].requests, 1);
    }
}

/// A queue-scorer profile, with or without the `flowControl` gate.
fn queue_profile(flow_control: bool) -> RouterChoice {
    let gates = if flow_control { "featureGates: [flowControl]\n" } else { "" };
    let yaml = format!(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n{gates}plugins:\n- type: queue-scorer\n\
         schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
    );
    RouterChoice::new(if flow_control { "flow-control" } else { "direct" }, RouterSpec::Config { yaml })
}

#[test]
fn flow_control_holds_a_burst_while_the_pool_is_saturated_and_serves_every_request() {
    // One replica and a burst far above what it serves: without flow control every request goes to the
    // engine at once and waits in its queue; with it, requests wait in epp's queue while the
    // utilization detector (queue 5, KV 0.8) says the pool is full, and are released as it drains.
    let fleet = Fleet::from_yaml("noise: 0\nreplicas: [{profile: l4-8b}]").unwrap();
    let workload = Workload::from_yaml(
        "duration: 2s\narrival: {constant: {rate: 40}}\nprompt_tokens: {constant: 500}\noutput_tokens: {constant: 40}\n\
         priorities: [{priority: 1, weight: 1}, {priority: 0, weight: 1}]\n",
    )
    .unwrap();
    let plan = Plan::new(&workload);
    let direct = run(&fleet, &workload, &plan, &queue_profile(false)).unwrap();
    let held = run(&fleet, &workload, &plan, &queue_profile(true)).unwrap();
    assert_eq!((direct.flow_waited, direct.flow_wait_mean_s), (0, None));
    assert!(held.flow_waited > 0 && held.flow_wait_mean_s.is_some_and(|s| s > 0.0), "{held:?}");
    for report in [&direct, &held] {
        assert_eq!(report.completed, plan.requests.len() as u64, "{report:?}");
        assert_eq!((report.rejected, report.unfinished, report.duplicate_finishes), (0, 0, 0));
    }
    // Deterministic, as every lab run.
    assert_eq!(run(&fleet, &workload, &plan, &queue_profile(true)).unwrap(), held);
}

#[test]
fn without_flow_control_sheddable_requests_are_refused_while_the_pool_is_saturated() {
    // The server's legacy admission: with the gate off, a sheddable request (priority < 0) gets 429 while
    // the detector reads the pool as full; standard requests are never shed. With the gate on, the same
    // requests wait instead.
    let fleet = Fleet::from_yaml("noise: 0\nreplicas: [{profile: l4-8b}]").unwrap();
    let workload = Workload::from_yaml(
        "duration: 2s\narrival: {constant: {rate: 40}}\nprompt_tokens: {constant: 500}\noutput_tokens: {constant: 40}\n\
         priorities: [{priority: 0, weight: 1}, {priority: -1, weight: 1}]\n",
    )
    .unwrap();
    let plan = Plan::new(&workload);
    let sheddable = plan.requests.iter().filter(|r| r.priority < 0).count() as u64;
    let direct = run(&fleet, &workload, &plan, &queue_profile(false)).unwrap();
    assert!(direct.rejected_429 > 0 && direct.rejected_429 < sheddable, "{direct:?}");
    assert_eq!(direct.completed + direct.rejected_429, plan.requests.len() as u64);
    let held = run(&fleet, &workload, &plan, &queue_profile(true)).unwrap();
    assert_eq!((held.rejected, held.completed), (0, plan.requests.len() as u64), "{held:?}");
}

#[test]
fn the_shadow_of_an_idle_replica_is_its_look_ahead_and_grows_with_the_work_sent_there() {
    use epp::predictor::features::Observation;
    let mut cfg = epp_sim::EngineConfig::for_profile(AcceleratorProfile::h100_8b());
    cfg.noise = 0.0;
    let engine = Engine::new(cfg);
    // Prompts that share nothing, so no prefix-cache hit shortens one.
    let request = |id: u64| {
        let first = id as u32 * 10_000;
        SimRequest { id, prompt: (first..first + 2000).collect(), max_output_tokens: 50, lora: None }
    };
    // Nothing streamed for a long while: no step in progress.
    let idle = Observation { ms_since_last_token: 10_000.0, input_tokens: 2000, ..Observation::default() };
    let mut ledger = shadow::Ledger::new(1);
    let alone = ledger.ttft(0, &engine, &request(1), &idle, 0.0);
    assert_eq!(alone, oracle::look_ahead(&engine, 0.0, request(1)).ttft);
    // Two prompts sent and not started: the next one waits for them.
    ledger.sent(0, &request(1), &idle, 0.0);
    ledger.sent(0, &request(2), &idle, 0.0);
    let behind = ledger.ttft(0, &engine, &request(3), &idle, 0.0);
    assert!(behind > alone * 1.5, "{behind} vs {alone}");
    // Once they decode, only their decode steps are in the way.
    ledger.first_token(0, 1);
    ledger.first_token(0, 2);
    let decoding = ledger.ttft(0, &engine, &request(3), &idle, 0.0);
    assert!(alone < decoding && decoding < behind, "{alone} < {decoding} < {behind}");
    ledger.finished(0, 1, 50);
    ledger.finished(0, 2, 50);
    assert_eq!(ledger.ttft(0, &engine, &request(3), &idle, 0.0), alone);
}
