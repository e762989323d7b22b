//! Turns a run's samples into its summary: counts by outcome, throughput, latency percentiles of
//! successful requests only, SLO attainment and the per-backend split; as a table for people and as
//! JSON for tools.
//!
//! Why latency only over successes: errors are counted by kind next to the latencies, never mixed into
//! them (a fast 503 is not a fast answer). SLO attainment, on the other hand, is over *all* requests: a
//! failed request did not meet its SLO.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::client::Sample;
use super::runner::RunResult;
use super::stats::{ratio, LatencySummary};
use super::workload::{LoadShape, Workload};

/// SLO attainment over every request of a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SloAttainment {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    pub requests: u64,
    /// Requests that succeeded and met every SLO given.
    pub met: u64,
    pub fraction: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_met: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_met: Option<u64>,
}

/// The summary of one run (the `--json` document).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub target: String,
    pub load: String,
    pub workload: Workload,
    pub started_unix_s: f64,
    pub duration_s: f64,
    pub requests: u64,
    pub ok: u64,
    /// Failed requests by kind (`http_503`, `timeout`, `connection`, `broken_stream`, `bad_response`).
    pub errors: BTreeMap<String, u64>,
    /// Successful requests per second.
    pub throughput_rps: f64,
    pub output_tokens_per_s: f64,
    pub mean_request_bytes: f64,
    pub ttft_ms: Option<LatencySummary>,
    pub tpot_ms: Option<LatencySummary>,
    pub itl_ms: Option<LatencySummary>,
    pub e2e_ms: Option<LatencySummary>,
    pub slo: Option<SloAttainment>,
    /// Requests (all outcomes) per value of the backend header; `(none)` when it was absent.
    pub backends: BTreeMap<String, u64>,
    /// Requests per objective, when objectives were sent.
    pub objectives: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<Sample>>,
}

/// How the load was shaped, in words.
pub fn describe_load(workload: &Workload) -> String {
    let shape = match workload.load_shape() {
        LoadShape::Rate(r) => format!("constant {r} req/s"),
        LoadShape::Poisson(r) => format!("poisson {r} req/s"),
        LoadShape::Concurrency(c) => format!("concurrency {c}"),
    };
    match (workload.duration_limit(), workload.requests) {
        (Some(d), Some(n)) => format!("{shape}, {n} requests or {}", humantime::format_duration(d)),
        (Some(d), None) => format!("{shape} for {}", humantime::format_duration(d)),
        (None, Some(n)) => format!("{shape}, {n} requests"),
        (None, None) => shape,
    }
}

fn summary_of(samples: &[&Sample], value: impl Fn(&Sample) -> Option<f64>) -> Option<LatencySummary> {
    LatencySummary::from_values(samples.iter().filter_map(|s| value(s)).collect())
}

/// SLO attainment when the workload set an SLO.
pub fn slo_attainment(workload: &Workload, samples: &[Sample]) -> Option<SloAttainment> {
    let (ttft_slo, tpot_slo) = (workload.slo_ttft_ms, workload.slo_tpot_ms);
    if ttft_slo.is_none() && tpot_slo.is_none() {
        return None;
    }
    // Without streaming there is no first-token time; the whole answer's time bounds it from above.
    let meets_ttft = |s: &Sample, slo: f64| s.ok() && s.ttft_ms.unwrap_or(s.e2e_ms) <= slo;
    // A one-token answer has no per-token time and cannot miss a TPOT SLO.
    let meets_tpot = |s: &Sample, slo: f64| s.ok() && s.tpot_ms.is_none_or(|t| t <= slo);
    let count = |f: &dyn Fn(&Sample) -> bool| samples.iter().filter(|s| f(s)).count() as u64;
    let met = count(&|s| {
        s.ok()
            && ttft_slo.is_none_or(|slo| meets_ttft(s, slo))
            && tpot_slo.is_none_or(|slo| meets_tpot(s, slo))
    });
    let requests = samples.len() as u64;
    Some(SloAttainment {
        ttft_ms: ttft_slo,
        tpot_ms: tpot_slo,
        requests,
        met,
        fraction: ratio(met as f64, requests as f64).unwrap_or(0.0),
        ttft_met: ttft_slo.map(|slo| count(&|s| meets_ttft(s, slo))),
        tpot_met: tpot_slo.map(|slo| count(&|s| meets_tpot(s, slo))),
    })
}

