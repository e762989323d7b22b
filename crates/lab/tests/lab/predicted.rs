//! Predicted-latency routing in the lab: the producer's predictor learns from simulated completions,
//! retrains at virtual-time ticks and replaces the fallback; runs stay deterministic under a seed; the
//! SLO-aware config sees the workload's objectives and sheds sheddable requests it predicts will miss.

use std::path::Path;

use epp_lab::{compare, Fleet, LabReport, RouterChoice, RouterSpec, Workload};

fn config(file: &str) -> RouterChoice {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config").join(file);
    let yaml = std::fs::read_to_string(&path).unwrap();
    RouterChoice::new(file.trim_end_matches(".yaml"), RouterSpec::Config { yaml })
}

const FLEET: &str = "replicas:\n- {profile: h100-8b, count: 2, labels: {accelerator: nvidia-h100}}\n\
                     - {profile: l4-8b, count: 2, labels: {accelerator: nvidia-l4}}\n";

/// 40 s at 8 req/s: enough completions for the first model (100 samples) well before the end.
const WORKLOAD: &str = "seed: 4\nduration: 40s\narrival: {poisson: {rate: 8}}\n\
    prompt_tokens: {lognormal: {mean: 600, stddev: 900, max: 6000}}\noutput_tokens: {uniform: {min: 5, max: 40}}\n\
    shared_prefixes: {fraction: 0.5, groups: 4, prefix_tokens: {constant: 300}}\n\
    priorities: [{priority: 0, weight: 1}, {priority: -1, weight: 1}]\n";

fn run(workload: &str, choices: &[RouterChoice], jobs: usize) -> LabReport {
    compare(&Fleet::from_yaml(FLEET).unwrap(), &Workload::from_yaml(workload).unwrap(), choices, jobs)
        .unwrap()
}

#[test]
fn the_predictor_warms_up_in_virtual_time_and_the_same_seed_gives_the_same_run() {
    let choices = [config("predicted-latency.yaml"), RouterChoice::baseline("default").unwrap()];
    let first = run(WORKLOAD, &choices, 1);
    assert_eq!(first, run(WORKLOAD, &choices, 2), "same seed, same report, sequential or parallel");
    let predicted = &first.runs[0];
    assert_eq!(predicted.unfinished, 0);
    let p = predicted.predictor.as_ref().expect("the config has a predicted-latency-producer");
    assert!(!p.streaming, "routing-only config: the TTFT model learns E2E");
    // 100 completions are needed: the first model comes at a 10 s tick, not before.
    let warmup = p.warmup_s.expect("a model was published");
    assert!((10.0..=30.0).contains(&warmup) && warmup % 10.0 == 0.0, "warm-up {warmup}");
    assert!(p.generations >= 2, "retrained after the first model: {p:?}");
    assert!(p.fallback_decisions > 0 && p.predicted_decisions > p.fallback_decisions, "{p:?}");
    let mape = p.ttft_heldout_mape.expect("held-out score");
    assert!(mape.is_finite() && mape >= 0.0);
    assert!(p.ttft_live_mape.is_some() && p.tpot_live_mape.is_none(), "{p:?}");
    assert!(first.runs[1].predictor.is_none(), "the default profile has no predictor");

    let other = run(&WORKLOAD.replace("seed: 4", "seed: 5"), &choices, 2);
    assert_ne!(other.runs[0], first.runs[0]);
}

