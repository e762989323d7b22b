//! The live-vs-lab check (scripts/live-vs-lab.sh, BENCHMARKS.md §4) is only fair while the live runs
//! send what crates/lab/inputs/workload-live.yaml describes. Both read that one file (epp-bench through
//! `--lab-workload`, converting its token units in crates/bench/src/lab_workload.rs), but the two
//! generators differ (epp-bench writes words, the lab writes 4-byte tokens), so these tests build both
//! request streams and measure them in simulator tokens, the unit both epp-sim and the lab count: a change
//! to either generator, to the conversion, to the tokenizer or to the script's flags that breaks the
//! pairing fails here instead of quietly skewing the comparison. They also run the lab files and
//! crates/lab/inputs/configs/random.yaml once.

use std::path::{Path, PathBuf};

use epp::request::parse_request;
use epp_bench::body::RequestFactory;
use epp_bench::Workload as BenchWorkload;
use epp_lab::values::Seconds;
use epp_lab::workload::Arrival;
use epp_lab::{compare, Fleet, Plan, RouterChoice, RouterSpec, Workload as LabWorkload};
use epp_sim::tokenize;

const CHAT_PATH: &str = "/v1/chat/completions";
const SAMPLES: usize = 3000;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The value after `flag` in the script's `LIVE_WORKLOAD=(...)` array.
fn script_flag(script: &str, flag: &str) -> String {
    let start =
        script.find("LIVE_WORKLOAD=(").expect("LIVE_WORKLOAD in the script") + "LIVE_WORKLOAD=(".len();
    let end = start + script[start..].find(')').expect("end of LIVE_WORKLOAD");
    let words: Vec<&str> = script[start..end].split_whitespace().collect();
    let at = words.iter().position(|w| *w == flag).unwrap_or_else(|| panic!("{flag} in LIVE_WORKLOAD"));
    words[at + 1].to_string()
}

/// The script's rate (`RATE=N`, simulated requests per second).
fn script_rate(script: &str) -> f64 {
    let line = script.lines().find(|l| l.starts_with("RATE=")).expect("RATE= in the script");
    line["RATE=".len()..].trim().parse().expect("a numeric RATE")
}

/// The value of `NAME=` in the script.
fn script_var(script: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    let line =
        script.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{name}= in the script"));
    line[prefix.len()..].trim().to_string()
}

/// What the script's epp-bench runs send: the lab workload file its `--lab-workload` names, at the
/// script's rate (each round passes `--poisson`).
fn live_workload(script: &str) -> BenchWorkload {
    assert_eq!(script_flag(script, "--lab-workload"), "\"$LAB_WORKLOAD\"");
    let file = script_var(script, "LAB_WORKLOAD");
    let mut live = epp_bench::lab_workload::load(&repo(&file)).unwrap();
    assert_eq!(script_flag(script, "--model"), "\"$MODEL\"");
    live.model = script_var(script, "MODEL");
    live.url = Some("http://127.0.0.1:1".into());
    live.poisson = Some(script_rate(script));
    live
}

/// Prompt sizes in simulator tokens (as epp-sim and the lab tokenize them) and max_tokens.
#[derive(Debug)]
struct Sizes {
    prompt_mean: f64,
    prompt_min: usize,
    prompt_max: usize,
    output_mean: f64,
}

impl Sizes {
    fn of(requests: impl Iterator<Item = (Vec<u8>, u64)>) -> Self {
        let (mut prompts, mut outputs) = (Vec::new(), Vec::new());
        for (body, max_tokens) in requests {
            let parsed = parse_request(CHAT_PATH, &body).expect("a chat body");
            prompts.push(tokenize(std::str::from_utf8(parsed.prefix_bytes(&body)).unwrap()).len());
            outputs.push(max_tokens as f64);
        }
        Sizes {
            prompt_mean: prompts.iter().sum::<usize>() as f64 / prompts.len() as f64,
            prompt_min: *prompts.iter().min().unwrap(),
            prompt_max: *prompts.iter().max().unwrap(),
            output_mean: outputs.iter().sum::<f64>() / outputs.len() as f64,
        }
    }
}

