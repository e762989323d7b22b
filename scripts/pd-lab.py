#!/usr/bin/env python3
"""Prefill/decode disaggregation against the same number of aggregated replicas, in the lab.

Four H100s serve a long-prompt workload (crates/lab/inputs/pd/workload-long-prompts.yaml) three ways:
aggregated (epp's default profile), 2 prefill + 2 decode, and 1 prefill + 3 decode, the last two routed by
llm-d's P/D guide config (config/pd-disaggregation.yaml: always disaggregate) and by the same config with
prefix-based-pd-decider at each nonCachedTokens of the sweep, at each rate scale. Prints one markdown table:
the mean over the seeds of SLO attainment, TTFT / TPOT / E2E p90 and the share of requests completed.
Nothing here is tuned: the sweep is reported whole, and no value of it is chosen for a config epp ships.

Usage: scripts/pd-lab.py [--seeds 1-5] [--thresholds 512,2048,8192] [--rate-scales 1,1.5,2] [--jobs N]
Standard library only; needs a release build of epp-lab (cargo build --release -p epp-lab).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from scenarios import lab_binary, seed_range

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "crates/lab/inputs/pd"
GUIDE = ROOT / "config/pd-disaggregation.yaml"


def prefix_config(threshold):
    text = GUIDE.read_text()
    text = text.replace("- type: always-disagg-pd-decider",
                        f"- type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: {threshold}")
    return text.replace("prefill: always-disagg-pd-decider", "prefill: prefix-based-pd-decider")


def run(lab, fleet, configs, baselines, seed, scale, tmp):
    out = Path(tmp) / f"{fleet}-{seed}-{scale}.json"
    cmd = [str(lab), "--fleet", str(INPUTS / f"{fleet}.yaml"), "--workload",
           str(INPUTS / "workload-long-prompts.yaml"), "--seed", str(seed), "--jobs", "1", "--json", str(out),
           "--rate-scale", scale]
    for c in configs:
        cmd += ["--config", str(c)]
    if baselines:
        cmd += ["--baselines", baselines]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pd-lab.py: {' '.join(cmd)} failed:\n{done.stderr}")
    report = json.loads(out.read_text())
    return fleet, scale, report["runs"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--thresholds", default="512,2048,8192")
    parser.add_argument("--rate-scales", default="1,1.5,2", help="multiples of the workload's 3 requests/s")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    seeds = seed_range(args.seeds)
    lab = lab_binary()
    with tempfile.TemporaryDirectory() as tmp:
        configs = [GUIDE]
        for t in args.thresholds.split(","):
            path = Path(tmp) / f"prefix-{t}.yaml"
            path.write_text(prefix_config(int(t)))
            configs.append(path)
        scales = args.rate_scales.split(",")
        tasks = [("fleet-aggregated", [], "default", s, x) for x in scales for s in seeds]
        tasks += [(f, configs, "", s, x) for x in scales for f in ("fleet-2p2d", "fleet-1p3d") for s in seeds]
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(lambda t: run(lab, *t, tmp), tasks))
    rows = {}
    for fleet, scale, runs in results:
        for r in runs:
            rows.setdefault((scale, fleet, r["name"]), []).append(r)
    print("| rate (req/s) | fleet | config | SLO attainment | TTFT p90 (s) | TPOT p90 (ms) | E2E p90 (s) | completed |")
    print("|---|---|---|---|---|---|---|---|")
    for (scale, fleet, name), runs in rows.items():
        mean = lambda f: sum(f(r) for r in runs) / len(runs)
        slo = mean(lambda r: r["slo_attainment"] or 0.0)
        ttft = mean(lambda r: r["ttft_s"]["p90"])
        tpot = mean(lambda r: r["tpot_s"]["p90"]) * 1000
        e2e = mean(lambda r: r["e2e_s"]["p90"])
        done = mean(lambda r: r["completed"] / max(r["requests"], 1))
        rate = 3 * float(scale)
        print(f"| {rate:g} | {fleet.removeprefix('fleet-')} | {name} | {slo:.3f} | {ttft:.2f} | {tpot:.1f} | {e2e:.1f} | {done:.3f} |")
    print(f"\nmean over seeds {args.seeds}; command: scripts/pd-lab.py --seeds {args.seeds} "
          f"--thresholds {args.thresholds} --rate-scales {args.rate_scales}")


if __name__ == "__main__":
    main()
