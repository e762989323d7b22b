"""Paths, the release, and what the chart is checked against: epp's flags and environment (clap's own
metadata, through `epp-knobs`), its gRPC health services, the API calls it makes
(deploy/helm/epp/api-calls.yaml)."""

import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "deploy" / "helm" / "epp"
CHECK_DIR = ROOT / "deploy" / "helm" / "check"
RELEASE, NAMESPACE = "epp", "llm"
# The chart's kubeVersion floor (gRPC probes are GA in 1.27) and the newest schemas kubernetes-validate has.
KUBE_VERSIONS = ["1.27.0", kubernetes_validate.utils.latest_version()]
# The one list of the API calls epp makes, by feature (the chart's Role is built from it).
API_CALLS = yaml.safe_load((CHART / "api-calls.yaml").read_text())
# Where the chart mounts the latency predictor's models (--latency-model-dir).
MODEL_DIR = "/models"
# The training-server settings (latencyPredictor.trainingServer.config) epp reads under the same names
# (src/cli/predictor.rs); the chart sets them as env on the epp container.
PREDICTOR_ENV = ["LATENCY_RETRAINING_INTERVAL_SEC", "LATENCY_MIN_SAMPLES_FOR_RETRAIN",
                 "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET", "LATENCY_OBJECTIVE_TYPE", "LATENCY_QUANTILE_ALPHA"]


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def runs_predictor(config_text):
    """Whether a config runs the latency predictor: one of its plugins is a predicted-latency-producer."""
    plugins = (yaml.safe_load(config_text) or {}).get("plugins") or []
    return any(isinstance(p, dict) and p.get("type") == "predicted-latency-producer" for p in plugins)


def _knobs():
    """epp's flags and environment as clap defines them: the JSON of `epp-knobs` (crates/testkit). Always
    through `cargo run`, which rebuilds it when src/cli changed: a binary left over from before a flag
    was added would check the chart against stale flags."""
    argv = ["cargo", "run", "-q", "-p", "epp-testkit", "--bin", "epp-knobs"]
    out = subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def health_services():
    """The gRPC health service names epp answers (src/extproc/grpc_health.rs)."""
    source = (ROOT / "src" / "extproc" / "grpc_health.rs").read_text()
    return set(re.findall(r'"([a-z.0-9_]*)"', source))


def parse_duration_seconds(text):
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"([0-9.]+)(ns|us|ms|s|m|h)", text)
    expect(parts and "".join(n + u for n, u in parts) == text, f"unparsable duration {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


KNOBS = _knobs()
# Every flag epp takes (long names without "--"), and every environment variable it reads.
KNOWN_FLAGS = {flag["long"] for flag in KNOBS["flags"]}
KNOWN_ENV = {flag["env"] for flag in KNOBS["flags"] if flag["env"]} | set(KNOBS["other_environment"])
# The training-server settings the chart maps must be ones epp reads (as a flag's environment variable).
_unread = [name for name in PREDICTOR_ENV if name not in KNOWN_ENV]
if _unread:
    raise CheckFailed(f"the chart maps training-server settings epp does not read: {_unread}")
HEALTH_SERVICES = health_services()
