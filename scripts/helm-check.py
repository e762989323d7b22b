#!/usr/bin/env python3
"""Checks the Helm chart in deploy/helm/epp without a cluster or a helm binary.

For each value set below it renders the chart with helm-python-sdk (Helm v4's own template engine and
values-schema check, through its C library), validates every manifest strictly (an unknown field is an
error) against the Kubernetes OpenAPI schemas of 1.27 (the chart's floor) and of the newest version the
pinned kubernetes-validate ships, custom resources against strict CRD subsets
(deploy/helm/check/crd-subsets.yaml), and asserts what the chart promises: flags, probes, ports, the
config, security, resources, the image, RBAC rules exactly the API calls of the mode (the list in
deploy/helm/epp/api-calls.yaml, which tests/discovery_rbac.rs checks epp's real calls against), the
InferencePool. Upstream-layout values are rendered too, one set from `helm upgrade --install --set ...`
expressions parsed by Helm's own --set parser. Refused value sets must fail with their message. Given a
debug build of epp, epp is started with each rendered argument list and config (ports 0, paths moved to a
temp dir) and must reach "epp serving" and exit cleanly on SIGTERM. Without a cluster, discovery and
leader election retry in the background (epp stays NOT_SERVING): that does not stop it serving its ports.

Usage:  make helm-check            (installs helm-python-sdk and kubernetes-validate into .venv first)
        .venv/bin/python scripts/helm-check.py [-v]
Env:    EPP_BIN=path/to/epp        epp for the start-up check (default: $CARGO_TARGET_DIR or target/, debug/)
        HELM_CHECK_REQUIRE_EPP=1   a missing epp binary fails the check instead of skipping that part
"""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "epp"
RELEASE, NAMESPACE = "epp", "llm"
# The chart's kubeVersion floor (gRPC probes are GA in 1.27) and the newest schemas kubernetes-validate has.
KUBE_VERSIONS = ["1.27.0", kubernetes_validate.utils.latest_version()]
# Copies the chart ships of the repository's config/ examples (kept byte-identical).
EXAMPLES = ["default", "weighted-random", "flow-control", "flow-control-autoscaling", "gie-integration",
            "conformance"]
VERBOSE = "-v" in sys.argv[1:]

