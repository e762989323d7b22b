#!/usr/bin/env python3
"""Prefix routing configs side by side over the lab's scenario suite (BENCHMARKS.md §8): for each scenario
of crates/lab/inputs/scenarios/ and each seed, one `epp-lab` run with every config as a column, then the
means per scenario of the prefix-cache hit rate, TTFT p90 and SLO attainment.

Usage: scripts/precise-lab.py [--seeds 1,2,3,4,5] [--epp-replicas N] [--scenarios a,b|FILE.yaml,…] [--jobs 2]
[--paired] CONFIG...
Needs `cargo build --release -p epp-lab` (or EPP_LAB=path). Output: one row per scenario, with its split
(tuning or held-out), then `hit % / TTFT p90 ms / SLO %` per config. With --paired, two more tables:
each later config's TTFT p90 and hit rate minus the first config's, seed by seed (the same seed is the
same arrivals), as the mean ± its standard error and the number of seeds where the later config is
lower, so a difference of means can be told from the spread between seeds.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "crates/lab/inputs/scenarios"


def split_of(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("split:"):
            return line.split(":", 1)[1].strip()
    return "?"


def run(lab: str, scenario: Path, seed: int, replicas: int, configs: list[str]):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [lab, "--scenario", str(scenario), "--seed", str(seed), "--epp-replicas", str(replicas),
               "--jobs", "1", "--json", out.name]
        for config in configs:
            cmd += ["--config", config]
        subprocess.run(cmd, check=True, capture_output=True)
        report = json.load(open(out.name))
    return [(r["prefix_hit_rate"], r["ttft_s"]["p90"], r["slo_attainment"]) for r in report["runs"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--epp-replicas", type=int, default=1)
    parser.add_argument("--scenarios", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--paired", action="store_true")
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    lab = os.environ.get("EPP_LAB", str(ROOT / "target/release/epp-lab"))
    seeds = [int(s) for s in args.seeds.split(",")]
    wanted = set(filter(None, args.scenarios.split(",")))
    files = [Path(w) for w in wanted if w.endswith(".yaml")]
    scenarios = files or sorted(p for p in SCENARIOS.glob("*.yaml") if not wanted or p.stem in wanted)
    jobs = [(p, s) for p in scenarios for s in seeds]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda job: run(lab, job[0], job[1], args.epp_replicas, args.configs), jobs))
    names = [Path(c).stem for c in args.configs]
    print(f"epp replicas {args.epp_replicas}, seeds {args.seeds}: hit % / TTFT p90 ms / SLO %")
    print(f"{'scenario':28} {'split':8} " + " | ".join(f"{n[:20]:>20}" for n in names))
    for scenario in scenarios:
        runs = [r for (p, _), r in zip(jobs, rows) if p == scenario]
        cells = []
        for i in range(len(args.configs)):
            hit = statistics.mean(r[i][0] for r in runs) * 100
            ttft = statistics.mean(r[i][1] for r in runs) * 1000
            slo = statistics.mean(r[i][2] for r in runs) * 100
            cells.append(f"{hit:5.1f} {ttft:6.0f} {slo:5.1f}")
        print(f"{scenario.stem:28} {split_of(scenario):8} " + " | ".join(f"{c:>20}" for c in cells))
    if args.paired:
        print_paired(scenarios, jobs, rows, names)


def print_paired(scenarios, jobs, rows, names) -> None:
    for column, label, unit in ((1, "TTFT p90", "ms"), (0, "hit rate", "points")):
        print(f"\n{label} minus {names[0]}'s, per seed: mean ± standard error {unit} (seeds lower / seeds)")
        print(f"{'scenario':28} " + " | ".join(f"{n[:22]:>22}" for n in names[1:]))
        for scenario in scenarios:
            runs = [r for (p, _), r in zip(jobs, rows) if p == scenario]
            cells = []
            for i in range(1, len(names)):
                diffs = [(r[i][column] - r[0][column]) * (1000 if column == 1 else 100) for r in runs]
                mean = statistics.mean(diffs)
                err = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
                lower = sum(d < 0 for d in diffs)
                cells.append(f"{mean:+7.1f} ± {err:5.1f} ({lower}/{len(diffs)})")
            print(f"{scenario.stem:28} " + " | ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
