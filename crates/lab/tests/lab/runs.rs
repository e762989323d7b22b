//! The virtual-time lab end to end: real pipeline, simulated engines, small workloads (seconds of
//! virtual time, a few replicas) so these run fast in debug builds.

use epp_lab::cli::{self, LabArgs};
use epp_lab::{compare, Fleet, LabError, LabReport, RouterChoice, RouterSpec, Workload};

fn baselines(names: &[&str]) -> Vec<RouterChoice> {
    names.iter().map(|n| RouterChoice::baseline(n).unwrap()).collect()
}

fn run(fleet: &str, workload: &str, choices: &[RouterChoice]) -> LabReport {
    let fleet = Fleet::from_yaml(fleet).unwrap();
    let workload = Workload::from_yaml(workload).unwrap();
    compare(&fleet, &workload, choices, 2).unwrap()
}

fn by_name<'a>(report: &'a LabReport, name: &str) -> &'a epp_lab::RunReport {
    report.runs.iter().find(|r| r.name == name).unwrap()
}

const MIXED_FLEET: &str = "replicas:\n- {profile: h100-8b, count: 2, max_loras: 2}\n\
                           - {profile: l4-8b, count: 1, num_gpu_blocks: 60}\n";

/// Sessions, shared prefixes, LoRAs, priorities, and prompts too long for the small L4's KV cache.
const MIXED_WORKLOAD: &str = "seed: 11\nduration: 6s\narrival: {poisson: {rate: 12}}\n\
    prompt_tokens: {lognormal: {mean: 300, stddev: 600, max: 4000}}\noutput_tokens: {uniform: {min: 2, max: 40}}\n\
    shared_prefixes: {fraction: 0.5, groups: 3, prefix_tokens: {constant: 200}}\n\
    sessions: {fraction: 0.3, turns: {constant: 3}, think_time: 1s}\n\
    loras: {base_weight: 2, adapters: [{name: sql, weight: 1}, {name: chat, weight: 1}]}\n\
    priorities: [{priority: 0, weight: 1}, {priority: -1, weight: 1}]\n\
    slo: {ttft_ms: 500, tpot_ms: 50}\n";

#[test]
fn same_seed_gives_identical_reports() {
    let choices = baselines(&["random", "round-robin", "default"]);
    let fleet = Fleet::from_yaml(MIXED_FLEET).unwrap();
    let workload = Workload::from_yaml(MIXED_WORKLOAD).unwrap();
    let sequential = compare(&fleet, &workload, &choices, 1).unwrap();
    let parallel = compare(&fleet, &workload, &choices, 3).unwrap();
    assert_eq!(sequential, parallel);
    assert_eq!(
        serde_json::to_string(&sequential).unwrap(),
        serde_json::to_string(&compare(&fleet, &workload, &choices, 2).unwrap()).unwrap()
    );
    let other_seed = Workload { seed: 12, ..workload };
    assert_ne!(compare(&fleet, &other_seed, &choices, 2).unwrap().runs, sequential.runs);
}

#[test]
fn every_request_finishes_exactly_once() {
    let report = run(MIXED_FLEET, MIXED_WORKLOAD, &baselines(&["random", "round-robin", "default"]));
    assert!(report.requests > 50, "{}", report.requests);
    for r in &report.runs {
        assert_eq!(r.requests as usize, report.requests);
        assert_eq!(r.unfinished, 0, "{}", r.name);
        assert_eq!(r.duplicate_finishes, 0, "{}", r.name);
        assert_eq!(r.completed + r.aborted + r.rejected, r.requests, "{}", r.name);
        let served: u64 = r.endpoints.iter().map(|e| e.requests).sum();
        assert_eq!(served, r.requests - r.rejected, "{}", r.name);
        assert!(r.ttft_s.is_some() && r.tpot_s.is_some() && r.e2e_s.is_some());
        assert!(r.slo_attainment.is_some());
    }
    // Blind routing sends some over-long prompts to the small L4, which refuses them.
    assert!(by_name(&report, "round-robin").aborted > 0);
}

#[test]
fn default_profile_beats_random_on_a_heterogeneous_fleet() {
    let fleet = "replicas:\n- {profile: h100-8b, count: 2}\n- {profile: l4-8b, count: 2}\n";
    let workload = "seed: 3\nduration: 15s\narrival: {poisson: {rate: 12}}\n\
                    prompt_tokens: {lognormal: {mean: 400, stddev: 200, max: 2000}}\n\
                    output_tokens: {uniform: {min: 20, max: 80}}\n";
    let report = run(fleet, workload, &baselines(&["random", "default"]));
    let ttft_p90 = |name| by_name(&report, name).ttft_s.unwrap().p90;
    assert!(ttft_p90("default") < ttft_p90("random"), "{report:#?}");
    // The default profile keeps most work on the fast replicas.
    let default = by_name(&report, "default");
    let h100: u64 = default.endpoints.iter().filter(|e| e.profile == "h100-8b").map(|e| e.requests).sum();
    assert!(h100 * 2 > default.requests, "{default:#?}");
}

