#!/usr/bin/env python3
"""What one scrape of /metrics costs a real vLLM: its API server's CPU per scrape for the whole page and
for the page restricted to the families epp reads (the form epp asks for, src/telemetry/name_filter.rs),
and what scraping does to the latency of the requests it serves.

    scripts/vllm-scrape-cost.py [--scrapes 300] [--rounds 3] [--port 18190]
                                [--latency-requests 100] [--scrapers 3]

Starts one vLLM replica on CPU (scripts/vllm-server.sh; `make vllm` installs it), waits for /health, then
in interleaved rounds sends --scrapes GETs of each form over one kept-alive connection (as epp's scrape
loop does) and reads the API server's utime + stime from /proc. Prints a markdown row per form and round:
bytes per page, the server's CPU per scrape, and what that is per epp replica at the default 50 ms
interval. Then, in interleaved rounds, --latency-requests one-token completions, one after another, while
--scrapers loops (epp replicas) each scrape every 50 ms in that form, or none: the completions' latency
p50/p90/p99. Nothing else should run meanwhile.

Standard library only.
"""

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from processes import cpu_seconds  # noqa: E402

# epp's builtin vLLM mapping (src/telemetry/engines.rs): the sample names it reads, as it asks for them.
NAMES = ["vllm:cache_config_info", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
         "vllm:lora_requests_info", "vllm:num_requests_running", "vllm:num_requests_waiting"]
QUERY = "&".join("name%5B%5D=" + n.replace(":", "%3A") for n in NAMES)
FORMS = [("whole page", "/metrics"), ("restricted (epp)", "/metrics/?" + QUERY)]


def wait_health(port, deadline_s=300):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    sys.exit("vllm-scrape-cost.py: vLLM never became healthy")


def measure(port, pid, path, scrapes):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    size = 0
    before = cpu_seconds(pid)
    for _ in range(scrapes):
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            sys.exit(f"vllm-scrape-cost.py: {path} answered {response.status}")
        size = len(body)
    spent = cpu_seconds(pid) - before
    conn.close()
    return size, spent / scrapes


def scrape_every_50ms(port, path, stop):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    due = time.monotonic()
    while not stop.is_set():
        conn.request("GET", path)
        conn.getresponse().read()
        due += 0.05
        time.sleep(max(0.0, due - time.monotonic()))


def completion_latencies(port, count):
    """p50, p90 and p99 in ms of `count` one-token completions sent one after another."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"model": "smol", "prompt": "Hello there, how", "max_tokens": 1})
    latencies = []
    for _ in range(count):
        start = time.monotonic()
        conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            sys.exit(f"vllm-scrape-cost.py: a completion answered {response.status}")
        latencies.append((time.monotonic() - start) * 1000)
        time.sleep(0.02)
    latencies.sort()
    return [latencies[min(len(latencies) - 1, int(len(latencies) * q))] for q in (0.5, 0.9, 0.99)]


def latency_table(port, args):
    print(f"\n| scraping ({args.scrapers} loops at 50 ms) | round | completion p50 | p90 | p99 |")
    print("|---|---:|---:|---:|---:|")
    completion_latencies(port, 20)  # warm-up
    for round_ in range(1, args.rounds + 1):
        for name, path in [("none", None), *FORMS]:
            stop = threading.Event()
            loops = [threading.Thread(target=scrape_every_50ms, args=(port, path, stop))
                     for _ in range(args.scrapers if path else 0)]
            for loop in loops:
                loop.start()
            time.sleep(1)
            p50, p90, p99 = completion_latencies(port, args.latency_requests)
            stop.set()
            for loop in loops:
                loop.join()
            print(f"| {name} | {round_} | {p50:.1f} ms | {p90:.1f} ms | {p99:.1f} ms |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18190)
    parser.add_argument("--latency-requests", type=int, default=100)
    parser.add_argument("--scrapers", type=int, default=3)
    args = parser.parse_args()
    launcher = subprocess.Popen([ROOT / "scripts/vllm-server.sh", str(args.port), "smol"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_health(args.port)
        time.sleep(5)
        pid = launcher.pid  # vllm-server.sh execs the API server: the launcher is that process
        print("| form | round | bytes per page | vLLM API server CPU per scrape | per epp replica at 50 ms |")
        print("|---|---:|---:|---:|---:|")
        for round_ in range(1, args.rounds + 1):
            for name, path in FORMS:
                size, per_scrape = measure(args.port, pid, path, args.scrapes)
                print(f"| {name} | {round_} | {size:,} | {per_scrape * 1000:.2f} ms | "
                      f"{per_scrape * 20:.3f} core |", flush=True)
        if args.latency_requests > 0:
            latency_table(args.port, args)
    finally:
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=60)


if __name__ == "__main__":
    main()
