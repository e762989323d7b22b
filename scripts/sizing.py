#!/usr/bin/env python3
"""What epp costs under load, in the form llm-d publishes for its Go EPP (llm-d-router:docs/operations.md:
cores per request/s, peak memory, idle scrape cost at 100 simulated pods), with the protocol's floor beside it.

    scripts/sizing.py [--pods 100,1000] [--prompts 1000,8000,32000,100000] [--answers 100,1000,5000]
                      [--rate 10] [--sweep 100000x1000:5,10,20,40] [--seconds 8] [--grid-pods 100]
                      [--response-body FULL_DUPLEX_STREAMED|NONE] [--markdown FILE] [--base-port 20000]
    scripts/sizing.py --transport [--connections 10,32] [--rounds 3] [--seconds 8] [--transport-pods 4]
    scripts/sizing.py --streams 1000,5000 [--stream-tokens 100] [--stream-prompt 1000]

Per pod count: one `epp-bench backend` process serving N OpenAI backends on consecutive ports (vLLM's metric
families; each answer streams the request's max_tokens chunks, 1 ms apart), epp in static mode on all of
them (default profile, plaintext, scraping every 50 ms), `epp-noop-extproc` (routes round robin, echoes
nothing, parses nothing: what any ext_proc server pays for the protocol), and one Envoy in front of each
(deploy/envoy/envoy-full-duplex.yaml: request and response bodies streamed through the ext_proc server;
--response-body NONE keeps the answers out of it, as a gateway that needs no usage or TTFT from epp can).

First the idle cost (no traffic, scraping only). Then every cell — prompt tokens × answer tokens at
--rate on --grid-pods, and the --sweep cell at each of its rates on every pod count — runs twice,
epp then the no-op, each an open-loop Poisson run of `epp-bench run` for --seconds (in-flight answers
drain after). Per run: the ext_proc server's CPU (utime + stime from /proc) per completed request, its
cores, its peak RSS (sampled every 100 ms), TTFT p50 through Envoy, and for epp the scheduler's p50/p99
(the inference_extension_scheduler_e2e_duration_seconds bucket holding each: GIE's buckets, 100 µs upward). "net" subtracts
the idle scrape cost over the run's wall time. Every process shares this machine, so absolute figures are
this machine's; the ratios to the no-op come from the same cell, minutes apart.

--transport measures issue 22's transport criterion instead: 4 pods, closed loop at 10 and 32 connections,
~45 B, ~220 KB and ~400 KB prompts with 4-token answers and a 64-chunk streamed answer, epp and the no-op
alternating for --rounds; throughput and CPU per request (medians of the rounds), epp's ratios to the no-op,
and each round's CPU ratio (its spread).

--epp and --noop name the two binaries (default: the release builds), to measure a change given to both.

--streams holds N streamed answers at once (N connections, one request each, 4 pods), epp then the no-op:
peak RSS, RSS per stream over idle, and epp's in-flight gauges (inference_objective_running_requests,
llm_d_epp_inflight_requests), which must read 0 once every stream has ended.

Standard library only; needs `cargo build --release -p epp -p epp-bench -p epp-testkit` and `make envoy`.
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
sys.path.insert(0, str(ROOT / "scripts"))
from processes import cpu_seconds, envoy_binary, stop_all, wait_port, write_endpoints  # noqa: E402

SCHEDULER = "inference_extension_scheduler_e2e_duration_seconds_bucket"
# llm-d's published Go EPP sizing (llm-d-router:docs/operations.md): 100 simulated pods, approximate prefix
# cache, 100k-token prompts with 1k-token answers at ~99 req/s took 35-46 cores: 0.5-1 core per req/s.
LLMD_CORES_PER_RPS = 0.5


def status_kib(pid, key):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def scrape(url):
    """The text of a /metrics page."""
    return urllib.request.urlopen(url, timeout=10).read().decode()


def histogram(text):
    """The scheduler histogram's cumulative counts per upper bound, summed over label sets."""
    buckets = {}
    for match in re.finditer(rf'^{SCHEDULER}{{[^}}]*le="([^"]+)"[^}}]*}} (\S+)$', text, re.M):
        bound = float("inf") if match[1] == "+Inf" else float(match[1])
        buckets[bound] = buckets.get(bound, 0.0) + float(match[2])
    return buckets


