//! The lab's command line, shared by the `epp-lab` binary and (later) `epp-bench lab`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;

use super::values::Seconds;
use super::{compare, format_table, Fleet, RouterChoice, RouterSpec, Workload};

/// Compare routing configs on one simulated fleet and workload, in virtual time.
#[derive(Debug, Clone, Parser)]
#[command(name = "epp-lab", version, about)]
pub struct LabArgs {
    /// Fleet file (YAML): replica groups of accelerator profiles.
    #[arg(long)]
    pub fleet: PathBuf,
    /// Workload file (YAML): arrivals, lengths, shared prefixes, sessions, LoRAs, SLOs.
    #[arg(long)]
    pub workload: PathBuf,
    /// An EndpointPickerConfig to compare (repeatable); its column is named after the file.
    #[arg(long = "config")]
    pub configs: Vec<PathBuf>,
    /// Built-in baselines to compare: random, round-robin, default. When neither --config nor
    /// --baselines is given, all three run.
    #[arg(long, value_delimiter = ',')]
    pub baselines: Vec<String>,
    /// Override the workload's duration (e.g. 30s, 10m).
    #[arg(long, value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Override the workload's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override the fleet's telemetry scrape interval (e.g. 50ms).
    #[arg(long, value_parser = parse_seconds)]
    pub scrape_interval: Option<f64>,
    /// Write the full report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Runs simulated in parallel (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    let s: Seconds = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if s.0 > 0.0 {
        Ok(s.0)
    } else {
        Err("must be greater than zero".into())
    }
}

/// The routing configs the arguments ask for, in order: config files, then baselines.
pub fn choices(args: &LabArgs) -> anyhow::Result<Vec<RouterChoice>> {
    let mut choices = Vec::new();
    for path in &args.configs {
        let yaml =
            std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        let stem =
            path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into());
        let mut name = stem.clone();
        let mut n = 2;
        while choices.iter().any(|c: &RouterChoice| c.name == name) {
            name = format!("{stem}-{n}");
            n += 1;
        }
        choices.push(RouterChoice { name, spec: RouterSpec::Config { yaml } });
    }
    let baselines: Vec<String> = if args.baselines.is_empty() && args.configs.is_empty() {
        RouterChoice::BASELINES.iter().map(|s| s.to_string()).collect()
    } else {
        args.baselines.clone()
    };
    for name in baselines.iter().filter(|b| !b.trim().is_empty()) {
        let choice = RouterChoice::baseline(name).with_context(|| {
            format!("unknown baseline {name:?}; known: {}", RouterChoice::BASELINES.join(", "))
        })?;
        choices.push(choice);
    }
    Ok(choices)
}

/// Runs the comparison the arguments describe: prints the table to stdout (wall time to stderr) and
/// writes the JSON report when asked.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    let mut fleet = Fleet::load(&args.fleet)?;
    let mut workload = Workload::load(&args.workload)?;
    if let Some(d) = args.duration {
        workload.duration = Seconds(d);
    }
    if let Some(seed) = args.seed {
        workload.seed = seed;
    }
    if let Some(s) = args.scrape_interval {
        fleet.scrape_interval = s;
    }
    let choices = choices(&args)?;
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
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