impl Report {
    /// Summarises `result`; keeps the raw samples when `keep_samples`.
    pub fn new(workload: &Workload, result: &RunResult, keep_samples: bool) -> Self {
        let samples = &result.samples;
        let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok()).collect();
        let mut errors = BTreeMap::new();
        let mut backends = BTreeMap::new();
        let mut objectives = BTreeMap::new();
        for s in samples {
            if let Some(kind) = s.error {
                *errors.entry(kind.label()).or_insert(0) += 1;
            }
            *backends.entry(s.backend.clone().unwrap_or_else(|| "(none)".into())).or_insert(0) += 1;
            if let Some(objective) = &s.objective {
                *objectives.entry(objective.clone()).or_insert(0) += 1;
            }
        }
        let secs = result.elapsed.as_secs_f64();
        let output_tokens: u64 = ok.iter().map(|s| s.output_tokens).sum();
        let itl = LatencySummary::from_values(ok.iter().flat_map(|s| s.itl_ms.iter().copied()).collect());
        Self {
            target: workload.target_url().map(|u| u.to_string()).unwrap_or_default(),
            load: describe_load(workload),
            workload: workload.clone(),
            started_unix_s: result.started_unix_s,
            duration_s: secs,
            requests: samples.len() as u64,
            ok: ok.len() as u64,
            errors,
            throughput_rps: ratio(ok.len() as f64, secs).unwrap_or(0.0),
            output_tokens_per_s: ratio(output_tokens as f64, secs).unwrap_or(0.0),
            mean_request_bytes: ratio(
                samples.iter().map(|s| s.request_bytes as f64).sum(),
                samples.len() as f64,
            )
            .unwrap_or(0.0),
            ttft_ms: summary_of(&ok, |s| s.ttft_ms),
            tpot_ms: summary_of(&ok, |s| s.tpot_ms),
            itl_ms: itl,
            e2e_ms: summary_of(&ok, |s| Some(s.e2e_ms)),
            slo: slo_attainment(workload, samples),
            backends,
            objectives,
            samples: keep_samples.then(|| result.samples.clone()),
        }
    }

    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The human-readable summary printed on stdout.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "target      {}", self.target);
        let _ = writeln!(out, "load        {}", self.load);
        let errors: Vec<String> = self.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let error_text = if errors.is_empty() { String::new() } else { format!(": {}", errors.join(", ")) };
        let _ = writeln!(
            out,
            "requests    {} (ok {}, errors {}{error_text})",
            self.requests,
            self.ok,
            self.error_total()
        );
        let _ = writeln!(out, "duration    {:.2} s", self.duration_s);
        let _ = writeln!(
            out,
            "throughput  {:.1} req/s, {:.1} output tokens/s (successful requests)",
            self.throughput_rps, self.output_tokens_per_s
        );
        let _ = writeln!(out, "request     {:.1} KB mean body", self.mean_request_bytes / 1000.0);
        let _ = writeln!(
            out,
            "\n{:<12}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency ms", "p50", "p90", "p99", "mean", "count"
        );
        for (name, summary) in
            [("TTFT", &self.ttft_ms), ("TPOT", &self.tpot_ms), ("ITL", &self.itl_ms), ("E2E", &self.e2e_ms)]
        {
            match summary {
                Some(s) => {
                    let _ = writeln!(
                        out,
                        "{name:<12}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10}",
                        s.p50, s.p90, s.p99, s.mean, s.count
                    );
                }
                None => {
                    let _ = writeln!(out, "{name:<12}{:>10}", "-");
                }
            }
        }
        if let Some(slo) = &self.slo {
            let mut parts = Vec::new();
            if let (Some(limit), Some(met)) = (slo.ttft_ms, slo.ttft_met) {
                parts.push(format!("TTFT <= {limit} ms: {met}"));
            }
            if let (Some(limit), Some(met)) = (slo.tpot_ms, slo.tpot_met) {
                parts.push(format!("TPOT <= {limit} ms: {met}"));
            }
            let _ = writeln!(
                out,
                "\nSLO attainment {:.1}% ({}/{} requests; {})",
                slo.fraction * 100.0,
                slo.met,
                slo.requests,
                parts.join(", ")
            );
        }
        let _ = writeln!(out, "\n{:<32}{:>10}{:>8}", "backend", "requests", "share");
        for (backend, n) in &self.backends {
            let share = ratio(*n as f64, self.requests as f64).unwrap_or(0.0) * 100.0;
            let _ = writeln!(out, "{backend:<32}{n:>10}{share:>7.1}%");
        }
        if !self.objectives.is_empty() {
            let _ = writeln!(out, "\n{:<32}{:>10}", "objective", "requests");
            for (objective, n) in &self.objectives {
                let _ = writeln!(out, "{objective:<32}{n:>10}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::client::ErrorKind;

    fn sample(index: u64, e2e: f64, ttft: Option<f64>, error: Option<ErrorKind>) -> Sample {
        Sample {
            index,
            start_s: index as f64 * 0.1,
            e2e_ms: e2e,
            ttft_ms: ttft,
            tpot_ms: ttft.map(|t| (e2e - t) / 3.0),
            itl_ms: ttft.map(|_| vec![1.0, 2.0, 3.0]).unwrap_or_default(),
            prompt_tokens: 10,
            output_tokens: 4,
            request_bytes: 1000,
            backend: Some(format!("b{}", index % 2)),
            objective: None,
            error,
            error_detail: None,
        }
    }

    fn workload() -> Workload {
        Workload { url: Some("http://127.0.0.1:9".into()), slo_ttft_ms: Some(15.0), ..Default::default() }
    }

    #[test]
    fn errors_are_counted_apart_from_latencies() {
        let samples = vec![
            sample(0, 100.0, Some(10.0), None),
            sample(1, 200.0, Some(20.0), None),
            sample(2, 1.0, None, Some(ErrorKind::Http(503))),
            sample(3, 5000.0, None, Some(ErrorKind::Timeout)),
        ];
        let result = RunResult { samples, elapsed: Duration::from_secs(2), started_unix_s: 0.0 };
        let report = Report::new(&workload(), &result, false);
        assert_eq!((report.requests, report.ok, report.error_total()), (4, 2, 2));
        assert_eq!(report.errors["http_503"], 1);
        assert_eq!(report.errors["timeout"], 1);
        let e2e = report.e2e_ms.unwrap();
        assert_eq!((e2e.count, e2e.min, e2e.max), (2, 100.0, 200.0));
        assert_eq!(report.itl_ms.unwrap().count, 6);
        assert_eq!(report.throughput_rps, 1.0);
        assert_eq!(report.output_tokens_per_s, 4.0);
        assert_eq!(report.backends["b0"], 2);
        let slo = report.slo.clone().unwrap();
        assert_eq!((slo.met, slo.requests), (1, 4)); // only the 10 ms TTFT meets 15 ms; errors miss
        let table = report.to_table();
        assert!(table.contains("errors 2: http_503 1, timeout 1"), "{table}");
        assert!(table.contains("SLO attainment 25.0%"), "{table}");
        assert!(report.samples.is_none());
    }

    #[test]
    fn load_descriptions() {
        let w = Workload { rate: Some(5.0), requests: Some(100), ..workload() };
        assert_eq!(describe_load(&w), "constant 5 req/s, 100 requests");
        let w = Workload { concurrency: Some(32), duration: Some(Duration::from_secs(10)), ..workload() };
        assert_eq!(describe_load(&w), "concurrency 32 for 10s");
    }
}
