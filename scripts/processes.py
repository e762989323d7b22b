"""What the scripts that start epp, epp-sim and Envoy share. Standard library only."""

import socket
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