def gauge_sum(text, name):
    """A gauge summed over its label sets."""
    return sum(float(m[1]) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def quantile(before, after, q):
    """The bucket holding the q-quantile of the observations between two scrapes, as (lower, upper) bounds:
    the buckets are GIE's (100 µs upward), too coarse to interpolate within honestly."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    lower = 0.0
    for bound, cumulative in zip(bounds, counts):
        if cumulative >= q * counts[-1]:
            return lower, bound
        lower = bound
    return lower, float("inf")


class Fleet:
    """Backends, epp, the no-op and their Envoys for one pod count."""

    def __init__(self, pods, args, work):
        self.procs, self.work, self.pods, self.epp_binary = [], work, pods, args.epp
        self.noop_binary = args.noop
        self.response_body = args.response_body
        try:
            self.launch(args.base_port)
        except BaseException:
            self.stop()  # nothing outlives a failed start (sys.exit included)
            raise

    def launch(self, base):
        ports = [base + 100 + i for i in range(self.pods)]
        self.start("backends", [TARGET / "epp-bench", "backend", "--ports", ",".join(map(str, ports)),
                                "--id", "sizing", "--model", "sizing-model", "--chunks", "1",
                                "--chunk-delay-ms", "1", "--chunks-from-max-tokens"], ports[-1], timeout_s=120)
        endpoints = write_endpoints(self.work / "endpoints.yaml", ports, "pod")
        self.epp = self.start("epp", [self.epp_binary, "--grpc-port", str(base), "--grpc-health-port",
                                      str(base + 1), "--metrics-port", str(base + 2), "--endpoints-file",
                                      endpoints, "--secure-serving=false", "--log-level", "warn"], base)
        self.metrics_url = f"http://127.0.0.1:{base + 2}/metrics"
        self.noop = self.start("noop", [self.noop_binary, "--port", str(base + 10), "--endpoints",
                                        ",".join(f"127.0.0.1:{p}" for p in ports)], base + 10)
        envoy = envoy_binary(ROOT)
        for name, extproc, listen in (("epp", base, base + 20), ("noop", base + 10, base + 21)):
            config = self.work / f"envoy-{name}.yaml"
            env = dict(os.environ, LISTEN_PORT=str(listen), ADMIN_PORT=str(listen + 10),
                       EXTPROC_PORT=str(extproc), EXTPROC_TRANSPORT="raw_buffer.v3.RawBuffer",
                       RESPONSE_BODY_MODE=self.response_body)
            config.write_text(subprocess.run([ROOT / "scripts/render-envoy-config.sh",
                                              "deploy/envoy/envoy-full-duplex.yaml"], cwd=ROOT, env=env,
                                             check=True, capture_output=True, text=True).stdout)
            self.start(f"envoy-{name}", [envoy, "-c", config, "--base-id", str(listen), "-l", "warning"], listen)
        self.urls = {"epp": f"http://127.0.0.1:{base + 20}", "noop": f"http://127.0.0.1:{base + 21}"}
        time.sleep(2)  # epp scrapes every backend before the first request

    def start(self, name, command, port, timeout_s=60.0):
        log = self.work / f"{name}-{self.pods}.log"
        proc = subprocess.Popen([str(c) for c in command], stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        wait_port(port, proc, log, timeout_s=timeout_s)
        return proc

    def idle_cores(self, seconds):
        c0, t0 = cpu_seconds(self.epp.pid), time.monotonic()
        time.sleep(seconds)
        return (cpu_seconds(self.epp.pid) - c0) / (time.monotonic() - t0)

    def run(self, target, prompt, answer, load, seconds):
        """One `epp-bench run` through `target`'s Envoy; `load` is its load flags (--poisson R or
        --concurrency C)."""
        server = self.epp if target == "epp" else self.noop
        report = self.work / f"run-{target}.json"
        sched0 = histogram(scrape(self.metrics_url)) if target == "epp" else None
        cpu0, t0, peak = cpu_seconds(server.pid), time.monotonic(), 0
        bench = subprocess.Popen([str(TARGET / "epp-bench"), "run", "--url", self.urls[target], "--model",
                                  "sizing-model", *load, "--duration", f"{seconds:g}s",
                                  "--prompt-tokens", str(prompt), "--output-tokens", str(answer), "--quiet",
                                  "--max-error-rate", "0.01", "--json", str(report)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while bench.poll() is None:
            peak = max(peak, status_kib(server.pid, "VmRSS"))
            time.sleep(0.1)
        wall, cpu = time.monotonic() - t0, cpu_seconds(server.pid) - cpu0
        if bench.returncode != 0:
            sys.exit(f"sizing.py: epp-bench run against {target} failed:\n{bench.stderr.read()[-2000:]}")
        summary = json.loads(report.read_text())
        row = {"ok": summary["ok"], "wall": wall, "cpu": cpu, "peak_mib": peak / 1024,
               "ttft_p50": (summary.get("ttft_ms") or {}).get("p50"), "bytes": summary["mean_request_bytes"]}
        if sched0 is not None:
            sched1 = histogram(scrape(self.metrics_url))
            row["sched"] = (quantile(sched0, sched1, 0.5), quantile(sched0, sched1, 0.99))
        return row

    def stop(self):
        stop_all(self.procs)


def bucket(bounds):
    """A quantile's bucket: "< 100 µs", "100–200 µs", "> 100 ms"."""
    if bounds is None:
        return "–"
    lower, upper = bounds
    if upper == float("inf"):
        return f"> {lower * 1e3:g} ms"
    unit, scale = ("µs", 1e6) if upper < 1e-3 else ("ms", 1e3)
    return f"< {upper * scale:g} {unit}" if lower == 0 else f"{lower * scale:g}–{upper * scale:g} {unit}"