CUSTOM_CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: random-picker
"""

# `helm upgrade --install epp deploy/helm/epp --set ...` as the upstream chart's README installs a pool.
UPSTREAM_SETS = ["inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct",
                 "inferenceExtension.latencyPredictor.enabled=true"]
# An upstream-layout values file, keys epp ignores among the mapped ones.
UPSTREAM_VALUES = yaml.safe_load((ROOT / "deploy" / "helm" / "check" / "upstream-values.yaml").read_text())
# Value sets that must render and pass every check.
CASES = {
    "defaults": {},
    "static-endpoints": {"endpoints": ["10.0.0.1:8000", "10.0.0.2:8000", "[fd00::1]:8001"]},
    "tls-secret": {"tls": {"secretName": "epp-tls"}},
    "plaintext": {"secureServing": False, "logLevel": "epp=debug,info", "pool": {"name": "llama"}},
    "custom-config": {"config": {"text": CUSTOM_CONFIG},
                      "flags": {"max-request-body-bytes": 16777216, "emit-endpoint-scores": True}},
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                                           "scrapeTimeout": "10s"}},
    "pdb-and-overrides": {"podDisruptionBudget": {"enabled": True, "minAvailable": 1},
                          "image": {"repository": "registry.example/epp", "tag": "v9.9.9"},
                          "fullnameOverride": "picker", "shutdownGracePeriod": "60s",
                          "terminationGracePeriodSeconds": 75,
                          "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
    "upstream --set": helm.parse_set_string(",".join(UPSTREAM_SETS)),
    "upstream values": UPSTREAM_VALUES,
    "upstream v1alpha2 pool": {"inferencePool": {"apiVersion": "inference.networking.x-k8s.io/v1alpha2",
                                                 "targetPortNumber": 8080,
                                                 "modelServers": {"matchLabels": {"app": "vllm"}}}},
    "leader election": {"leaderElection": {"enabled": True}, "replicas": 3,
                        "podDisruptionBudget": {"enabled": True, "minAvailable": 2}},
    "upstream replicas": {"inferenceExtension": {"replicas": 3}, "endpoints": ["10.0.0.1:8000"]},
    "no rbac, own token setting": {"rbac": {"create": False}, "serviceAccount": {"automountServiceAccountToken": True}},
    # Every other example the chart ships, so each is loaded by a real epp too.
    **{f"example {e}": {"config": {"example": e}} for e in EXAMPLES if e != "default"},
}
# Value sets the chart must refuse, with a piece of the message it must give.
REFUSED = {
    "misspelt key": ({"endpoint": ["10.0.0.1:8000"]}, "additional properties 'endpoint'"),
    "host name endpoint": ({"endpoints": ["vllm:8000"]}, "does not match pattern"),
    "cert without TLS": ({"secureServing": False, "tls": {"secretName": "x"}}, "secureServing is false"),
    "unknown example": ({"config": {"example": "nope"}}, 'config.example "nope": no such example'),
    "flag the chart sets": ({"flags": {"grpc-port": 1}}, "use ports.grpc instead"),
    "bad duration": ({"shutdownGracePeriod": "soon"}, "shutdownGracePeriod"),
    "replicas without leader election": ({"replicas": 2}, "replicas=2 needs leaderElection.enabled"),
    "unknown upstream key": ({"inferenceExtension": {"replica": 2}}, "additional properties 'replica'"),
}

# Strict subsets of the ServiceMonitor and InferencePool CRDs (no CRD schemas ship with kubernetes-validate).
CRD_SUBSETS = yaml.safe_load((ROOT / "deploy" / "helm" / "check" / "crd-subsets.yaml").read_text())
SERVICE_MONITOR_SCHEMA = CRD_SUBSETS["ServiceMonitor"]
INFERENCE_POOL_SCHEMAS = CRD_SUBSETS["InferencePool"]
OBJECT_META = CRD_SUBSETS["objectMeta"]
# The one list of the API calls epp makes, by feature (the chart's Role is built from it).
API_CALLS = yaml.safe_load((CHART / "api-calls.yaml").read_text())


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def cli_flags():
    """Every flag epp takes: the fields of `struct Cli` in src/cli.rs, kebab-cased as clap does."""
    source = (ROOT / "src" / "cli.rs").read_text()
    body = source[source.index("pub struct Cli {"):source.index("\n}\n", source.index("pub struct Cli {"))]
    return {name.replace("_", "-") for name in re.findall(r"^\s*pub (\w+):", body, re.M)}


def health_services():
    """The gRPC health service names epp answers (src/extproc/health.rs)."""
    source = (ROOT / "src" / "extproc" / "health.rs").read_text()
    return set(re.findall(r'"([a-z.0-9_]*)"', source))


def parse_duration_seconds(text):
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"([0-9.]+)(ns|us|ms|s|m|h)", text)
    expect(parts and "".join(n + u for n, u in parts) == text, f"unparsable duration {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def render(chart, values):
    """Rendered manifests as {template: [documents]}, NOTES.txt as text under "NOTES"."""
    out = {}
    for path, text in chart.render(values=values, name=RELEASE, namespace=NAMESPACE).items():
        if path.endswith("NOTES.txt"):
            out["NOTES"] = text
            continue
        docs = [d for d in yaml.safe_load_all(text) if d]
        if docs:
            out[path] = docs
    return out


def crd_schema(doc):
    """The strict CRD subset a custom resource is validated with; None for Kubernetes' own kinds."""
    if doc["kind"] == "ServiceMonitor":
        return SERVICE_MONITOR_SCHEMA
    if doc["kind"] != "InferencePool":
        return None
    spec = INFERENCE_POOL_SCHEMAS.get(doc["apiVersion"])
    expect(spec is not None, f"InferencePool apiVersion {doc['apiVersion']}")
    return {**spec, "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
            "properties": {**spec["properties"], "apiVersion": {"const": doc["apiVersion"]},
                           "kind": {"const": "InferencePool"}, "metadata": OBJECT_META}}


