#!/usr/bin/env python3
"""Live vs lab on scenarios of the suite: does the lab rank the recommended profile and the default the
way a live run does, on a scenario's own fleet and traffic?

    scripts/scenario-live.py SCENARIO [SCENARIO ...] [--rounds 3 | --live-seeds 1002,1004] [--duration 60]
                             [--time-scale 4] [--lab-seeds 1-10] [--base-port 21000]

Live, per round and setup: a fresh epp-sim fleet with the scenario's replicas (profiles and labels, one
process, `--time-scale`), epp (its default profile, or config/predicted-latency-epp.yaml with log-mean
models: the recommended profile) on an endpoints file carrying the replicas' labels, Envoy full duplex in
front, and `epp-bench run --lab-replay SCENARIO`, which sends the lab's own plan for the scenario (the
same bodies at the same simulated times; seed 1000 + round, or each of --live-seeds, the same for both
setups of a round). Lab: `epp-lab --scenario` with the same two columns on --lab-seeds, and on the live
seeds themselves (the same plans, so a paired check of the lab's absolute figures). Both sides report SLO
attainment, TTFT p90 and E2E p90 (live latencies in simulated time); the rankings are printed side by
side, with ties within TOLERANCE (attainment within 1 point, latencies within 5 %).

Why --live-seeds: at a scenario's calibrated rate one seed's plan can leave the pool unsaturated while
another's drives it into overload (chat-3fast-1slow: the default's attainment is 100% on seed 1001 and
57% on 1002, in the lab and live alike), so a full-length check at the operating point names seeds whose
plans the lab finds overloaded.

Standard library only; needs `cargo build --release --workspace --bins` and `make envoy`.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # epp_lab::workload::DEFAULT_MODEL: the plan's model literal
RECOMMENDED = "config/predicted-latency-epp.yaml"
TOLERANCE = {"attainment": 0.01, "ttft": 0.05, "e2e": 0.05}
sys.path.insert(0, str(ROOT / "scripts"))
from processes import envoy_binary, stop_all, wait_port  # noqa: E402
from scenarios import lab_binary, seed_range  # noqa: E402


def replicas(scenario):
    """(profile, labels) per replica, from the scenario's flow-style fleet lines."""
    out = []
    for m in re.finditer(r"-\s*\{profile:\s*([\w.-]+),\s*count:\s*(\d+)(?:,\s*labels:\s*\{([^}]*)\})?", scenario.read_text()):
        labels = dict(kv.split(":", 1) for kv in (m.group(3) or "").split(",") if ":" in kv)
        out += [(m.group(1), {k.strip(): v.strip() for k, v in labels.items()})] * int(m.group(2))
    if not out:
        sys.exit(f"scenario-live.py: no replicas found in {scenario}")
    return out


class Stack:
    """epp-sim fleet + epp + Envoy for one live run; stopped on exit."""

    def __init__(self, work, fleet, setup, args, seed):
        self.procs, port = [], args.base_port
        sim_ports = [port + 1 + i for i in range(len(fleet))]
        self.start(work / "sim.log", [TARGET / "epp-sim", "--port", sim_ports[0], "--profiles",
                                      ",".join(p for p, _ in fleet), "--time-scale", args.time_scale,
                                      "--seed", seed, "--model", MODEL], sim_ports)
        lines = ["endpoints:"]
        for i, (_, labels) in enumerate(fleet):
            label_text = ", ".join(f"{k}: {v}" for k, v in labels.items())
            lines.append(f'  - {{name: sim-{i}, address: 127.0.0.1, port: "{sim_ports[i]}", labels: {{{label_text}}}}}')
        (work / "endpoints.yaml").write_text("\n".join(lines) + "\n")
        scrape_ms = max(1, round(50 / args.time_scale))
        config = ["--config-file", RECOMMENDED, "--latency-objective-type", "log-mean"] if setup == "recommended" else []
        epp_port = port + 90
        self.start(work / "epp.log", [TARGET / "epp", "--grpc-port", epp_port, "--grpc-health-port", epp_port + 1,
                                      "--metrics-port", epp_port + 2, "--endpoints-file", work / "endpoints.yaml",
                                      "--secure-serving=false", "--refresh-metrics-interval", f"{scrape_ms}ms",
                                      "--log-level", "warn", *config], [epp_port])
        self.listen = port + 95
        env = dict(os.environ, LISTEN_PORT=str(self.listen), ADMIN_PORT=str(port + 96), EXTPROC_PORT=str(epp_port),
                   HEALTH_PORT=str(epp_port + 1), EXTPROC_TRANSPORT="raw_buffer.v3.RawBuffer")
        rendered = subprocess.run(["scripts/render-envoy-config.sh", "deploy/envoy/envoy-full-duplex.yaml"], cwd=ROOT,
                                  env=env, capture_output=True, text=True, check=True).stdout
        (work / "envoy.yaml").write_text(rendered)
        time.sleep(0.5)  # epp scrapes every replica before the first request
        self.start(work / "envoy.log", [envoy_binary(ROOT), "-c", work / "envoy.yaml", "--base-id", str(port),
                                        "-l", "warning", "--concurrency", "1"], [self.listen])

    def start(self, log, cmd, ports):
        proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        for port in ports:
            wait_port(port, proc, log)

    def stop(self):
        stop_all(self.procs)


