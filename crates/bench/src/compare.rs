//! Side-by-side comparison of several setups (e.g. Envoy + epp, Envoy + no-op ext_proc, Envoy direct)
//! under one workload, in interleaved rounds: a-b-c, a-b-c, … so that machine noise (other processes,
//! thermal state, a noisy neighbour) lands on every setup alike instead of on whichever ran last.
//!
//! Samples of all rounds of a setup are pooled for its percentiles; throughput is its successful
//! requests over its summed round time. The first setup is the subject: the ratio table divides its
//! figures by each other setup's.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use super::client::Sample;
use super::report::{describe_load, Report};
use super::runner::{build_client, run_with_client, RunOptions};
use super::stats::{ratio, LatencySummary};
use super::workload::Workload;
use super::BenchError;

/// A named target: `epp=http://127.0.0.1:8081`.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub name: String,
    pub url: String,
}

impl FromStr for Setup {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('=') {
            Some((name, url)) if !name.trim().is_empty() && !url.trim().is_empty() => {
                Ok(Setup { name: name.trim().to_string(), url: url.trim().to_string() })
            }
            _ => Err(format!("expected NAME=URL, got {s:?}")),
        }
    }
}

/// How the rounds run.
#[derive(Debug, Clone, Copy)]
pub struct CompareOptions {
    pub rounds: u32,
    pub round_duration: Duration,
    /// Unrecorded run per setup before the first round (connections, caches, first scrapes).
    pub warmup: Duration,
    pub progress: bool,
}

/// One setup's pooled result.
#[derive(Debug, Clone, Serialize)]
pub struct SetupResult {
    pub name: String,
    pub url: String,
    pub requests: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    /// Successful requests per second of each round.
    pub round_rps: Vec<f64>,
    /// Successful requests over the summed round time.
    pub rps: f64,
    pub mean_request_bytes: f64,
    pub e2e_ms: Option<LatencySummary>,
    pub ttft_ms: Option<LatencySummary>,
}

/// The result of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub load: String,
    pub rounds: u32,
    pub setups: Vec<SetupResult>,
}

#[derive(Default)]
struct Pool {
    samples: Vec<Sample>,
    elapsed: Duration,
    round_rps: Vec<f64>,
}

/// Runs `base` against every setup, `rounds` times, interleaved. `on_round(round, setup, report)` is
/// called after each recorded run (for live output).
pub async fn compare(
    base: &Workload,
    setups: &[Setup],
    options: &CompareOptions,
    mut on_round: impl FnMut(u32, &str, &Report),
) -> Result<Comparison, BenchError> {
    let workload_for = |setup: &Setup, duration: Duration| Workload {
        url: Some(setup.url.clone()),
        duration: Some(duration),
        requests: None,
        ..base.clone()
    };
    for setup in setups {
        workload_for(setup, options.round_duration).validate()?;
    }
    let quiet = RunOptions { progress: options.progress, preflight: false };
    // Fail fast on an unreachable setup, and warm each one up, before anything is recorded.
    for setup in setups {
        let warm = RunOptions { preflight: true, ..quiet };
        let duration = options.warmup.max(Duration::from_millis(1));
        let workload =
            Workload { requests: options.warmup.is_zero().then_some(1), ..workload_for(setup, duration) };
        run_with_client(&workload, build_client()?, &warm).await?;
    }
    let mut pools: Vec<Pool> = setups.iter().map(|_| Pool::default()).collect();
    for round in 1..=options.rounds {
        for (setup, pool) in setups.iter().zip(&mut pools) {
            let workload = workload_for(setup, options.round_duration);
            let result = run_with_client(&workload, build_client()?, &quiet).await?;
            let report = Report::new(&workload, &result, false);
            on_round(round, &setup.name, &report);
            pool.round_rps.push(report.throughput_rps);
            pool.elapsed += result.elapsed;
            pool.samples.extend(result.samples);
        }
    }
    let setups = setups.iter().zip(pools).map(|(setup, pool)| summarise(setup, pool)).collect();
    Ok(Comparison { load: describe_load(&workload_for_load(base, options)), rounds: options.rounds, setups })
}

fn workload_for_load(base: &Workload, options: &CompareOptions) -> Workload {
    Workload { duration: Some(options.round_duration), requests: None, ..base.clone() }
}

fn summarise(setup: &Setup, pool: Pool) -> SetupResult {
    let ok: Vec<&Sample> = pool.samples.iter().filter(|s| s.ok()).collect();
    let mut errors = BTreeMap::new();
    for kind in pool.samples.iter().filter_map(|s| s.error) {
        *errors.entry(kind.label()).or_insert(0) += 1;
    }
    let n = pool.samples.len();
    SetupResult {
        name: setup.name.clone(),
        url: setup.url.clone(),
        requests: n as u64,
        ok: ok.len() as u64,
        errors,
        round_rps: pool.round_rps,
        rps: ratio(ok.len() as f64, pool.elapsed.as_secs_f64()).unwrap_or(0.0),
        mean_request_bytes: ratio(pool.samples.iter().map(|s| s.request_bytes as f64).sum(), n as f64)
            .unwrap_or(0.0),
        e2e_ms: LatencySummary::from_values(ok.iter().map(|s| s.e2e_ms).collect()),
        ttft_ms: LatencySummary::from_values(ok.iter().filter_map(|s| s.ttft_ms).collect()),
    }
}

