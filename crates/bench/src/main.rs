//! epp-bench: live load generator and overhead comparison for epp (see `epp_bench`).
//!
//! `epp-bench run --url http://127.0.0.1:8080 --concurrency 32 --duration 30s` benchmarks one target;
//! `epp-bench compare --target epp=URL --target direct=URL …` runs several in interleaved rounds;
//! `epp-bench criterion` tabulates the last `cargo bench` results. The binary only parses flags and
//! writes files; everything measured lives in the library so the tests exercise the same code.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{ArgAction, Args, Parser, Subcommand};
use epp_bench::{
    self, svg, Api, BenchError, CompareOptions, Distribution, ObjectiveMix, Report, Setup, Workload,
};

#[derive(Parser, Debug)]
#[command(name = "epp-bench", version, about = "Load generator and overhead benchmark for epp")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Benchmark one target and print a summary.
    Run(RunArgs),
    /// Benchmark several targets in interleaved rounds and print a comparison.
    Compare(CompareArgs),
    /// Print criterion's last results as a Markdown table.
    Criterion(CriterionArgs),
    /// Serve minimal, fast OpenAI backends (TCP_NODELAY, no JSON parsing) for overhead measurements.
    Backend(BackendArgs),
    /// Compare routing configs in virtual time: the simulator's engines with epp's real pipeline.
    Lab(epp_lab::cli::LabArgs),
}

/// Workload settings; each overrides the workload file's value.
#[derive(Args, Debug, Default)]
struct WorkloadArgs {
    /// YAML workload file (same keys as these flags, snake_case).
    #[arg(long)]
    workload: Option<PathBuf>,
    /// The lab's workload file (crates/lab/inputs/*.yaml), converted to epp-bench units; flags still
    /// override it.
    #[arg(long, conflicts_with = "workload")]
    lab_workload: Option<PathBuf>,
    /// Target: base URL (API path added) or full endpoint URL.
    #[arg(long)]
    url: Option<String>,
    #[arg(long, value_parser = parse_api)]
    api: Option<Api>,
    #[arg(long)]
    model: Option<String>,
    /// Stream responses (SSE with include_usage); `--stream=false` for plain JSON.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    stream: Option<bool>,
    /// Send ignore_eos (vLLM) so every answer runs to max_tokens.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    ignore_eos: Option<bool>,
    /// Open loop: requests per second, evenly spaced.
    #[arg(long, conflicts_with_all = ["poisson", "concurrency"])]
    rate: Option<f64>,
    /// Open loop: requests per second on average, Poisson arrivals.
    #[arg(long, conflicts_with = "concurrency")]
    poisson: Option<f64>,
    /// Closed loop: requests in flight.
    #[arg(long)]
    concurrency: Option<u32>,
    /// Stop releasing requests after this long (e.g. 30s). With --requests: whichever comes first.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many requests.
    #[arg(long)]
    requests: Option<u64>,
    /// Prompt length per turn: N, uniform:MIN-MAX or lognormal:MEAN,SIGMA (tokens ≈ words).
    #[arg(long)]
    prompt_tokens: Option<Distribution>,
    /// max_tokens per request, same forms as --prompt-tokens.
    #[arg(long)]
    output_tokens: Option<Distribution>,
    /// Number of distinct shared system prompts.
    #[arg(long)]
    prefix_groups: Option<u32>,
    /// Tokens per shared system prompt.
    #[arg(long)]
    prefix_tokens: Option<u64>,
    /// Turns per conversation; each turn resends the conversation so far.
    #[arg(long)]
    turns: Option<u32>,
    /// TTFT SLO: sent as x-slo-ttft-ms and checked in the summary.
    #[arg(long)]
    slo_ttft_ms: Option<f64>,
    /// TPOT SLO: sent as x-slo-tpot-ms and checked in the summary.
    #[arg(long)]
    slo_tpot_ms: Option<f64>,
    /// One objective for every request (x-gateway-inference-objective).
    #[arg(long, conflicts_with = "objectives")]
    objective: Option<String>,
    /// Weighted objectives, e.g. interactive:0.7,batch:0.3.
    #[arg(long)]
    objectives: Option<ObjectiveMix>,
    /// Fairness ids sent round robin (x-gateway-inference-fairness-id).
    #[arg(long, value_delimiter = ',')]
    fairness_ids: Option<Vec<String>>,
    /// Extra request header `name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Response header naming the serving backend.
    #[arg(long)]
    backend_header: Option<String>,
    /// Per-request limit, headers through last byte.
    #[arg(long, value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    #[arg(long)]
    seed: Option<u64>,
    /// Seed of the shared system prompts' text only (default: --seed): clients with their own --seed and
    /// one --prefix-seed send the same prefixes at different times (two gateways, one fleet).
    #[arg(long)]
    prefix_seed: Option<u64>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Write the full report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Include every request's measurements in --json.
    #[arg(long)]
    samples: bool,
    /// Write a CDF of TTFT and E2E as SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write latency over time as SVG.
    #[arg(long)]
    timeseries: Option<PathBuf>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
    /// Skip the reachability check.
    #[arg(long)]
    no_preflight: bool,
    /// Exit with status 2 when more than this fraction of requests failed (or none succeeded).
    #[arg(long)]
    max_error_rate: Option<f64>,
    /// Send exactly the requests the lab simulates for this scenario (or lab workload) file, at its arrival
    /// times (crates/bench/src/replay.rs). --seed and --duration (simulated) change its workload; the
    /// other workload flags do not apply, except --url and --timeout.
    #[arg(long, conflicts_with_all = ["workload", "lab_workload"])]
    lab_replay: Option<PathBuf>,
    /// With --lab-replay: multiply every arrival rate, as `epp-bench lab --rate-scale`.
    #[arg(long, requires = "lab_replay")]
    rate_scale: Option<f64>,
    /// With --lab-replay: release arrivals this many times sooner (epp-sim's --time-scale); SLOs are
    /// scaled alike, latencies are reported as measured (real time).
    #[arg(long, requires = "lab_replay")]
    time_scale: Option<f64>,
}

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// A setup as NAME=URL (repeatable; the first is compared with the others).
    #[arg(long = "target", required = true)]
    targets: Vec<Setup>,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    round_duration: Duration,
    /// Unrecorded warm-up per setup before the first round.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Write the comparison tables as Markdown.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write the comparison as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    quiet: bool,
    /// Exit with status 2 when a setup failed more than this fraction of requests (or none succeeded).
    #[arg(long)]
    max_error_rate: Option<f64>,
}

