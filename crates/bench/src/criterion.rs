//! Collects criterion's results (`target/criterion/**/new/{benchmark,estimates}.json`) into one
//! Markdown table, so BENCHMARKS.md records the micro-benchmarks next to the live figures.
//!
//! Why read criterion's files rather than its console output: the JSON is criterion's stable record of
//! the last run with confidence intervals; the console format is for people and changes between versions.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::BenchError;

#[derive(Deserialize)]
struct BenchmarkId {
    full_id: String,
}

#[derive(Deserialize)]
struct Estimates {
    mean: Estimate,
    median: Estimate,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
    confidence_interval: Interval,
}

#[derive(Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

/// One benchmark's last result, times in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct MicroResult {
    pub id: String,
    pub mean_ns: f64,
    pub mean_low_ns: f64,
    pub mean_high_ns: f64,
    pub median_ns: f64,
}

/// `1234.5 ns` → `1.23 µs`, etc.
pub fn format_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn new_dirs(root: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            found.push(path);
        } else {
            new_dirs(&path, found);
        }
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, BenchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::Read { path: path.display().to_string(), message: e.to_string() })?;
    serde_json::from_str(&text)
        .map_err(|e| BenchError::Read { path: path.display().to_string(), message: e.to_string() })
}

/// Every result under `root` whose estimates were written at or after `since` (to skip benchmarks
/// that no longer exist but left files behind), sorted by id.
pub fn collect(root: &Path, since: Option<SystemTime>) -> Result<Vec<MicroResult>, BenchError> {
    let mut dirs = Vec::new();
    new_dirs(root, &mut dirs);
    let mut results = Vec::new();
    for dir in dirs {
        let (benchmark, estimates) = (dir.join("benchmark.json"), dir.join("estimates.json"));
        if !benchmark.is_file() || !estimates.is_file() {
            continue;
        }
        let modified = std::fs::metadata(&estimates).and_then(|m| m.modified()).ok();
        if let (Some(since), Some(modified)) = (since, modified) {
            if modified < since {
                continue;
            }
        }
        let id: BenchmarkId = read_json(&benchmark)?;
        let e: Estimates = read_json(&estimates)?;
        results.push(MicroResult {
            id: id.full_id,
            mean_ns: e.mean.point_estimate,
            mean_low_ns: e.mean.confidence_interval.lower_bound,
            mean_high_ns: e.mean.confidence_interval.upper_bound,
            median_ns: e.median.point_estimate,
        });
    }
    results.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(results)
}

/// The Markdown table of `results`.
pub fn to_markdown(results: &[MicroResult]) -> String {
    let mut out = String::from("| benchmark | mean | 95% CI of mean | median |\n|---|---:|---|---:|\n");
    for r in results {
        out.push_str(&format!(
            "| `{}` | {} | {} – {} | {} |\n",
            r.id,
            format_ns(r.mean_ns),
            format_ns(r.mean_low_ns),
            format_ns(r.mean_high_ns),
            format_ns(r.median_ns)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_results_and_formats_them() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("decision/hit/100/new");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("benchmark.json"), r#"{"group_id":"decision","full_id":"decision/hit/100"}"#)
            .unwrap();
        let interval = r#"{"confidence_level":0.95,"lower_bound":8900.0,"upper_bound":9100.0}"#;
        std::fs::write(
            dir.join("estimates.json"),
            format!(
                r#"{{"mean":{{"confidence_interval":{interval},"point_estimate":9000.0,"standard_error":1.0}},
                "median":{{"confidence_interval":{interval},"point_estimate":8950.0,"standard_error":1.0}}}}"#
            ),
        )
        .unwrap();
        std::fs::create_dir_all(root.path().join("stale/base")).unwrap();
        let results = collect(root.path(), None).unwrap();
        assert_eq!(results.len(), 1);
        let md = to_markdown(&results);
        assert!(md.contains("| `decision/hit/100` | 9.00 µs | 8.90 µs – 9.10 µs | 8.95 µs |"), "{md}");
        let future = SystemTime::now() + std::time::Duration::from_secs(3600);
        assert!(collect(root.path(), Some(future)).unwrap().is_empty());
        assert_eq!(format_ns(141_000.0), "141.00 µs");
        assert_eq!(format_ns(50.0), "50.0 ns");
    }
}