#[test]
fn prefix_cache_scorer_raises_the_hit_rate_over_round_robin() {
    // Twelve 1000-token system prompts do not all fit in one replica's 6400-token cache, but a quarter
    // of them do: only routing that keeps each group on one replica keeps them cached.
    let fleet = "replicas:\n- {profile: h100-8b, count: 4, num_gpu_blocks: 400}\n";
    let workload = "seed: 5\nduration: 15s\narrival: {poisson: {rate: 10}}\n\
                    prompt_tokens: {constant: 40}\noutput_tokens: {constant: 8}\n\
                    shared_prefixes: {fraction: 1, groups: 12, prefix_tokens: {constant: 1000}}\n";
    let report = run(fleet, workload, &baselines(&["round-robin", "default"]));
    let (rr, default) = (by_name(&report, "round-robin"), by_name(&report, "default"));
    assert!(default.prefix_hit_rate > rr.prefix_hit_rate + 0.2, "{report:#?}");
}

#[test]
fn a_custom_config_runs_through_the_pipeline() {
    let yaml = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n\
                plugins:\n- type: queue-scorer\n- type: max-score-picker\n\
                schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  \
                - pluginRef: max-score-picker\n";
    let choice = RouterChoice::new("queue-only", RouterSpec::Config { yaml: yaml.into() });
    let report = run(MIXED_FLEET, MIXED_WORKLOAD, &[choice]);
    let r = &report.runs[0];
    assert_eq!(r.name, "queue-only");
    assert_eq!(r.unfinished, 0);
    assert_eq!(r.completed + r.aborted, r.requests);
}

#[test]
fn invalid_inputs_are_reported_with_their_field() {
    let e = Fleet::from_yaml("replicas: [{profile: tpu-v5, count: 1}]").unwrap_err().to_string();
    assert!(e.contains("replicas[0].profile") && e.contains("h100-8b") && e.contains("l4-8b"), "{e}");
    let e =
        Workload::from_yaml("duration: 1s\narrival: {poisson: {rate: 1}}\nprompt_tokens: {constant: 1}\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("output_tokens"), "{e}");
    let e = Workload::from_yaml(
        "duration: 1s\narrival: {poison: {rate: 1}}\nprompt_tokens: {constant: 1}\noutput_tokens: {constant: 1}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("arrival") && e.contains("poison"), "{e}");
    let e = Fleet::load("/nonexistent/fleet.yaml").unwrap_err().to_string();
    assert!(e.contains("/nonexistent/fleet.yaml"), "{e}");

    let bad = RouterChoice::new("bad", RouterSpec::Config { yaml: "plugins: [{type: nope}]".into() });
    let fleet = Fleet::from_yaml(MIXED_FLEET).unwrap();
    let workload = Workload::from_yaml(MIXED_WORKLOAD).unwrap();
    match compare(&fleet, &workload, &[bad], 1) {
        Err(LabError::Router { name, message }) => {
            assert_eq!(name, "bad");
            assert!(message.contains("nope"), "{message}");
        }
        other => panic!("expected a router error, got {other:?}"),
    }
}

#[test]
fn cli_runs_configs_and_baselines_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let fleet = write("fleet.yaml", "replicas: [{profile: h100-8b, count: 2}]\n");
    let workload = write(
        "workload.yaml",
        "duration: 3s\narrival: {constant: {rate: 5}}\nprompt_tokens: {constant: 50}\noutput_tokens: {constant: 5}\n",
    );
    let config = write("prefix.yaml", "");
    let json = dir.path().join("out.json");
    let args = LabArgs {
        configs: vec![config],
        baselines: vec!["random".into()],
        duration: Some(2.0),
        seed: Some(9),
        scrape_interval: Some(0.1),
        json: Some(json.clone()),
        jobs: Some(1),
        ..LabArgs::new(fleet, workload)
    };
    assert_eq!(
        cli::choices(&args).unwrap().iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["prefix", "random"]
    );
    cli::run(args.clone()).unwrap();
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["requests"], 10);
    assert_eq!(report["seed"], 9);
    assert_eq!(report["runs"][0]["name"], "prefix");
    assert_eq!(report["runs"][1]["completed"], 10);

    let unknown = LabArgs { baselines: vec!["fastest".into()], ..args };
    let e = cli::choices(&unknown).unwrap_err().to_string();
    assert!(e.contains("fastest") && e.contains("round-robin"), "{e}");
}