#[derive(Args, Debug)]
struct CriterionArgs {
    /// criterion's output directory.
    #[arg(long, default_value = "target/criterion")]
    dir: PathBuf,
    /// Only results written at or after this Unix time (skips stale benchmarks).
    #[arg(long)]
    since_unix: Option<u64>,
}

#[derive(Args, Debug)]
struct BackendArgs {
    /// Ports, one backend each (0 picks a free one).
    #[arg(long, value_delimiter = ',', required = true)]
    ports: Vec<u16>,
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Backend ids (x-backend-id) are <id>-<port>.
    #[arg(long, default_value = "bench")]
    id: String,
    #[arg(long, default_value = "test-model")]
    model: String,
    /// Content chunks (= completion tokens) per answer.
    #[arg(long, default_value_t = 4)]
    chunks: u32,
    /// Delay between two streamed chunks.
    #[arg(long, default_value_t = 1)]
    chunk_delay_ms: u64,
    /// Answer each request with its max_tokens chunks (at most 100,000) instead of --chunks.
    #[arg(long)]
    chunks_from_max_tokens: bool,
}

fn parse_api(s: &str) -> Result<Api, String> {
    s.parse()
}

impl WorkloadArgs {
    /// The workload file (if any) with these flags laid over it.
    fn resolve(self) -> Result<Workload, BenchError> {
        let mut w = match (&self.workload, &self.lab_workload) {
            (Some(path), _) => Workload::from_yaml_file(path)?,
            (None, Some(path)) => epp_bench::lab_workload::load(path)?,
            (None, None) => Workload::default(),
        };
        if self.rate.is_some() || self.poisson.is_some() || self.concurrency.is_some() {
            (w.rate, w.poisson, w.concurrency) = (self.rate, self.poisson, self.concurrency);
        }
        // Stop flags replace the file's stop settings as a whole.
        if self.duration.is_some() || self.requests.is_some() {
            (w.duration, w.requests) = (self.duration, self.requests);
        }
        macro_rules! set {
            ($($field:ident),*) => { $(if let Some(v) = self.$field { w.$field = v; })* };
        }
        set!(
            api,
            model,
            stream,
            ignore_eos,
            prompt_tokens,
            output_tokens,
            prefix_groups,
            prefix_tokens,
            turns
        );
        set!(fairness_ids, backend_header, timeout, seed);
        w.prefix_seed = self.prefix_seed.or(w.prefix_seed);
        w.url = self.url.or(w.url);
        w.slo_ttft_ms = self.slo_ttft_ms.or(w.slo_ttft_ms);
        w.slo_tpot_ms = self.slo_tpot_ms.or(w.slo_tpot_ms);
        if let Some(name) = self.objective {
            w.objectives = Some(ObjectiveMix(vec![(name, 1.0)]));
        }
        w.objectives = self.objectives.or(w.objectives);
        for header in &self.headers {
            let (name, value) = header.split_once(':').ok_or_else(|| epp_bench::WorkloadError::Invalid {
                field: "headers",
                message: format!("expected `name: value`, got {header:?}"),
            })?;
            w.headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
        w.validate()?;
        Ok(w)
    }
}

fn write_file(path: &Path, contents: &str) -> Result<(), BenchError> {
    std::fs::write(path, contents)
        .map_err(|source| BenchError::Write { path: path.display().to_string(), source })
}

fn too_many_errors(max_rate: Option<f64>, requests: u64, ok: u64) -> bool {
    max_rate.is_some_and(|max| ok == 0 || (requests - ok) as f64 > max * requests as f64)
}

async fn run(mut args: RunArgs) -> Result<ExitCode, BenchError> {
    let (workload, result, replayed) = match args.lab_replay.take() {
        Some(path) => replay(&path, &args).await?,
        None => {
            let workload = std::mem::take(&mut args.workload).resolve()?;
            let progress = !args.quiet && std::io::stderr().is_terminal();
            let options = epp_bench::RunOptions { progress, preflight: !args.no_preflight };
            let result = epp_bench::run(&workload, &options).await?;
            (workload, result, None)
        }
    };
    let mut report = Report::new(&workload, &result, args.samples);
    if let Some(load) = replayed {
        report.load = load;
    }
    print!("{}", report.to_table());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        write_file(path, &text)?;
    }
    let title = format!("{} — {}", report.target, report.load);
    if let Some(path) = &args.plot {
        write_file(path, &svg::latency_cdf(&title, &result.samples))?;
    }
    if let Some(path) = &args.timeseries {
        write_file(path, &svg::latency_timeseries(&title, &result.samples, 60))?;
    }
    Ok(if too_many_errors(args.max_error_rate, report.requests, report.ok) {
        eprintln!("epp-bench: error rate above --max-error-rate");
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// `run --lab-replay`: the lab's plan for the file, sent to --url. Returns the workload the report reads
/// (its target, model and SLOs, scaled by the time scale) and the description of the load.
async fn replay(
    path: &Path,
    args: &RunArgs,
) -> Result<(Workload, epp_bench::RunResult, Option<String>), BenchError> {
    use epp_bench::replay::{self, ReplayOptions};
    let w = &args.workload;
    let time_scale = args.time_scale.unwrap_or(1.0);
    let options = ReplayOptions {
        seed: w.seed,
        duration_s: w.duration.map(|d| d.as_secs_f64()),
        rate_scale: args.rate_scale,
        time_scale: Some(time_scale),
    };
    let plan = replay::load(path, options)?;
    let mut workload = Workload {
        url: w.url.clone(),
        model: plan.workload.model.clone(),
        seed: plan.workload.seed,
        ..Workload::default()
    };
    if let Some(timeout) = w.timeout {
        workload.timeout = timeout;
    }
    if let Some(slo) = plan.workload.slo {
        (workload.slo_ttft_ms, workload.slo_tpot_ms) =
            (slo.ttft_ms.map(|v| v / time_scale), slo.tpot_ms.map(|v| v / time_scale));
    }
    workload.validate()?;
    let target = epp_bench::runner::target_of(&workload, epp_bench::runner::build_client()?)?;
    let load = format!(
        "lab replay of {} (seed {}, {} s simulated, {} requests, time scale {time_scale})",
        path.display(),
        plan.workload.seed,
        plan.workload.duration.0,
        plan.requests.len()
    );
    let result = replay::run(&target, plan).await;
    Ok((workload, result, Some(load)))
}

async fn compare(args: CompareArgs) -> Result<ExitCode, BenchError> {
    let mut workload_args = args.workload;
    // The targets give the URLs; a placeholder keeps validation of the rest meaningful.
    if workload_args.url.is_none() {
        workload_args.url = args.targets.first().map(|t| t.url.clone());
    }
    let workload = workload_args.resolve()?;
    let options = CompareOptions {
        rounds: args.rounds,
        round_duration: args.round_duration,
        warmup: args.warmup,
        progress: !args.quiet && std::io::stderr().is_terminal(),
    };
    let comparison = epp_bench::compare(&workload, &args.targets, &options, |round, name, report| {
        let p = |s: Option<epp_bench::stats::LatencySummary>, f: fn(&epp_bench::stats::LatencySummary) -> f64| {
            s.as_ref().map_or("-".into(), |s| format!("{:.2}", f(s)))
        };
        eprintln!(
            "round {round}/{} {name:<8} {:>8.1} req/s  ok {:>6}  errors {:>4}  E2E p50 {} p99 {} ms  TTFT p50 {} ms",
            options.rounds,
            report.throughput_rps,
            report.ok,
            report.error_total(),
            p(report.e2e_ms, |s| s.p50),
            p(report.e2e_ms, |s| s.p99),
            p(report.ttft_ms, |s| s.p50),
        );
    })
    .await?;
    let markdown = comparison.to_markdown();
    print!("{markdown}");
    if let Some(path) = &args.markdown {
        write_file(path, &markdown)?;
    }
    if let Some(path) = &args.json {
        write_file(path, &serde_json::to_string_pretty(&comparison).unwrap_or_default())?;
    }
    let failing: Vec<&str> = comparison
        .setups
        .iter()
        .filter(|s| too_many_errors(args.max_error_rate, s.requests, s.ok))
        .map(|s| s.name.as_str())
        .collect();
    if failing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("epp-bench: error rate above --max-error-rate for: {}", failing.join(", "));
        Ok(ExitCode::from(2))
    }
}

fn criterion(args: CriterionArgs) -> Result<ExitCode, BenchError> {
    let since = args.since_unix.map(|secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
    let results = epp_bench::criterion::collect(&args.dir, since)?;
    if results.is_empty() {
        eprintln!("epp-bench: no criterion results under {}", args.dir.display());
        return Ok(ExitCode::from(2));
    }
    print!("{}", epp_bench::criterion::to_markdown(&results));
    Ok(ExitCode::SUCCESS)
}

async fn backend(args: BackendArgs) -> Result<ExitCode, BenchError> {
    let addrs: Vec<std::net::SocketAddr> = args.ports.iter().map(|p| (args.host, *p).into()).collect();
    let options = epp_bench::backend::BackendOptions {
        model: args.model,
        chunks: args.chunks,
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
        chunks_from_max_tokens: args.chunks_from_max_tokens,
        id_prefix: args.id,
    };
    for addr in epp_bench::backend::serve(&addrs, &options).await? {
        println!("epp-bench backend id={}-{} listening on {addr}", options.id_prefix, addr.port());
    }
    // Serve until killed.
    std::future::pending::<()>().await;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args).await,
        Command::Compare(args) => compare(args).await,
        Command::Criterion(args) => criterion(args),
        Command::Backend(args) => backend(args).await,
        Command::Lab(args) => {
            // The lab is synchronous CPU work: run it off the async runtime.
            let outcome = tokio::task::spawn_blocking(move || epp_lab::cli::run(args)).await;
            return match outcome {
                Ok(Ok(())) => std::process::ExitCode::SUCCESS,
                Ok(Err(e)) => {
                    eprintln!("epp-bench lab: {e:#}");
                    std::process::ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("epp-bench lab: {e}");
                    std::process::ExitCode::FAILURE
                }
            };
        }
    };
    result.unwrap_or_else(|e| {
        eprintln!("epp-bench: {e}");
        ExitCode::FAILURE
    })
}
