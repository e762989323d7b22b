"""Starting epp as the rendered pod would (ports 0, paths moved to a temp dir), until "epp serving", then
stopping it with SIGTERM. Without a cluster, discovery and leader election retry in the background (epp
stays NOT_SERVING): that does not stop it serving its ports."""

import os
import signal
import subprocess
import time
from pathlib import Path

from .common import NAMESPACE, RELEASE, ROOT, expect


def find_epp():
    if os.environ.get("EPP_BIN"):
        return Path(os.environ["EPP_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    return target / "debug" / "epp"


def start_epp(epp_bin, name, args, config_text, plain_env, workdir):
    """Starts epp with the rendered arguments, config and plain env (the mapped LATENCY_* settings among
    them), waits for "epp serving", stops it."""
    case_dir = Path(workdir) / name.replace(" ", "-").replace(",", "")
    (case_dir / "config").mkdir(parents=True)
    (case_dir / "config" / "config.yaml").write_text(config_text)
    argv = [str(epp_bin)]
    for flag, value in args.items():
        if flag in ("--grpc-port", "--grpc-health-port", "--metrics-port"):
            value = "0"
        elif flag == "--config-file":
            value = str(case_dir / "config" / "config.yaml")
        elif flag == "--latency-model-dir":
            (case_dir / "models").mkdir()
            value = str(case_dir / "models")
        elif flag in ("--cert-path", "--metrics-cert-dir", "--grpc-client-ca-file"):
            # The mounted Secret: a self-signed pair (its certificate doubles as the client CA).
            tls_dir = case_dir / flag.lstrip("-")
            tls_dir.mkdir()
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                            "-subj", "/CN=epp", "-keyout", str(tls_dir / "tls.key"),
                            "-out", str(tls_dir / "tls.crt")], check=True, capture_output=True)
            value = str(tls_dir / "tls.crt") if flag == "--grpc-client-ca-file" else str(tls_dir)
        argv.append(f"{flag}={value}")
    # The host's own LATENCY_* variables would change what epp is started with: only the pod's count.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATENCY_")}
    env.update(plain_env, NAMESPACE=NAMESPACE, POD_NAME=f"{RELEASE}-0", NO_COLOR="1")
    log_path = case_dir / "epp.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 30
            while "epp serving" not in log_path.read_text():
                expect(proc.poll() is None, f"epp exited ({proc.returncode}):\n{log_path.read_text()[-2000:]}")
                expect(time.monotonic() < deadline, "epp did not start in 30 s")
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            expect(proc.wait(timeout=30) == 0, f"epp exited {proc.returncode} on SIGTERM")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
