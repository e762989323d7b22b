//! The lab's command line, shared by the `epp-lab` binary and (later) `epp-bench lab`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;

use super::scenario::Scenario;
use super::values::Seconds;
use super::{compare, format_table, Fleet, RouterChoice, RouterSpec, Workload};
use epp::cli::{ObjectiveFlag, DEFAULT_QUANTILE_ALPHA};

/// Compare routing configs on one simulated fleet and workload, in virtual time.
#[derive(Debug, Clone, Parser)]
#[command(name = "epp-lab", version, about)]
pub struct LabArgs {
    /// Fleet file (YAML): replica groups of accelerator profiles. Needed unless --scenario is given.
    #[arg(long, required_unless_present = "scenario", conflicts_with = "scenario")]
    pub fleet: Option<PathBuf>,
    /// Workload file (YAML): arrivals, lengths, shared prefixes, sessions, LoRAs, SLOs. Needed unless
    /// --scenario is given.
    #[arg(long, required_unless_present = "scenario", conflicts_with = "scenario")]
    pub workload: Option<PathBuf>,
    /// Scenario file (YAML): a fleet, a workload and its rate scale in one (crates/lab/inputs/scenarios/).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// An EndpointPickerConfig to compare (repeatable); its column is named after the file.
    #[arg(long = "config")]
    pub configs: Vec<PathBuf>,
    /// An EndpointPickerConfig to compare with every request carrying the workload's SLO as its
    /// objectives (the x-llm-d-slo-*-ms headers); repeatable; its column is the file's name + "+slo".
    #[arg(long = "slo-config")]
    pub slo_configs: Vec<PathBuf>,
    /// Built-in baselines to compare: random, round-robin, default, oracle (the clairvoyant reference).
    /// When neither --config, --slo-config nor --baselines is given, random, round-robin and default run.
    #[arg(long, value_delimiter = ',')]
    pub baselines: Vec<String>,
    /// Override the workload's duration (e.g. 30s, 10m).
    #[arg(long, value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Override the workload's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Multiply every arrival rate of the workload (on top of a scenario's own rate_scale).
    #[arg(long, value_parser = parse_scale)]
    pub rate_scale: Option<f64>,
    /// Override the fleet's telemetry scrape interval (e.g. 50ms).
    #[arg(long, value_parser = parse_seconds)]
    pub scrape_interval: Option<f64>,
    /// Write the full report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Runs simulated in parallel (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// What the config columns' predictor estimates: epp's --latency-objective-type (mean, quantile at
    /// alpha 0.9, or log-mean), so objectives compare without a rebuild.
    #[arg(long, value_enum, default_value = "mean")]
    pub latency_objective_type: ObjectiveFlag,
    /// Write every run's per-request samples (the predictor's features at dispatch, the engine's true
    /// state, a look-ahead of the chosen replica, the outcome) into this folder, one CSV per column.
    #[arg(long)]
    pub samples: Option<PathBuf>,
    /// Active epp replicas behind the gateway for every config column: requests are dealt to them in
    /// turn; each knows only what it routed, all see the metrics and the engines' KV events.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub epp_replicas: u16,
}

impl LabArgs {
    /// Arguments for a fleet and workload file, everything else at its default.
    pub fn new(fleet: PathBuf, workload: PathBuf) -> Self {
        Self {
            fleet: Some(fleet),
            workload: Some(workload),
            scenario: None,
            configs: Vec::new(),
            slo_configs: Vec::new(),
            baselines: Vec::new(),
            duration: None,
            seed: None,
            rate_scale: None,
            scrape_interval: None,
            json: None,
            jobs: None,
            latency_objective_type: ObjectiveFlag::Mean,
            samples: None,
            epp_replicas: 1,
        }
    }
}

fn parse_scale(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("must be a number greater than zero, got {text:?}")),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    let s: Seconds = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if s.0 > 0.0 {
        Ok(s.0)
    } else {
        Err("must be greater than zero".into())
    }
}

/// The routing configs the arguments ask for, in order: config files, SLO-header config files, then
/// baselines.
pub fn choices(args: &LabArgs) -> anyhow::Result<Vec<RouterChoice>> {
    let mut choices: Vec<RouterChoice> = Vec::new();
    let files = args.configs.iter().map(|p| (p, false)).chain(args.slo_configs.iter().map(|p| (p, true)));
    for (path, slo_headers) in files {
        let yaml =
            std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        let stem: String =
            path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into());
        let stem = if slo_headers { format!("{stem}+slo") } else { stem };
        let mut name = stem.clone();
        let mut n = 2;
        while choices.iter().any(|c| c.name == name) {
            name = format!("{stem}-{n}");
            n += 1;
        }
        let choice = RouterChoice::new(name, RouterSpec::Config { yaml });
        choices.push(if slo_headers { choice.with_slo_headers() } else { choice });
    }
    let baselines: Vec<String> =
        if args.baselines.is_empty() && args.configs.is_empty() && args.slo_configs.is_empty() {
            ["random", "round-robin", "default"].iter().map(std::string::ToString::to_string).collect()
        } else {
            args.baselines.clone()
        };
    for name in baselines.iter().filter(|b| !b.trim().is_empty()) {
        let choice = RouterChoice::baseline(name).with_context(|| {
            format!("unknown baseline {name:?}; known: {}", RouterChoice::BASELINES.join(", "))
        })?;
        choices.push(choice);
    }
    let objective = args.latency_objective_type.objective(DEFAULT_QUANTILE_ALPHA);
    Ok(choices
        .into_iter()
        .map(|c| RouterChoice {
            samples: args.samples.clone(),
            epp_replicas: usize::from(args.epp_replicas),
            ..c.with_latency_objective(objective)
        })
        .collect())
}

/// The fleet and workload the arguments name: a scenario's, or the two files'.
fn inputs(args: &LabArgs) -> anyhow::Result<(Fleet, Workload)> {
    if let Some(path) = &args.scenario {
        let scenario = Scenario::load(path)?;
        return Ok((scenario.fleet, scenario.workload));
    }
    let (Some(fleet), Some(workload)) = (&args.fleet, &args.workload) else {
        anyhow::bail!("give --scenario, or both --fleet and --workload");
    };
    Ok((Fleet::load(fleet)?, Workload::load(workload)?))
}

/// Runs the comparison the arguments describe: prints the table to stdout (wall time to stderr) and
/// writes the JSON report when asked.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    let (mut fleet, mut workload) = inputs(&args)?;
    if let Some(scale) = args.rate_scale {
        workload.arrival = workload.arrival.scaled(scale);
    }
    if let Some(d) = args.duration {
        workload.duration = Seconds(d);
    }
    if let Some(seed) = args.seed {
        workload.seed = seed;
    }
    if let Some(s) = args.scrape_interval {
        fleet.scrape_interval = s;
    }
    if let Some(dir) = &args.samples {
        std::fs::create_dir_all(dir).with_context(|| format!("--samples {}", dir.display()))?;
    }
    let choices = choices(&args)?;
    let jobs =
        args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let started = Instant::now();
    let report = compare(&fleet, &workload, &choices, jobs)?;
    let wall = started.elapsed();
    print!("{}", format_table(&report));
    eprintln!(
        "simulated {} runs of {:.0} s virtual time in {:.2} s wall ({} engine steps)",
        report.runs.len(),
        report.duration_s,
        wall.as_secs_f64(),
        report.runs.iter().map(|r| r.engine_steps).sum::<u64>()
    );
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
