//! The event loop's own tests: virtual time's order and a lone request's exact step times.

use super::*;
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