def ms(value, sign=""):
    return "–" if value is None else f"{value:{sign}.1f} ms"


def table_row(pods, prompt, answer, rate, epp, noop, idle):
    """One markdown row comparing epp with the no-op in one cell."""
    per_req = epp["cpu"] / max(epp["ok"], 1)
    net = max(epp["cpu"] - idle * epp["wall"], 0.0) / max(epp["ok"], 1)
    noop_per_req = noop["cpu"] / max(noop["ok"], 1)
    added = None if epp["ttft_p50"] is None or noop["ttft_p50"] is None else epp["ttft_p50"] - noop["ttft_p50"]
    p50, p99 = epp["sched"]
    return (f"| {pods} | {prompt:,} ({epp['bytes'] / 1024:.0f} KiB) | {answer:,} | {rate:g} | "
            f"{epp['ok']} | {epp['cpu'] / epp['wall']:.3f} | {per_req * 1e3:.2f} ms | "
            f"{net * 1e3:.2f} ms | {noop_per_req * 1e3:.2f} ms | {net / max(noop_per_req, 1e-9):.2f}× | "
            f"{LLMD_CORES_PER_RPS / max(per_req, 1e-9):,.0f}× | {epp['peak_mib']:.0f} MiB | "
            f"{noop['peak_mib']:.0f} MiB | {bucket(p50)} / {bucket(p99)} | "
            f"{ms(epp['ttft_p50'])} | {ms(added, '+')} |")