fn ms(summary: Option<&LatencySummary>, pick: fn(&LatencySummary) -> f64) -> String {
    summary.map_or("-".into(), |s| format!("{:.2}", pick(s)))
}

fn times(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => ratio(a, b).map_or("-".into(), |r| format!("{r:.2}×")),
        _ => "-".into(),
    }
}

impl Comparison {
    /// Markdown tables: one row per setup, then the first setup's ratios to each other one.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Load: {}, {} interleaved rounds per setup.\n", self.load, self.rounds);
        let _ = writeln!(
            out,
            "| setup | requests | errors | req/s (rounds) | body KB | E2E p50 ms | E2E p99 ms | TTFT p50 ms | TTFT p99 ms |"
        );
        let _ = writeln!(out, "|---|---:|---:|---|---:|---:|---:|---:|---:|");
        for s in &self.setups {
            let rounds: Vec<String> = s.round_rps.iter().map(|r| format!("{r:.0}")).collect();
            let errors = s.requests - s.ok;
            let _ = writeln!(
                out,
                "| {} | {} | {} | **{:.1}** ({}) | {:.1} | {} | {} | {} | {} |",
                s.name,
                s.requests,
                errors,
                s.rps,
                rounds.join(", "),
                s.mean_request_bytes / 1000.0,
                ms(s.e2e_ms.as_ref(), |l| l.p50),
                ms(s.e2e_ms.as_ref(), |l| l.p99),
                ms(s.ttft_ms.as_ref(), |l| l.p50),
                ms(s.ttft_ms.as_ref(), |l| l.p99),
            );
        }
        let Some((subject, others)) = self.setups.split_first() else { return out };
        if others.is_empty() {
            return out;
        }
        let _ =
            writeln!(out, "\n| ratio | req/s | E2E p50 | E2E p99 | TTFT p50 | TTFT p99 | added E2E p50 ms |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
        let p50 = |s: &SetupResult| s.e2e_ms.map(|l| l.p50);
        let p99 = |s: &SetupResult| s.e2e_ms.map(|l| l.p99);
        let t50 = |s: &SetupResult| s.ttft_ms.map(|l| l.p50);
        let t99 = |s: &SetupResult| s.ttft_ms.map(|l| l.p99);
        for other in others {
            let added = match (p50(subject), p50(other)) {
                (Some(a), Some(b)) => format!("{:+.2}", a - b),
                _ => "-".into(),
            };
            let _ = writeln!(
                out,
                "| {}/{} | {} | {} | {} | {} | {} | {added} |",
                subject.name,
                other.name,
                times(Some(subject.rps), Some(other.rps)),
                times(p50(subject), p50(other)),
                times(p99(subject), p99(other)),
                times(t50(subject), t50(other)),
                times(t99(subject), t99(other)),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, rps: f64, p50: f64) -> SetupResult {
        let e2e =
            LatencySummary { count: 10, mean: p50, min: p50, p50, p90: p50, p99: p50 * 2.0, max: p50 * 2.0 };
        SetupResult {
            name: name.into(),
            url: format!("http://{name}"),
            requests: 10,
            ok: 10,
            errors: BTreeMap::new(),
            round_rps: vec![rps, rps],
            rps,
            mean_request_bytes: 2000.0,
            e2e_ms: Some(e2e),
            ttft_ms: None,
        }
    }

    #[test]
    fn setups_parse_from_name_equals_url() {
        assert_eq!(
            "epp=http://127.0.0.1:1".parse::<Setup>(),
            Ok(Setup { name: "epp".into(), url: "http://127.0.0.1:1".into() })
        );
        assert!("http://x".parse::<Setup>().is_err());
        assert!("=http://x".parse::<Setup>().is_err());
    }

    #[test]
    fn markdown_has_a_row_per_setup_and_ratios_of_the_first() {
        let comparison = Comparison {
            load: "concurrency 32 for 10s".into(),
            rounds: 2,
            setups: vec![
                result("epp", 90.0, 12.0),
                result("noop", 100.0, 10.0),
                result("direct", 120.0, 8.0),
            ],
        };
        let md = comparison.to_markdown();
        assert!(md.contains("| epp | 10 | 0 | **90.0** (90, 90) | 2.0 | 12.00 | 24.00 | - | - |"), "{md}");
        assert!(md.contains("| epp/noop | 0.90× | 1.20× | 1.20× | - | - | +2.00 |"), "{md}");
        assert!(md.contains("| epp/direct | 0.75× | 1.50× |"), "{md}");
    }
}