def validate_schemas(docs):
    for doc in docs:
        if (schema := crd_schema(doc)) is not None:
            try:
                jsonschema.validate(doc, schema)
            except jsonschema.ValidationError as e:
                raise CheckFailed(f"{doc['kind']}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = "/".join(str(p) for p in e.absolute_path)
                raise CheckFailed(f"{doc['kind']} {doc['metadata']['name']} (k8s {version}): {path}: {e.message}")


class Effective:
    """What a value set means once the upstream layout (inferenceExtension.*, inferencePool.*) is mapped
    onto the native values, computed here independently of the templates' helpers."""

    def __init__(self, merged, app_version):
        ie = merged.get("inferenceExtension") or {}
        pool = merged.get("inferencePool") or {}
        self.replicas = ie.get("replicas", merged["replicas"])
        self.leader_election = merged["leaderElection"]["enabled"] or ie.get("replicas", 1) > 1
        image = ie.get("image") or {}
        repo = merged["image"]["repository"]
        if image.get("hub") and image.get("name"):
            repo = f"{image['hub']}/{image['name']}"
        elif image.get("registry") and image.get("repository"):
            repo = f"{image['registry']}/{image['repository']}"
        elif image.get("repository"):
            repo = image["repository"]
        self.image = f"{repo}:{image.get('tag') or merged['image']['tag'] or app_version}"
        self.grpc_port = ie.get("extProcPort") or merged["ports"]["grpc"]
        self.flags = {**merged["flags"], **(ie.get("flags") or {})}
        custom = ie.get("pluginsCustomConfig") or {}
        config_file = ie.get("pluginsConfigFile") or (next(iter(custom)) if len(custom) == 1 else "")
        self.config = custom.get(config_file) or merged["config"]["text"] or \
            (CHART / "configs" / f"{merged['config']['example']}.yaml").read_text()
        self.static = bool(merged["endpoints"] or re.search(r"(?m)^endpoints:", self.config)
                           or "endpoints-file" in self.flags)
        self.calls_api = not self.static or self.leader_election
        self.pool_group = (pool.get("apiVersion") or merged["pool"]["group"]).split("/")[0]
        self.match_labels = (pool.get("modelServers") or {}).get("matchLabels") or {}
        self.target_ports = [pool["targetPortNumber"]] if pool.get("targetPortNumber") else \
            [p["number"] for p in pool.get("targetPorts") or []]
        self.failure_mode = ie.get("failureMode") or "FailOpen"
        prom = (ie.get("monitoring") or {}).get("prometheus") or {}
        self.service_monitor = merged["serviceMonitor"]["enabled"] or bool(prom.get("enabled"))
        self.sm_labels = {**merged["serviceMonitor"]["labels"], **(prom.get("extraLabels") or {})}
        self.resources = ie.get("resources") or merged["resources"]
        self.env = merged["env"] + (ie.get("env") or [])
        token = merged["serviceAccount"]["automountServiceAccountToken"]
        self.automount = token if isinstance(token, bool) else self.calls_api
        features = ([] if self.static else ["discovery", "inferencePool"]) + \
            (["leaderElection"] if self.leader_election else [])
        self.rules = [{"apiGroups": [self.pool_group if c["group"] == "POOL_GROUP" else c["group"]],
                       "resources": [c["resource"]], "verbs": c["verbs"]}
                      for f in features for c in API_CALLS[f]] if merged["rbac"]["create"] else []


def check_case(docs, notes, merged, app_version):
    """The chart's promises, checked against the merged values the render used."""
    eff = Effective(merged, app_version)
    by_kind = {}
    for doc in docs:
        expect(doc["kind"] not in by_kind, f"two {doc['kind']} objects")
        expect(doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']} not in the release namespace")
        by_kind[doc["kind"]] = doc
    wanted = {"Deployment", "Service", "ConfigMap"}
    wanted |= {"ServiceAccount"} if merged["serviceAccount"]["create"] else set()
    wanted |= {"ServiceMonitor"} if eff.service_monitor else set()
    wanted |= {"Role", "RoleBinding"} if eff.rules else set()
    wanted |= {"InferencePool"} if eff.match_labels else set()
    wanted |= {"PodDisruptionBudget"} if merged["podDisruptionBudget"]["enabled"] else set()
    expect(set(by_kind) == wanted, f"kinds {sorted(by_kind)} != {sorted(wanted)}")
    deploy, svc, cm = by_kind["Deployment"], by_kind["Service"], by_kind["ConfigMap"]
    spec, pod = deploy["spec"], deploy["spec"]["template"]["spec"]
    expect(spec["replicas"] == eff.replicas and spec["strategy"] == {"type": "Recreate"},
           f"not replicas {eff.replicas} / Recreate")
    expect(eff.replicas <= 1 or eff.leader_election, "several replicas without leader election")
    expect(spec["selector"]["matchLabels"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items(),
           "Deployment selector does not select its pods")
    [container] = pod["containers"]

    expect(container["image"] == eff.image, f"image {container['image']}, want {eff.image}")

    args = {}
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        expect(flag.startswith("--") and flag[2:] in KNOWN_FLAGS, f"epp has no flag {flag}")
        expect(flag not in args, f"{flag} passed twice")
        args[flag] = value
    ports = merged["ports"]
    config_path = "/config/config.yaml"
    want = {"--grpc-port": str(eff.grpc_port), "--pool-group": eff.pool_group,
            "--grpc-health-port": str(ports["health"]),
            "--metrics-port": str(ports["metrics"]), "--config-file": config_path,
            "--pool-name": merged["pool"]["name"] or RELEASE,
            "--secure-serving": str(merged["secureServing"]).lower(),
            "--shutdown-grace-period": merged["shutdownGracePeriod"], "--log-level": merged["logLevel"],
            "--refresh-metrics-interval": merged["refreshMetricsInterval"]}
    if merged["endpoints"]:
        want["--endpoints"] = ",".join(merged["endpoints"])
    if merged["tls"]["secretName"]:
        want["--cert-path"] = "/etc/epp/tls"
    if eff.leader_election:
        want["--ha-enable-leader-election"] = "true"
    expect(("--ha-enable-leader-election" in args) == eff.leader_election, "--ha-enable-leader-election")
    for flag, value in eff.flags.items():
        want[f"--{flag}"] = str(value).lower() if isinstance(value, bool) else str(value)
    for flag, value in want.items():
        expect(args.get(flag) == value, f"{flag}: {args.get(flag)!r}, want {value!r}")
    expect(("--endpoints" in args) == bool(merged["endpoints"]), "--endpoints without endpoints")
    expect(("--cert-path" in args) == bool(merged["tls"]["secretName"]), "--cert-path without a Secret")
    grace = pod["terminationGracePeriodSeconds"]
    expect(grace == merged["terminationGracePeriodSeconds"], "terminationGracePeriodSeconds")
    expect(parse_duration_seconds(args["--shutdown-grace-period"]) < grace,
           "--shutdown-grace-period must end before terminationGracePeriodSeconds")

    for probe, service in (("readinessProbe", "readiness"), ("livenessProbe", "liveness")):
        expect(container[probe]["grpc"] == {"port": ports["health"], "service": service}, f"{probe}")
        expect(service in HEALTH_SERVICES, f"epp does not answer health service {service!r}")
    cports = {p["name"]: p["containerPort"] for p in container["ports"]}
    expect(cports == {"grpc": eff.grpc_port, "grpc-health": ports["health"], "metrics": ports["metrics"]},
           f"container ports {cports}")
    sports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    expect(sports == {"grpc-ext-proc": (eff.grpc_port, "grpc"), "grpc-health": (ports["health"], "grpc-health"),
                      "http-metrics": (ports["metrics"], "metrics")}, f"service ports {sports}")
    expect(svc["spec"]["selector"] == spec["selector"]["matchLabels"], "Service selector != pod selector")

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    expect(mounts["config"]["mountPath"] == "/config" and mounts["config"]["readOnly"], "config mount")
    expect(volumes["config"]["configMap"]["name"] == cm["metadata"]["name"], "config volume -> ConfigMap")
    text = cm["data"]["config.yaml"]
    source = eff.config
    expect(text.strip() == source.strip(), "ConfigMap config.yaml is not the chosen config")
    expect(yaml.safe_load(text)["kind"] == "EndpointPickerConfig", "config is not an EndpointPickerConfig")
    checksum = deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    expect(checksum == hashlib.sha256(source.encode()).hexdigest(), "checksum/config is not the config's sha256")
    if merged["tls"]["secretName"]:
        expect(mounts["tls"]["mountPath"] == "/etc/epp/tls" and mounts["tls"]["readOnly"], "tls mount")
        expect(volumes["tls"]["secret"]["secretName"] == merged["tls"]["secretName"], "tls Secret")
    else:
        expect("tls" not in volumes, "tls volume without a Secret")

    expect(container["resources"] == eff.resources, f"resources {container['resources']}")
    sc = container["securityContext"]
    expect(sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
           and sc["capabilities"]["drop"] == ["ALL"], f"container securityContext {sc}")
    expect(pod["securityContext"]["runAsNonRoot"], "pod securityContext runAsNonRoot")
    if "ServiceAccount" in by_kind:
        expect(pod["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"], "ServiceAccount name")
    expect(pod["automountServiceAccountToken"] is eff.automount,
           f"automountServiceAccountToken {pod['automountServiceAccountToken']}, want {eff.automount}")
    if "ServiceAccount" in by_kind:
        expect(by_kind["ServiceAccount"]["automountServiceAccountToken"] is eff.automount, "SA token mount")
    expect([e for e in container["env"] if e["name"] not in ("NAMESPACE", "POD_NAME")] == eff.env, "env")
    if eff.rules:
        role, binding = by_kind["Role"], by_kind["RoleBinding"]
        expect(role["rules"] == eff.rules, f"Role rules {role['rules']}, want exactly {eff.rules}")
        expect(binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}, "RoleBinding roleRef")
        expect(binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                        "namespace": NAMESPACE}], "RoleBinding subject")
        expect(eff.automount, "RBAC granted but no token mounted")
    if eff.match_labels:
        pool_doc = by_kind["InferencePool"]
        expect(pool_doc["metadata"]["name"] == args["--pool-name"], "InferencePool name != --pool-name")
        expect(pool_doc["apiVersion"].split("/")[0] == args["--pool-group"], "InferencePool group != --pool-group")
        ps, v1 = pool_doc["spec"], pool_doc["apiVersion"].endswith("/v1")
        ref = ps["endpointPickerRef"] if v1 else ps["extensionRef"]
        expect((ps["selector"]["matchLabels"] if v1 else ps["selector"]) == eff.match_labels, "pool selector")
        ports = [p["number"] for p in ps["targetPorts"]] if v1 else [ps["targetPortNumber"]]
        expect(ports == (eff.target_ports if v1 else eff.target_ports[:1]), f"pool target ports {ports}")
        expect((ref["name"], ref["port"]["number"] if v1 else ref["portNumber"]) == (svc["metadata"]["name"],
               eff.grpc_port), "the pool's endpoint picker reference is not the ext_proc Service port")
        expect(ref["failureMode"] == eff.failure_mode, f"failureMode {ref['failureMode']}")
    env = {e["name"]: e for e in container["env"]}
    expect(env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", "NAMESPACE env")

    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    if "ServiceMonitor" in by_kind:
        sm = by_kind["ServiceMonitor"]["spec"]
        expect(sm["endpoints"][0]["port"] in sports and sm["endpoints"][0]["path"] == "/metrics", "SM port")
        expect(sm["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), "SM misses Service")
        expect(sm["namespaceSelector"]["matchNames"] == [NAMESPACE], "SM namespace")
        expect(eff.sm_labels.items() <= by_kind["ServiceMonitor"]["metadata"]["labels"].items(),
               "serviceMonitor.labels")
    if "PodDisruptionBudget" in by_kind:
        selector = by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
        expect(selector.items() <= pod_labels.items(), "PDB does not select the pod")

    expect(("epp stays NOT_SERVING until InferencePool" in notes) == (not eff.static and not eff.match_labels),
           "NOTES: the missing-pool note")
    predictor = ((merged.get("inferenceExtension") or {}).get("latencyPredictor") or {}).get("enabled", False)
    expect(("latencyPredictor.enabled is ignored" in notes) == predictor, "NOTES: the latency predictor note")
    return args, text


def start_epp(epp_bin, name, args, config_text, workdir):
    """Starts epp as the pod would (paths and ports moved), waits for "epp serving", stops it."""
    case_dir = Path(workdir) / name.replace(" ", "-")
    (case_dir / "config").mkdir(parents=True)
    (case_dir / "config" / "config.yaml").write_text(config_text)
    argv = [str(epp_bin)]
    for flag, value in args.items():
        if flag in ("--grpc-port", "--grpc-health-port", "--metrics-port"):
            value = "0"
        elif flag == "--config-file":
            value = str(case_dir / "config" / "config.yaml")
        elif flag == "--cert-path":
            tls_dir = case_dir / "tls"
            tls_dir.mkdir()
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                            "-subj", "/CN=epp", "-keyout", str(tls_dir / "tls.key"),
                            "-out", str(tls_dir / "tls.crt")], check=True, capture_output=True)
            value = str(tls_dir)
        argv.append(f"{flag}={value}")
    env = dict(os.environ, NAMESPACE=NAMESPACE, POD_NAME=f"{RELEASE}-0", NO_COLOR="1")
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


def find_epp():
    if os.environ.get("EPP_BIN"):
        return Path(os.environ["EPP_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    return target / "debug" / "epp"


KNOWN_FLAGS = cli_flags()
HEALTH_SERVICES = health_services()


def main():
    started = time.monotonic()
    failures, checked = [], []

    def run(name, label, fn):
        checked.append(name)
        try:
            note = fn()
            print(f"  ok    {name}: {label}{note or ''}")
        except (CheckFailed, helm.HelmError, subprocess.SubprocessError, OSError) as e:
            failures.append(name)
            print(f"  FAIL  {name}: {label}: {e}")

    def static_checks(app_version):
        for example in EXAMPLES:
            chart_copy = (CHART / "configs" / f"{example}.yaml").read_bytes()
            expect(chart_copy == (ROOT / "config" / f"{example}.yaml").read_bytes(),
                   f"deploy/helm/epp/configs/{example}.yaml differs from config/{example}.yaml")
        shipped = sorted(p.stem for p in (CHART / "configs").glob("*.yaml"))
        expect(shipped == sorted(EXAMPLES), f"chart examples {shipped} != {sorted(EXAMPLES)}")
        cargo = re.search(r'(?m)^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text()).group(1)
        expect(app_version == cargo, f"Chart appVersion {app_version} != Cargo.toml version {cargo}")
        for version in KUBE_VERSIONS:
            report = helm.lint(str(CHART), strict=True, kube_version=f"v{version}", namespace=NAMESPACE)
            problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
            expect(not problems, f"helm lint (k8s {version}): {problems}")

    epp_bin = find_epp()
    have_epp = epp_bin.is_file() and os.access(epp_bin, os.X_OK)
    if not have_epp:
        message = f"no epp binary at {epp_bin} (cargo build --bin epp, or EPP_BIN=)"
        if os.environ.get("HELM_CHECK_REQUIRE_EPP") == "1":
            checked.append("epp binary")
            failures.append("epp binary")
            print(f"  FAIL  {message}")
        else:
            print(f"  skip  start-up check: {message}")
    have_openssl = shutil.which("openssl") is not None

    with helm.Chart.load(str(CHART)) as chart, tempfile.TemporaryDirectory(prefix="helm-check-") as workdir:
        app_version = chart.metadata["appVersion"]
        run("chart", f"examples match config/, appVersion = Cargo.toml, helm lint --strict "
            f"(k8s {', '.join(KUBE_VERSIONS)})", lambda: static_checks(app_version))
        for name, values in CASES.items():
            def one_case(name=name, values=values):
                rendered = render(chart, values)
                notes = rendered.pop("NOTES", "")
                docs = [d for path in sorted(rendered) for d in rendered[path]]
                validate_schemas(docs)
                args, config_text = check_case(docs, notes, chart.merge_values(values), app_version)
                if VERBOSE:
                    print(yaml.safe_dump_all(docs, sort_keys=False))
                if not have_epp:
                    return None
                if "--cert-path" in args and not have_openssl:
                    return " (no openssl for a test certificate: epp not started)"
                start_epp(epp_bin, name, args, config_text, workdir)
                return ", epp starts with the rendered args and config and stops on SIGTERM"
            label = f"strict schemas (k8s {', '.join(KUBE_VERSIONS)}), chart facts"
            run(f"values {name}", label, one_case)
        for name, (values, message) in REFUSED.items():
            def refused(values=values, message=message):
                try:
                    chart.render(values=values, name=RELEASE, namespace=NAMESPACE)
                except helm.HelmError as e:
                    expect(message in str(e), f"refused, but with {str(e)!r}")
                    return
                raise CheckFailed("rendered; should have been refused")
            run(f"refused {name}", f"fails with {message!r}", refused)

    elapsed = time.monotonic() - started
    total = len(checked)
    if failures:
        print(f"helm-check: {len(failures)} of {total} checks FAILED ({elapsed:.1f} s): {', '.join(failures)}")
        return 1
    print(f"helm-check: all {total} checks passed ({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
