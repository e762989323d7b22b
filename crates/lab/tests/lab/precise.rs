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

/// The eviction-pressure fleet (4 pods of 1,500 blocks, 48 shared prefixes) at twice its rate, for 30 s:
/// the engines fall behind, so their events report a prompt's blocks long after it was routed, and two
/// replicas that learn each other's routings only from those events place a prompt apart.
const OVERLOADED_FLEET: &str = "replicas:\n- {profile: h100-8b, count: 4, num_gpu_blocks: 1500}\n";
const OVERLOADED: &str = "seed: 1\nduration: 30s\narrival: {poisson: {rate: 24}}\n\
    prompt_tokens: {lognormal: {mean: 300, stddev: 300, max: 4000}}\n\
    output_tokens: {lognormal: {mean: 150, stddev: 100, max: 800}}\n\
    shared_prefixes: {fraction: 0.9, groups: 48, prefix_tokens: {uniform: {min: 1000, max: 3000}}}\n";

#[test]
fn replicas_sharing_their_speculation_keep_one_replicas_hit_rate_under_overload() {
    let run = |epp_replicas: usize| {
        let choices: Vec<RouterChoice> =
            ["config/precise-prefix.yaml", "crates/lab/inputs/configs/precise-prefix-peers.yaml"]
                .iter()
                .map(|path| RouterChoice { epp_replicas, ..config(path) })
                .collect();
        let fleet = Fleet::from_yaml(OVERLOADED_FLEET).unwrap();
        let report = compare(&fleet, &Workload::from_yaml(OVERLOADED).unwrap(), &choices, 1).unwrap();
        (report.runs[0].prefix_hit_rate, report.runs[1].prefix_hit_rate)
    };
    let (alone, alone_with_peers) = run(1);
    let (two, two_with_peers) = run(2);
    assert_eq!(alone, alone_with_peers, "with one replica there is no peer to hear from");
    assert!(two < alone - 0.03, "two replicas on their own place prompts apart: {two} vs {alone}");
    assert!(two_with_peers > two + 0.03, "peers: {two_with_peers} vs {two}");
    assert!(
        (two_with_peers - alone).abs() < 0.02,
        "peers keep one replica's rate: {two_with_peers} vs {alone}"
    );
}
