//! The side-by-side text view of a [`LabReport`]: one column per routing config, one row per metric,
//! then the requests each replica served under each config. Configs with a latency predictor add its
//! warm-up and error (the TTFT model's target is E2E latency when the producer's streamingMode is off).

use std::fmt::Write;

use super::report::{LabReport, Percentiles, RunReport};
use super::training::PredictorReport;

type Cell = fn(&RunReport) -> String;

fn ms(p: Option<Percentiles>, pick: fn(&Percentiles) -> f64) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{:.1}", pick(&p) * 1000.0))
}

fn secs(p: Option<Percentiles>, pick: fn(&Percentiles) -> f64) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{:.2}", pick(&p)))
}

fn percent(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

const ROWS: &[(&str, Cell)] = &[
    ("completed", |r| format!("{}/{}", r.completed, r.requests)),
    ("aborted / rejected (429)", |r| format!("{}/{} ({})", r.aborted, r.rejected, r.rejected_429)),
    ("held by flow control (mean wait s)", |r| match r.flow_wait_mean_s {
        Some(mean) => format!("{} ({mean:.2})", r.flow_waited),
        None => "-".into(),
    }),
    ("TTFT p50 (ms)", |r| ms(r.ttft_s, |p| p.p50)),
    ("TTFT p90 (ms)", |r| ms(r.ttft_s, |p| p.p90)),
    ("TTFT p99 (ms)", |r| ms(r.ttft_s, |p| p.p99)),
    ("TPOT p50 (ms)", |r| ms(r.tpot_s, |p| p.p50)),
    ("TPOT p90 (ms)", |r| ms(r.tpot_s, |p| p.p90)),
    ("TPOT p99 (ms)", |r| ms(r.tpot_s, |p| p.p99)),
    ("E2E p50 (s)", |r| secs(r.e2e_s, |p| p.p50)),
    ("E2E p90 (s)", |r| secs(r.e2e_s, |p| p.p90)),
    ("E2E p99 (s)", |r| secs(r.e2e_s, |p| p.p99)),
    ("throughput (req/s)", |r| format!("{:.2}", r.throughput_rps)),
    ("output (tok/s)", |r| format!("{:.0}", r.output_tokens_per_s)),
    ("SLO attainment (%)", |r| r.slo_attainment.map_or_else(|| "-".into(), percent)),
    ("  within TTFT / TPOT (%)", |r| {
        format!("{} / {}", opt_percent(r.ttft_attainment), opt_percent(r.tpot_attainment))
    }),
    ("prefix hit rate (%)", |r| percent(r.prefix_hit_rate)),
    ("preemptions", |r| r.preemptions.to_string()),
    ("predictor warm-up (s)", |r| {
        predictor(r, |p| p.warmup_s.map_or_else(|| "never".into(), |s| format!("{s:.0}")))
    }),
    ("decided on predictions (%)", |r| {
        predictor(r, |p| {
            percent(
                p.predicted_decisions as f64 / (p.predicted_decisions + p.fallback_decisions).max(1) as f64,
            )
        })
    }),
    ("TTFT model MAPE held-out (%)", |r| predictor(r, |p| opt_percent(p.ttft_heldout_mape))),
    ("TTFT model MAPE live (%)", |r| predictor(r, |p| opt_percent(p.ttft_live_mape))),
    ("TPOT model MAPE held-out (%)", |r| predictor(r, |p| opt_percent(p.tpot_heldout_mape))),
    ("TPOT model MAPE live (%)", |r| predictor(r, |p| opt_percent(p.tpot_live_mape))),
];

/// A predictor cell, `-` for configs without one.
fn predictor(r: &RunReport, cell: impl Fn(&PredictorReport) -> String) -> String {
    r.predictor.as_ref().map_or_else(|| "-".into(), cell)
}

fn opt_percent(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), percent)
}

/// Renders the comparison as an aligned text table.
pub fn format_table(report: &LabReport) -> String {
    let first = report.runs.first();
    let replicas = first.map_or(0, |r| r.endpoints.len());
    let mut rows: Vec<(String, Vec<String>)> = vec![("metric".into(), names(report))];
    rows.extend(ROWS.iter().map(|(label, cell)| (label.to_string(), report.runs.iter().map(cell).collect())));
    rows.push((String::new(), Vec::new()));
    rows.push(("requests per replica".into(), names(report)));
    for i in 0..replicas {
        let name = first.map_or(String::new(), |r| r.endpoints[i].name.clone());
        let cells = report
            .runs
            .iter()
            .map(|run| run.endpoints.get(i).map_or_else(|| "-".into(), |e| e.requests.to_string()))
            .collect();
        rows.push((name, cells));
    }
    let label_width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0) + 2;
    let widths: Vec<usize> = (0..report.runs.len())
        .map(|c| rows.iter().filter_map(|(_, cells)| cells.get(c)).map(String::len).max().unwrap_or(0) + 2)
        .collect();
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(
        out,
        "{} replicas, {} requests over {:.0} s (seed {}, scrape every {:.0} ms)\n",
        report.replicas,
        report.requests,
        report.duration_s,
        report.seed,
        report.scrape_interval_s * 1000.0
    );
    for (label, cells) in &rows {
        let line_start = out.len();
        let _ = write!(out, "{label:<label_width$}");
        for (cell, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "{cell:>w$}");
        }
        let line_end = line_start + out[line_start..].trim_end().len();
        out.truncate(line_end);
        out.push('\n');
    }
    out
}

fn names(report: &LabReport) -> Vec<String> {
    report.runs.iter().map(|r| r.name.clone()).collect()
}
