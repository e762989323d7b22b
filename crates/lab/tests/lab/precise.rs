//! Precise prefix routing in the lab: the engines' KV events reach the config's
//! `precise-prefix-cache-producer` in process, and several epp replicas share the traffic
//! (`--epp-replicas`). With two replicas each approximate index sees half the requests and sends
//! sessions where their prefix is not; the precise index sees every engine's cache and keeps them home.

use std::path::Path;

use epp_lab::{compare, Fleet, LabReport, RouterChoice, RouterSpec, Workload};

fn config(path: &str) -> RouterChoice {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let yaml = std::fs::read_to_string(root.join(path)).unwrap();
    let name = Path::new(path).file_stem().unwrap().to_string_lossy().into_owned();
    RouterChoice::new(name, RouterSpec::Config { yaml })
}

/// Agentic sessions: each turn resends its growing context, so where it lands decides its cache hits.
const FLEET: &str = "replicas:\n- {profile: h100-8b, count: 4}\n";
const WORKLOAD: &str = "seed: 3\nduration: 40s\narrival: {poisson: {rate: 2}}\n\
    prompt_tokens: {lognormal: {mean: 900, stddev: 900, max: 6000}}\noutput_tokens: {uniform: {min: 20, max: 80}}\n\
    shared_prefixes: {fraction: 1.0, groups: 4, prefix_tokens: {uniform: {min: 1000, max: 2000}}}\n\
    sessions: {fraction: 0.9, turns: {uniform: {min: 3, max: 6}}, think_time: 2s}\n";

fn hit_rates(epp_replicas: usize) -> (f64, f64) {
    let choices: Vec<RouterChoice> =
        ["crates/lab/inputs/configs/approx-prefix.yaml", "config/precise-prefix.yaml"]
            .iter()
            .map(|path| RouterChoice { epp_replicas, ..config(path) })
            .collect();
    let report: LabReport =
        compare(&Fleet::from_yaml(FLEET).unwrap(), &Workload::from_yaml(WORKLOAD).unwrap(), &choices, 2)
            .unwrap();
    for run in &report.runs {
        assert_eq!(run.completed, run.requests, "{}: every request completes", run.name);
    }
    (report.runs[0].prefix_hit_rate, report.runs[1].prefix_hit_rate)
}

#[test]
fn precise_routing_keeps_the_hit_rate_two_epp_replicas_cost_the_approximate_index() {
    let (approx_one, precise_one) = hit_rates(1);
    let (approx_two, precise_two) = hit_rates(2);
    // Fed the engines' events, the precise index finds the sessions' prefixes as the approximate one does.
    assert!(precise_one > approx_one - 0.02, "one epp: precise {precise_one} vs approx {approx_one}");
    assert!(approx_two < approx_one - 0.02, "two epps halve what each approximate index sees: {approx_two}");
    assert!(
        (precise_two - precise_one).abs() < 0.02,
        "precise keeps its rate: {precise_one} -> {precise_two}"
    );
    assert!(precise_two > approx_two + 0.02, "two epps: precise {precise_two} vs approx {approx_two}");
}
