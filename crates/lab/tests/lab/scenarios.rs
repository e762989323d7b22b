//! The scenario suite's files (crates/lab/inputs/scenarios/): every one loads, the suite has the shape
//! issue 17 asks for (12+ scenarios in two halves, heterogeneous fleets in both, the new accelerator
//! profiles and a tensor-parallel model), and a short run of each through the default profile and the
//! oracle completes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use epp_lab::scenario::{Scenario, Split};
use epp_lab::values::Seconds;
use epp_lab::{compare, RouterChoice};

fn scenarios() -> Vec<(PathBuf, Scenario)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.into_iter().map(|p| (p.clone(), Scenario::load(&p).unwrap_or_else(|e| panic!("{e}")))).collect()
}

#[test]
fn the_suite_has_two_halves_of_varied_scenarios() {
    let all = scenarios();
    assert!(all.len() >= 12, "{} scenarios", all.len());
    for split in [Split::Tuning, Split::HeldOut] {
        let half: Vec<_> = all.iter().filter(|(_, s)| s.split == split).collect();
        assert!(half.len() >= 6, "{split:?}: {}", half.len());
        let heterogeneous = half
            .iter()
            .filter(|(_, s)| {
                s.fleet.replicas.iter().map(|r| &r.engine.profile.name).collect::<BTreeSet<_>>().len() > 1
            })
            .count();
        assert!(heterogeneous >= 3, "{split:?}: {heterogeneous} heterogeneous fleets");
    }
    let profiles: BTreeSet<String> = all
        .iter()
        .flat_map(|(_, s)| s.fleet.replicas.iter().map(|r| r.engine.profile.name.clone()))
        .collect();
    for wanted in ["h100-8b", "l4-8b", "a100-8b", "h200-8b", "h100x4-70b"] {
        assert!(profiles.contains(wanted), "no scenario uses {wanted}: {profiles:?}");
    }
    for (path, s) in &all {
        let slo = s.workload.slo.unwrap_or_else(|| panic!("{}: every scenario has an SLO", path.display()));
        assert!(slo.ttft_ms.is_some() && slo.tpot_ms.is_some(), "{}", path.display());
        assert!(!s.workload.send_slo_headers, "{}: headers are a column's choice", path.display());
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.lines().any(|l| l.starts_with("rate_scale: ")), "{}: calibrated rate", path.display());
    }
}

#[test]
fn every_scenario_runs_under_the_default_profile_and_the_oracle() {
    let choices = [RouterChoice::baseline("default").unwrap(), RouterChoice::baseline("oracle").unwrap()];
    for (path, mut s) in scenarios() {
        s.workload.duration = Seconds(4.0);
        let report = compare(&s.fleet, &s.workload, &choices, 2).unwrap();
        for run in &report.runs {
            assert_eq!(run.unfinished, 0, "{} {}", path.display(), run.name);
            assert_eq!(
                run.completed + run.aborted + run.rejected,
                run.requests,
                "{} {}",
                path.display(),
                run.name
            );
        }
    }
}