#[test]
fn the_slo_config_trains_tpot_on_streamed_completions_and_sheds_with_429() {
    // An SLO no endpoint can meet, on two small-KV replicas kept busy: once the models exist, the admitter
    // turns sheddable requests away (429) whenever no endpoint is idle or cold (KV under 2%), and serves
    // the rest; before, everything is served.
    let fleet =
        "replicas: [{profile: h100-8b, count: 2, num_gpu_blocks: 400, labels: {accelerator: nvidia-h100}}]\n";
    let workload = "seed: 4\nduration: 20s\narrival: {poisson: {rate: 30}}\n\
        prompt_tokens: {lognormal: {mean: 600, stddev: 400, max: 2000}}\noutput_tokens: {uniform: {min: 20, max: 60}}\n\
        priorities: [{priority: 0, weight: 1}, {priority: -1, weight: 1}]\n\
        slo: {ttft_ms: 1, tpot_ms: 0.1}\nsend_slo_headers: true\n";
    let run = |workload: &str| {
        let fleet = Fleet::from_yaml(fleet).unwrap();
        let report = compare(
            &fleet,
            &Workload::from_yaml(workload).unwrap(),
            &[config("predicted-latency-slo.yaml")],
            1,
        );
        report.unwrap().runs.remove(0)
    };
    let r = run(workload);
    let p = r.predictor.as_ref().unwrap();
    assert!(p.streaming);
    assert!(p.warmup_s.is_some(), "{p:?}");
    // The lab's bodies ask for a stream and its completions carry usage: TPOT rows exist.
    assert!(p.tpot_heldout_mape.is_some() && p.tpot_live_mape.is_some(), "{p:?}");
    assert!(r.rejected_429 > 0, "{r:#?}");
    assert_eq!(r.rejected, r.rejected_429);
    assert_eq!(r.completed + r.aborted + r.rejected, r.requests);
    assert_eq!(r.slo_attainment, Some(0.0));

    // Without the headers the admitter has no objectives to shed on: what is refused then is legacy
    // admission's (sheddable requests while the utilization detector reads the busy pool as full), and
    // the headers refuse more.
    let quiet = run(&workload.replace("send_slo_headers: true", "send_slo_headers: false"));
    assert_eq!(quiet.rejected, quiet.rejected_429);
    assert!(quiet.rejected < r.rejected, "without headers {}, with {}", quiet.rejected, r.rejected);
}

#[test]
fn the_predictor_objective_is_a_column_setting() {
    use epp::predictor::train::Objective;
    let mean = config("predicted-latency.yaml");
    let log = config("predicted-latency.yaml").with_latency_objective(Objective::LogSquaredError);
    let log = RouterChoice { name: "log-mean".into(), ..log };
    let report = run(WORKLOAD, &[mean, log], 1);
    let [m, l] = [&report.runs[0], &report.runs[1]].map(|r| r.predictor.as_ref().expect("trained"));
    assert!(m.warmup_s.is_some() && l.warmup_s.is_some(), "both objectives publish models");
    assert_ne!(m.ttft_heldout_mape, l.ttft_heldout_mape, "the column's objective reached its trainer");
}

/// `--samples`: one CSV row per completed request, with the features the producer saw of the chosen
/// endpoint, a look-ahead of that engine, and the outcome; a lone request's look-ahead is exact.
#[test]
fn samples_hold_the_dispatch_features_a_lookahead_and_the_outcome() {
    let dir = std::env::temp_dir().join(format!("epp-lab-samples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let choice = RouterChoice { samples: Some(dir.clone()), ..config("predicted-latency-epp.yaml") };
    let report = run(WORKLOAD, &[choice], 1);
    let text = std::fs::read_to_string(dir.join("predicted-latency-epp.csv")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, report.runs[0].completed, "a row per completed request");
    let column = |row: &Vec<&str>, name: &str| -> f64 {
        row[header.iter().position(|h| *h == name).unwrap()].parse().unwrap()
    };
    assert!(rows.iter().all(|r| column(r, "has_observation") == 1.0 && column(r, "ttft_ms") > 0.0));
    assert!(rows.iter().all(|r| column(r, "obs_input_tokens") > 0.0 && column(r, "lookahead_ttft_ms") > 0.0));
    let first = &rows[0];
    assert_eq!(column(first, "engine_running") + column(first, "engine_waiting"), 0.0, "an idle fleet");
    assert!(
        (column(first, "lookahead_ttft_ms") - column(first, "ttft_ms")).abs()
            < 1e-3 * column(first, "ttft_ms"),
        "nothing arrived before its first token, so the look-ahead saw exactly what happened: {first:?}"
    );
    assert!(rows.iter().any(|r| column(r, "predicted_ttft_ms") > 0.0), "the model predicted once warm");
}
