"""Paths, the release, and what the chart is checked against: epp's flags (src/cli.rs and the structs it
flattens), its gRPC health services, the API calls it makes (deploy/helm/epp/api-calls.yaml)."""

import re
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


def _struct_body(sources, name):
    for source in sources:
        start = source.find(f"pub struct {name} {{")
        if start >= 0:
            return source[start:source.index("\n}\n", start)]
    raise CheckFailed(f"no `pub struct {name}` in src/cli.rs or src/cli/")


def cli_flags():
    """Every flag epp takes: the fields of `struct Cli` in src/cli.rs and of the structs it flattens
    (src/cli/*.rs), kebab-cased as clap does."""
    cli = ROOT / "src" / "cli.rs"
    sources = [cli.read_text()] + [p.read_text() for p in sorted((ROOT / "src" / "cli").glob("*.rs"))]
    flags, pending = set(), ["Cli"]
    while pending:
        body = _struct_body(sources, pending.pop())
        for flatten, name, ty in re.findall(r"(#\[command\(flatten\)\]\s*)?^\s*pub (\w+): ([\w:]+)", body, re.M):
            if flatten:
                pending.append(ty.split("::")[-1])
            else:
                flags.add(name.replace("_", "-"))
    return flags


def health_services():
    """The gRPC health service names epp answers (src/extproc/health.rs)."""
    source = (ROOT / "src" / "extproc" / "health.rs").read_text()
    return set(re.findall(r'"([a-z.0-9_]*)"', source))


def parse_duration_seconds(text):
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"([0-9.]+)(ns|us|ms|s|m|h)", text)
    expect(parts and "".join(n + u for n, u in parts) == text, f"unparsable duration {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


KNOWN_FLAGS = cli_flags()
HEALTH_SERVICES = health_services()
