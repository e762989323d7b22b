#!/usr/bin/env python3
"""What one scrape of /metrics costs a real vLLM: its API server's CPU per scrape for the whole page and
for the page restricted to the families epp reads (the form epp asks for, src/telemetry/name_filter.rs).

    scripts/vllm-scrape-cost.py [--scrapes 300] [--rounds 3] [--port 18190]

Starts one vLLM replica on CPU (scripts/vllm-server.sh; `make vllm` installs it), waits for /health, then
in interleaved rounds sends --scrapes GETs of each form over one kept-alive connection (as epp's scrape
loop does) and reads the API server's utime + stime from /proc. Prints a markdown row per form and round:
bytes per page, the server's CPU per scrape, and what that is per epp replica at the default 50 ms
interval. Nothing else should run meanwhile.

Standard library only.
"""

import argparse
import http.client
import os
import signal
import subprocess
import sys
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


def api_server_pid(launcher):
    """The python process serving HTTP: vllm-server.sh execs it, so it is the launcher itself."""
    return launcher.pid


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18190)
    args = parser.parse_args()
    launcher = subprocess.Popen([ROOT / "scripts/vllm-server.sh", str(args.port), "smol"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_health(args.port)
        time.sleep(5)
        pid = api_server_pid(launcher)
        print("| form | round | bytes per page | vLLM API server CPU per scrape | per epp replica at 50 ms |")
        print("|---|---:|---:|---:|---:|")
        for round_ in range(1, args.rounds + 1):
            for name, path in FORMS:
                size, per_scrape = measure(args.port, pid, path, args.scrapes)
                print(f"| {name} | {round_} | {size:,} | {per_scrape * 1000:.2f} ms | "
                      f"{per_scrape * 20:.3f} core |", flush=True)
    finally:
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=60)


if __name__ == "__main__":
    main()