def live_run(scenario, fleet, setup, seed, args):
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stack = Stack(work, fleet, setup, args, seed)
        try:
            out = work / "bench.json"
            cmd = [TARGET / "epp-bench", "run", "--url", f"http://127.0.0.1:{stack.listen}", "--lab-replay", scenario,
                   "--seed", seed, "--duration", f"{args.duration}s", "--time-scale", args.time_scale,
                   "--timeout", "600s", "--quiet", "--json", out]
            subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, capture_output=True)
            report = json.loads(out.read_text())
        finally:
            stack.stop()
    scale = args.time_scale
    return {"attainment": report["slo"]["fraction"], "ttft": report["ttft_ms"]["p90"] * scale / 1000,
            "e2e": report["e2e_ms"]["p90"] * scale / 1000, "errors": report["requests"] - report["ok"]}


def lab_runs(scenario, seeds, args):
    out = {"default": [], "recommended": []}
    for seed in seeds:
        for setup, flag, value, objective in [("default", "--baselines", "default", "mean"),
                                              ("recommended", "--config", RECOMMENDED, "log-mean")]:
            with tempfile.TemporaryDirectory() as tmp:
                report = Path(tmp) / "lab.json"
                cmd = [lab_binary(), "--scenario", scenario, "--seed", seed, "--duration", args.duration, "--jobs", "1",
                       "--json", report, "--latency-objective-type", objective, flag, value]
                subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, capture_output=True)
                run = json.loads(report.read_text())["runs"][0]
            out[setup].append({"attainment": run["slo_attainment"], "ttft": run["ttft_s"]["p90"],
                               "e2e": run["e2e_s"]["p90"], "errors": 0})
    return out


def mean_of(runs):
    return {k: statistics.mean(r[k] for r in runs) for k in ("attainment", "ttft", "e2e", "errors")}


def order(a, b, metric):
    """-1: the recommended profile is better, 1: worse, 0: a tie within tolerance."""
    x, y = a[metric], b[metric]
    tie = abs(x - y) <= (TOLERANCE[metric] if metric == "attainment" else TOLERANCE[metric] * max(x, y))
    if tie:
        return 0
    better = x > y if metric == "attainment" else x < y
    return -1 if better else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3, help="live seeds 1001..1000+ROUNDS")
    parser.add_argument("--live-seeds", help="comma-separated live seeds (instead of --rounds)")
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds of arrivals per run")
    parser.add_argument("--time-scale", type=float, default=4.0)
    parser.add_argument("--lab-seeds", default="1-10")
    parser.add_argument("--base-port", type=int, default=21000)
    args = parser.parse_args()
    live_seeds = [int(s) for s in args.live_seeds.split(",")] if args.live_seeds else \
        [1000 + rnd for rnd in range(1, args.rounds + 1)]
    for scenario in args.scenarios:
        fleet = replicas(scenario)
        live = {"default": [], "recommended": []}
        for seed in live_seeds:
            for setup in live:
                live[setup].append(live_run(scenario, fleet, setup, seed, args))
                print(f"{scenario.stem} seed {seed} {setup}: {live[setup][-1]}", file=sys.stderr)
        sides = {"live": live, "lab (same seeds)": lab_runs(scenario, live_seeds, args),
                 f"lab (seeds {args.lab_seeds})": lab_runs(scenario, seed_range(args.lab_seeds), args)}
        report(scenario, fleet, live_seeds, sides, args)


def report(scenario, fleet, live_seeds, sides, args):
    words = {-1: "recommended better", 0: "tie", 1: "default better"}
    names = list(sides)
    print(f"\n### {scenario.stem} ({len(fleet)} replicas; live seeds {','.join(map(str, live_seeds))} at time "
          f"scale {args.time_scale:g}; {args.duration:g} s simulated each)\n")
    print("| setup | side | attainment (per seed) | TTFT p90 s | E2E p90 s | live errors |\n|---|---|---:|---:|---:|---:|")
    means = {side: {s: mean_of(runs[s]) for s in runs} for side, runs in sides.items()}
    for setup in ("default", "recommended"):
        for side in names:
            m, runs = means[side][setup], sides[side][setup]
            shown = ", ".join(f"{r['attainment'] * 100:.1f}" for r in runs)
            per_seed = f" ({shown})" if len(runs) <= 4 else ""
            print(f"| {setup} | {side} | {m['attainment'] * 100:.1f}%{per_seed} | {m['ttft']:.2f} | {m['e2e']:.2f} "
                  f"| {m['errors']:.0f} |")
    print(f"\n| by | {' | '.join(names)} | verdict (live vs each lab) |\n|---|---|---|---|---|")
    for metric in ("attainment", "ttft", "e2e"):
        ranks = [order(means[side]["recommended"], means[side]["default"], metric) for side in names]
        verdicts = ["agree" if ranks[0] == r else ("**disagree**" if ranks[0] * r < 0 else "agree within tolerance")
                    for r in ranks[1:]]
        print(f"| {metric} | {' | '.join(words[r] for r in ranks)} | {'; '.join(verdicts)} |")


if __name__ == "__main__":
    main()
