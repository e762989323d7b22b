#!/usr/bin/env python3
"""What epp costs with no traffic: scraping N model servers' /metrics every 50 ms (issue 22's idle figure,
the counterpart of llm-d's "7.5 cores idle just scraping 100 pods", llm-d-router:docs/operations.md).

    scripts/idle-scrape.py [--pods 100,1000] [--interval 50ms] [--seconds 20] [--rounds 1]
                           [--epp PATH ...] [--base-port 30000] [--pin]

Per pod count: one epp-sim process serving N replicas on consecutive ports (vLLM's metric families),
epp in static mode on an endpoints file naming all of them (its default profile, plaintext), a settle of
5 s, then epp's CPU time (utime + stime from /proc/<pid>/stat) and resident memory over --seconds. Prints
one markdown row per pod count: epp's cores, cores per 100 pods, µs of CPU per scrape at the nominal rate
(N / interval), epp's RSS, and epp-sim's cores (it shares the machine, so a saturated simulator slows the
scrapes it answers: its column says when). Several --epp binaries (e.g. before and after a change) are
measured in interleaved rounds, one row each per round.

Standard library only; needs `cargo build --release -p epp -p epp-sim`.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
sys.path.insert(0, str(ROOT / "scripts"))
from processes import cpu_seconds, stop_all, wait_port, write_endpoints  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib(pid):
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def parse_ms(text):
    return float(text[:-2]) if text.endswith("ms") else float(text.rstrip("s")) * 1000


def measure(binary, pods, args, work):
    procs = []
    try:
        sim_log = work / f"sim-{pods}.log"
        pin = (lambda cpu: ["taskset", "-c", cpu]) if args.pin else (lambda cpu: [])
        sim = subprocess.Popen([*pin("1"), TARGET / "epp-sim", "--port", str(args.base_port), "--replicas", str(pods)],
                               stdout=open(sim_log, "w"), stderr=subprocess.STDOUT)
        procs.append(sim)
        wait_port(args.base_port + pods - 1, sim, sim_log, timeout_s=120)
        endpoints = write_endpoints(work / f"endpoints-{pods}.yaml", range(args.base_port, args.base_port + pods), "sim")
        epp_port = args.base_port - 10
        epp_log = work / f"epp-{pods}.log"
        epp = subprocess.Popen([*pin("0"), binary, "--grpc-port", str(epp_port), "--grpc-health-port", str(epp_port + 1),
                                "--metrics-port", str(epp_port + 2), "--endpoints-file", endpoints,
                                "--secure-serving=false", "--refresh-metrics-interval", args.interval,
                                "--log-level", "warn"], stdout=open(epp_log, "w"), stderr=subprocess.STDOUT)
        procs.append(epp)
        wait_port(epp_port, epp, epp_log)
        time.sleep(5)
        epp0, sim0, t0 = cpu_seconds(epp.pid), cpu_seconds(sim.pid), time.monotonic()
        time.sleep(args.seconds)
        epp1, sim1, t1 = cpu_seconds(epp.pid), cpu_seconds(sim.pid), time.monotonic()
        rss = rss_mib(epp.pid)
        if epp.poll() is not None or sim.poll() is not None:
            sys.exit(f"idle-scrape.py: a process exited during the run; see {work}")
        cores = (epp1 - epp0) / (t1 - t0)
        sim_cores = (sim1 - sim0) / (t1 - t0)
        scrapes_per_s = pods * 1000 / parse_ms(args.interval)
        return cores, sim_cores, rss, cores / scrapes_per_s * 1e6
    finally:
        stop_all(procs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="100,1000")
    parser.add_argument("--interval", default="50ms")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--epp", action="append", help="epp binary (repeatable; default target/release/epp)")
    parser.add_argument("--base-port", type=int, default=30000)
    parser.add_argument("--pin", action="store_true",
                        help="epp on CPU 0 and epp-sim on CPU 1 (taskset), so the simulator's work does not "
                             "share epp's core")
    args = parser.parse_args()
    binaries = args.epp or [str(TARGET / "epp")]
    for binary in ("epp", "epp-sim"):
        if not (TARGET / binary).exists():
            sys.exit(f"idle-scrape.py: {TARGET / binary} missing (cargo build --release -p epp -p epp-sim)")
    print("| epp | pods | scrape interval | epp cores | cores per 100 pods | epp CPU per scrape | epp RSS | epp-sim cores |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="epp-idle-") as tmp:
        for pods, _, binary in ((int(p), r, b) for p in args.pods.split(",") for r in range(args.rounds)
                                for b in binaries):
            cores, sim_cores, rss, per_scrape = measure(binary, pods, args, Path(tmp))
            print(f"| {binary} | {pods} | {args.interval} | {cores:.3f} | {cores / pods * 100:.3f} | {per_scrape:.1f} µs "
                  f"| {rss:.0f} MiB | {sim_cores:.2f} |", flush=True)


if __name__ == "__main__":
    main()