HEADER = ("| pods | prompt tokens (body) | answer tokens | offered req/s | requests | epp cores | "
          "epp CPU/request | net of idle | no-op CPU/request | net ÷ no-op | below llm-d's 0.5 core per req/s | "
          "epp peak RSS | no-op peak RSS | scheduler p50 / p99 | TTFT p50 via epp | added vs no-op |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def cells(args, pods):
    """(prompt, answer, rate) for one pod count: the grid on --grid-pods, then the sweep cell's rates."""
    out = []
    if pods in args.grid_pods:
        out += [(p, a, args.rate) for p in args.prompts for a in args.answers]
    cell, rates = args.sweep.split(":")
    prompt, answer = (int(x) for x in cell.split("x"))
    out += [(prompt, answer, float(r)) for r in rates.split(",") if (prompt, answer, float(r)) not in out]
    return out


# The transport criterion's cases (issue 22): (label, prompt tokens, answer tokens); every answer streams.
TRANSPORT_CASES = [("~45 B prompt", 8, 4), ("~220 KB prompt", 36000, 4), ("~400 KB prompt", 66000, 4),
                   ("64-chunk answer", 8, 64)]


def transport(args, work):
    """Closed loop at each concurrency, epp and the no-op alternating for --rounds: throughput and CPU per
    request, each the median of its rounds, and epp's ratio to the no-op."""
    lines = ["| case | connections | epp req/s | no-op req/s | throughput ÷ no-op | epp CPU/request | "
             "no-op CPU/request | CPU ÷ no-op | each round's CPU ÷ no-op |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    print("\n".join(lines), flush=True)
    fleet = Fleet(args.transport_pods, args, work)
    try:
        for label, prompt, answer in TRANSPORT_CASES:
            for connections in args.connections:
                rounds = {"epp": [], "noop": []}
                for _ in range(args.rounds):
                    for target in rounds:
                        row = fleet.run(target, prompt, answer, ["--concurrency", str(connections)], args.seconds)
                        rounds[target].append((row["ok"] / row["wall"], row["cpu"] / max(row["ok"], 1)))
                (epp_rps, epp_cpu), (noop_rps, noop_cpu) = (
                    (statistics.median(r for r, _ in v), statistics.median(c for _, c in v)) for v in rounds.values())
                # Each round's ratio (epp's run and the no-op's right after it) shows the rounds' spread,
                # which the medians hide.
                paired = ", ".join(f"{e / n:.2f}" for (_, e), (_, n) in zip(rounds["epp"], rounds["noop"]))
                lines.append(f"| {label} | {connections} | {epp_rps:.0f} | {noop_rps:.0f} | {epp_rps / noop_rps:.2f}× | "
                             f"{epp_cpu * 1e6:.0f} µs | {noop_cpu * 1e6:.0f} µs | {epp_cpu / noop_cpu:.2f}× | {paired} |")
                print(lines[-1], flush=True)
    finally:
        fleet.stop()
    return "\n".join(lines) + "\n"


IN_FLIGHT_GAUGES = ("inference_objective_running_requests", "llm_d_epp_inflight_requests")


def streams(args, work):
    """--streams: N streamed answers held at once (closed loop, N connections, one request each), epp then
    the no-op: peak RSS, and epp's in-flight gauges once every stream has ended."""
    lines = ["| concurrent streams | answer tokens | epp peak RSS | no-op peak RSS | epp RSS per stream over idle | "
             "epp in-flight gauges after | completed (epp, no-op) |", "|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    fleet = Fleet(args.transport_pods, args, work)
    try:
        idle_mib = status_kib(fleet.epp.pid, "VmRSS") / 1024
        for count in args.streams:
            load = ["--concurrency", str(count), "--requests", str(count)]
            epp = fleet.run("epp", args.stream_prompt, args.stream_tokens, load, 3600)
            noop = fleet.run("noop", args.stream_prompt, args.stream_tokens, load, 3600)
            page = scrape(fleet.metrics_url)
            after = " / ".join(f"{gauge_sum(page, g):g}" for g in IN_FLIGHT_GAUGES)
            per_stream = (epp["peak_mib"] - idle_mib) * 1024 / count
            lines.append(f"| {count:,} | {args.stream_tokens:,} | {epp['peak_mib']:.0f} MiB | {noop['peak_mib']:.0f} MiB | "
                         f"{per_stream:.1f} KiB | {after} | {epp['ok']:,}, {noop['ok']:,} |")
            print(lines[-1], flush=True)
    finally:
        fleet.stop()
    return f"epp idle RSS before: {idle_mib:.0f} MiB\n\n" + "\n".join(lines) + "\n"


def main():
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=ints, default=[100, 1000])
    parser.add_argument("--grid-pods", type=ints, default=[100])
    parser.add_argument("--prompts", type=ints, default=[1000, 8000, 32000, 100000])
    parser.add_argument("--answers", type=ints, default=[100, 1000, 5000])
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--sweep", default="100000x1000:5,10,20,40")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--epp", default=str(TARGET / "epp"), help="the epp binary (default: the release build)")
    parser.add_argument("--noop", default=str(TARGET / "epp-noop-extproc"),
                        help="the no-op ext_proc binary (default: the release build)")
    parser.add_argument("--transport", action="store_true",
                        help="instead: the transport criterion, closed loop, epp vs the no-op (--rounds, --connections)")
    parser.add_argument("--transport-pods", type=int, default=4)
    parser.add_argument("--connections", type=ints, default=[10, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=ints, help="instead: hold this many streamed answers at once (e.g. 1000,5000)")
    parser.add_argument("--stream-tokens", type=int, default=100)
    parser.add_argument("--stream-prompt", type=int, default=1000)
    parser.add_argument("--base-port", type=int, default=20000)
    parser.add_argument("--response-body", choices=["FULL_DUPLEX_STREAMED", "NONE"], default="FULL_DUPLEX_STREAMED",
                        help="the Envoys' response_body_mode: NONE keeps the answers out of the ext_proc server")
    args = parser.parse_args()
    for binary in ("epp", "epp-bench", "epp-noop-extproc"):
        if not (TARGET / binary).exists():
            sys.exit(f"sizing.py: {TARGET / binary} missing (cargo build --release -p epp -p epp-bench -p epp-testkit)")
    last_port = args.base_port + 100 + max(args.pods + [args.transport_pods])
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    if last_port >= int(ephemeral[0]) and args.base_port <= int(ephemeral[1]):
        sys.exit(f"sizing.py: ports {args.base_port}-{last_port} overlap the ephemeral range {'-'.join(ephemeral)}, "
                 "where the clients' own sockets would take them; choose another --base-port")
    if args.transport or args.streams:
        with tempfile.TemporaryDirectory(prefix="epp-sizing-") as tmp:
            text = transport(args, Path(tmp)) if args.transport else streams(args, Path(tmp))
        if args.markdown:
            args.markdown.write_text(text)
        return
    lines = [HEADER]
    idle_rows = ["| pods | epp idle cores (scrape only, 50 ms) | epp RSS idle |", "|---:|---:|---:|"]
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="epp-sizing-") as tmp:
        for pods in args.pods:
            fleet = Fleet(pods, args, Path(tmp))
            try:
                idle = fleet.idle_cores(args.idle_seconds)
                idle_rows.append(f"| {pods} | {idle:.3f} | {status_kib(fleet.epp.pid, 'VmRSS') / 1024:.0f} MiB |")
                print(idle_rows[-1], flush=True)
                for prompt, answer, rate in cells(args, pods):
                    load = ["--poisson", f"{rate:g}"]
                    epp = fleet.run("epp", prompt, answer, load, args.seconds)
                    noop = fleet.run("noop", prompt, answer, load, args.seconds)
                    lines.append(table_row(pods, prompt, answer, rate, epp, noop, idle))
                    print(lines[-1], flush=True)
            finally:
                fleet.stop()
    text = "\n".join(idle_rows) + "\n\n" + "\n".join(lines) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