fn within(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * a.max(b)
}

#[test]
fn lab_workload_sends_what_the_live_runs_send() {
    let script = read("scripts/live-vs-lab.sh");
    let live = live_workload(&script);
    live.validate().unwrap();
    let mut lab = LabWorkload::load(repo("crates/lab/inputs/workload-live.yaml")).unwrap();

    // Arrivals and prefix groups: the same numbers on both sides.
    assert_eq!(lab.arrival, Arrival::Poisson { rate: live.poisson.unwrap() });
    let shared = lab.shared_prefixes.clone().expect("shared prefixes in the lab workload");
    assert_eq!(shared.fraction, 1.0, "every epp-bench conversation starts with a shared system prompt");
    assert_eq!(shared.groups, live.prefix_groups);
    assert!(lab.sessions.is_none() && lab.loras.is_none() && lab.priorities.is_empty());
    assert_eq!((live.turns, live.api, live.stream), (1, epp_bench::Api::Chat, true));

    // Sizes, in simulator tokens.
    let factory = RequestFactory::new(&live);
    let live_sizes = Sizes::of((0..SAMPLES as u64).map(|i| {
        let request = factory.build(i, 0, i);
        (request.body.to_vec(), request.max_tokens)
    }));
    lab.duration = Seconds(SAMPLES as f64 / script_rate(&script));
    let plan = Plan::new(&lab);
    assert!(plan.requests.len() > SAMPLES / 2);
    let lab_sizes = Sizes::of(plan.requests.iter().map(|request| {
        let mut body = Vec::new();
        plan.write_body(request, &mut body);
        (body, u64::from(plan.output_tokens(request)))
    }));
    let pair = format!("live {live_sizes:?}, lab {lab_sizes:?}");
    assert!(within(live_sizes.prompt_mean, lab_sizes.prompt_mean, 0.02), "{pair}");
    assert!(within(live_sizes.prompt_min as f64, lab_sizes.prompt_min as f64, 0.03), "{pair}");
    assert!(within(live_sizes.prompt_max as f64, lab_sizes.prompt_max as f64, 0.03), "{pair}");
    assert!(within(live_sizes.output_mean, lab_sizes.output_mean, 0.03), "{pair}");
}

#[test]
fn lab_files_and_the_random_config_run() {
    let fleet = Fleet::load(repo("crates/lab/inputs/fleet-live.yaml")).unwrap();
    let profiles: Vec<&str> = fleet.replicas.iter().map(|r| r.engine.profile.name.as_str()).collect();
    // The order epp-sim --profiles h100-8b,h100-8b,l4-8b,l4-8b starts them in.
    assert_eq!(profiles, ["h100-8b", "h100-8b", "l4-8b", "l4-8b"]);
    let mut workload = LabWorkload::load(repo("crates/lab/inputs/workload-live.yaml")).unwrap();
    workload.duration = Seconds(5.0);
    let random = RouterChoice::new(
        "random",
        RouterSpec::Config { yaml: read("crates/lab/inputs/configs/random.yaml") },
    );
    let choices =
        [random, RouterChoice::baseline("round-robin").unwrap(), RouterChoice::baseline("default").unwrap()];
    let report = compare(&fleet, &workload, &choices, 2).unwrap();
    for run in &report.runs {
        assert_eq!(run.completed, run.requests, "{}: every request completes", run.name);
        assert!(run.requests > 20, "{}: {} requests", run.name, run.requests);
    }
    let on_h100 = |name: &str| {
        let run = report.runs.iter().find(|r| r.name == name).unwrap();
        let h100: u64 = run.endpoints.iter().filter(|e| e.profile == "h100-8b").map(|e| e.requests).sum();
        (h100, run.requests)
    };
    let (random_h100, total) = on_h100("random");
    assert!(random_h100 > 0 && random_h100 < total, "random-picker uses every kind of replica");
    let (default_h100, total) = on_h100("default");
    assert!(2 * default_h100 > total, "the default profile favours the faster H100s: {default_h100}/{total}");
}
