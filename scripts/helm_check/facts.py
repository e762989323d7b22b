"""The chart's promises, checked for one rendered value set against the merged values the render used
(their meaning computed independently in effective.py)."""

import hashlib
import json

import yaml

from .common import (API_CALLS, CHART, HEALTH_SERVICES, KNOWN_ENV, KNOWN_FLAGS, MODEL_DIR, NAMESPACE, RELEASE,
                     expect, parse_duration_seconds, runs_predictor)
from .effective import Effective


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


def check_case(docs, notes, merged, app_version):
    """Checks every promise; returns the epp arguments ({flag: value}), the config text and the
    container's plain env ({name: value}) for the start-up check."""
    eff = Effective(merged, app_version)
    check_dashboard(docs, merged)
    docs = [d for d in docs if not is_dashboard(d)]
    by_kind = {}
    for doc in docs:
        kind = doc["kind"]
        if kind == "Service" and doc["metadata"]["name"].endswith("-peers"):
            kind = "Service peers"
        if kind in CLUSTER_SCOPED:
            # Two ClusterRoles (the reviews, the metrics reader), told apart by their names' ends.
            kind = f"{kind} {doc['metadata']['name'].rsplit('-', 1)[-1]}"
            expect("namespace" not in doc["metadata"], f"{kind} is cluster-scoped")
        else:
            expect(doc["metadata"].get("namespace") == NAMESPACE, f"{kind} not in the release namespace")
        expect(kind not in by_kind, f"two {kind} objects")
        by_kind[kind] = doc
    wanted = {"Deployment", "Service", "ConfigMap"}
    wanted |= {"ServiceAccount"} if merged["serviceAccount"]["create"] else set()
    wanted |= {"Service peers"} if eff.active_active else set()
    wanted |= {"ServiceMonitor"} if eff.service_monitor else set()
    wanted |= {"Role", "RoleBinding"} if eff.rules else set()
    wanted |= {"InferencePool"} if eff.match_labels else set()
    wanted |= {"PodDisruptionBudget"} if merged["podDisruptionBudget"]["enabled"] else set()
    rbac = merged["rbac"]["create"]
    wanted |= {"ClusterRole auth", "ClusterRoleBinding auth"} if rbac and eff.metrics_auth else set()
    wanted |= {"ClusterRole reader"} if rbac and eff.metrics_reader else set()
    expect(set(by_kind) == wanted, f"kinds {sorted(by_kind)} != {sorted(wanted)}")
    deploy = by_kind["Deployment"]
    spec, pod = deploy["spec"], deploy["spec"]["template"]["spec"]
    expect(spec["replicas"] == eff.replicas and spec["strategy"] == merged["strategy"],
           f"not replicas {eff.replicas} / strategy {merged['strategy']}")
    expect(eff.replicas <= 1 or eff.leader_election or eff.active_active,
           "several replicas without leader election or activeActive")
    expect(not (eff.leader_election and eff.active_active), "leader election with activeActive")
    expect(spec["selector"]["matchLabels"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items(),
           "Deployment selector does not select its pods")
    [container] = pod["containers"]
    expect(container["image"] == eff.image, f"image {container['image']}, want {eff.image}")

    args = check_args(container, merged, eff)
    grace = pod["terminationGracePeriodSeconds"]
    expect(grace == merged["terminationGracePeriodSeconds"], "terminationGracePeriodSeconds")
    expect(parse_duration_seconds(args["--shutdown-grace-period"]) < grace,
           "--shutdown-grace-period must end before terminationGracePeriodSeconds")
    check_ports(container, by_kind["Service"], spec, merged, eff)
    check_peers(container, by_kind.get("Service peers"), spec, eff)
    text = check_config_and_volumes(container, pod, deploy, by_kind["ConfigMap"], merged, eff)
    check_predictor(container, pod, args, text, eff)
    check_tracing(container, args, eff)
    check_metrics_auth(by_kind, pod, args, eff)
    check_security(container, pod, by_kind, eff)
    check_rbac_pool_monitor(by_kind, pod, args, deploy, eff)
    check_notes(notes, eff)
    plain_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return args, text, plain_env


def check_args(container, merged, eff):
    args = {}
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        expect(flag.startswith("--") and flag[2:] in KNOWN_FLAGS, f"epp has no flag {flag}")
        expect(flag not in args, f"{flag} passed twice")
        args[flag] = value
    ports = merged["ports"]
    want = {"--grpc-port": str(eff.grpc_port), "--pool-group": eff.pool_group,
            "--grpc-health-port": str(ports["health"]),
            "--metrics-port": str(ports["metrics"]), "--config-file": "/config/config.yaml",
            "--pool-name": merged["pool"]["name"] or RELEASE,
            "--secure-serving": str(merged["secureServing"]).lower(),
            "--shutdown-grace-period": merged["shutdownGracePeriod"], "--log-level": merged["logLevel"],
            "--refresh-metrics-interval": merged["refreshMetricsInterval"]}
    if merged["endpoints"]:
        want["--endpoints"] = ",".join(merged["endpoints"])
    if merged["tls"]["secretName"]:
        want["--cert-path"] = "/etc/epp/tls"
    if merged["tls"]["clientCaSecretName"]:
        want["--grpc-client-ca-file"] = "/etc/epp/client-ca/ca.crt"
    if merged["metricsTls"]["secretName"]:
        want["--metrics-cert-dir"] = "/etc/epp/metrics-tls"
    if eff.leader_election:
        want["--ha-enable-leader-election"] = "true"
    if eff.predictor:
        want["--latency-model-dir"] = MODEL_DIR
    expect(("--ha-enable-leader-election" in args) == eff.leader_election, "--ha-enable-leader-election")
    expect(("--latency-model-dir" in args) == eff.predictor, "--latency-model-dir without the predictor")
    for flag, value in eff.flags.items():
        want[f"--{flag}"] = str(value).lower() if isinstance(value, bool) else str(value)
    for flag, value in want.items():
        expect(args.get(flag) == value, f"{flag}: {args.get(flag)!r}, want {value!r}")
    expect(("--endpoints" in args) == bool(merged["endpoints"]), "--endpoints without endpoints")
    expect(("--cert-path" in args) == bool(merged["tls"]["secretName"]), "--cert-path without a Secret")
    expect(("--grpc-client-ca-file" in args) == bool(merged["tls"]["clientCaSecretName"]), "--grpc-client-ca-file")
    expect(("--metrics-cert-dir" in args) == bool(merged["metricsTls"]["secretName"]), "--metrics-cert-dir")
    return args


def check_ports(container, svc, spec, merged, eff):
    ports = merged["ports"]
    for probe, service in (("readinessProbe", "readiness"), ("livenessProbe", "liveness")):
        expect(container[probe]["grpc"] == {"port": ports["health"], "service": service}, f"{probe}")
        expect(service in HEALTH_SERVICES, f"epp does not answer health service {service!r}")
    cports = {p["name"]: p["containerPort"] for p in container["ports"] if p["name"] != "peers"}
    expect(cports == {"grpc": eff.grpc_port, "grpc-health": ports["health"], "metrics": ports["metrics"]},
           f"container ports {cports}")
    sports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    expect(sports == {"grpc-ext-proc": (eff.grpc_port, "grpc"), "grpc-health": (ports["health"], "grpc-health"),
                      "http-metrics": (ports["metrics"], "metrics")}, f"service ports {sports}")
    expect(svc["spec"]["selector"] == spec["selector"]["matchLabels"], "Service selector != pod selector")


def check_peers(container, svc, spec, eff):
    """activeActive: a UDP container port and a headless Service over every replica, ready or not, whose
    name the config's speculativePeers resolves."""
    udp = [p for p in container["ports"] if p["name"] == "peers"]
    expect(udp == ([{"name": "peers", "containerPort": eff.peer_port, "protocol": "UDP"}] if eff.active_active else []),
           f"peers container port {udp}")
    if not eff.active_active:
        return
    expect(svc["metadata"]["name"] == f"{eff.fullname}-peers", "peers Service name")
    expect(svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True,
           "peers Service is not headless over unready pods too")
    expect(svc["spec"]["selector"] == spec["selector"]["matchLabels"], "peers Service selector != pod selector")
    expect(svc["spec"]["ports"] == [{"name": "udp-peers", "port": eff.peer_port, "targetPort": "peers",
                                     "protocol": "UDP"}], f"peers Service ports {svc['spec']['ports']}")


def check_config_and_volumes(container, pod, deploy, cm, merged, eff):
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    expect(mounts["config"]["mountPath"] == "/config" and mounts["config"]["readOnly"], "config mount")
    expect(volumes["config"]["configMap"]["name"] == cm["metadata"]["name"], "config volume -> ConfigMap")
    text = cm["data"]["config.yaml"]
    if eff.active_active:  # parsed and written back by the chart: the same document, not the same text
        expect(yaml.safe_load(text) == eff.config_doc, "ConfigMap config.yaml is not the chosen config with peers")
    else:
        expect(text.strip() == eff.config.strip(), "ConfigMap config.yaml is not the chosen config")
    expect(yaml.safe_load(text)["kind"] == "EndpointPickerConfig", "config is not an EndpointPickerConfig")
    checksum = deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    config = text.rstrip("\n") if eff.active_active else eff.config
    expect(checksum == hashlib.sha256(config.encode()).hexdigest(), "checksum/config is not the config's sha256")
    if merged["tls"]["secretName"]:
        expect(mounts["tls"]["mountPath"] == "/etc/epp/tls" and mounts["tls"]["readOnly"], "tls mount")
        expect(volumes["tls"]["secret"]["secretName"] == merged["tls"]["secretName"], "tls Secret")
    else:
        expect("tls" not in volumes, "tls volume without a Secret")
    for volume, secret, path in (("client-ca", merged["tls"]["clientCaSecretName"], "/etc/epp/client-ca"),
                                 ("metrics-tls", merged["metricsTls"]["secretName"], "/etc/epp/metrics-tls")):
        expect((volume in volumes) == bool(secret), f"{volume} volume")
        if secret:
            expect(volumes[volume]["secret"]["secretName"] == secret, f"{volume} Secret")
            expect(mounts[volume]["mountPath"] == path and mounts[volume]["readOnly"], f"{volume} mount")
    return text


def check_predictor(container, pod, args, text, eff):
    """The latency predictor: upstream's switch gives epp's recommended profile, off leaves the default config, and
    a config with the producer gets the model volume and the mapped training env."""
    has_producer = runs_predictor(text)
    expect(has_producer == eff.predictor, "predicted-latency-producer in the config")
    if eff.predictor_enabled:
        expect(has_producer, "latencyPredictor.enabled but the config has no predicted-latency-producer")
        if not eff.custom_config:
            expect(eff.example == "predicted-latency-epp", f"latencyPredictor.enabled chose {eff.example}")
    elif not eff.custom_config and eff.example == "default":
        default = (CHART / "configs" / "default.yaml").read_text()
        expect(not has_producer and text.strip() == default.strip(), "the default config changed")
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    expect(("latency-models" in volumes) == eff.predictor, "latency-models volume without the predictor")
    expect(("latency-models" in mounts) == eff.predictor, "latency-models mount without the predictor")
    if eff.predictor:
        mount = mounts["latency-models"]
        expect(mount["mountPath"] == args["--latency-model-dir"] == MODEL_DIR and not mount.get("readOnly"),
               f"latency-models mount {mount}")
        volume = {k: v for k, v in volumes["latency-models"].items() if k != "name"}
        want = {"persistentVolumeClaim": {"claimName": eff.model_pvc}} if eff.model_pvc else \
            {"emptyDir": {"sizeLimit": eff.model_size}}
        expect(volume == want, f"latency-models volume {volume}, want {want}")
    names = [e["name"] for e in container["env"]]
    expect(len(names) == len(set(names)), f"an env name set twice: {names}")
    # What the chart itself sets (the user's own `env` entries aside) must be something epp reads.
    user = {e["name"] for e in eff.user_env}
    unread = [n for n in names if n not in KNOWN_ENV and n not in user]
    expect(not unread, f"the chart sets environment epp does not read: {unread}")
    mapped = [e for e in container["env"] if e["name"].startswith("LATENCY_")]
    expect(all(e in eff.env for e in mapped), f"latency env {mapped}")
    wanted = [e for e in eff.env if e["name"].startswith("LATENCY_")]
    expect(all(e in mapped for e in wanted), f"latency env {mapped}, want {wanted}")


def check_tracing(container, args, eff):
    """Tracing: `--tracing=true` exactly when enabled, and no OTEL_* env of the chart's otherwise (what it
    sets when enabled is part of the env check)."""
    enabled = bool(eff.tracing["enabled"])
    expect(args.get("--tracing") == ("true" if enabled else None), f"--tracing: {args.get('--tracing')!r}")
    user = {e["name"] for e in eff.user_env}
    otel = [e["name"] for e in container["env"] if e["name"].startswith("OTEL_") and e["name"] not in user]
    expect(enabled or not otel, f"OTEL_* env without tracing: {otel}")


def check_metrics_auth(by_kind, pod, args, eff):
    """Metrics auth: the flag says what the values say; epp's account may create exactly api-calls.yaml's
    reviews; the reader role grants `get` on /metrics; the ServiceMonitor sends a token exactly when asked."""
    expect(args.get("--metrics-endpoint-auth") == str(eff.metrics_auth).lower(),
           f"--metrics-endpoint-auth {args.get('--metrics-endpoint-auth')!r}, want {eff.metrics_auth}")
    if "ClusterRole auth" in by_kind:
        want = [{"apiGroups": [c["group"]], "resources": [c["resource"]], "verbs": c["verbs"]}
                for c in API_CALLS["metricsAuth"]]
        role, binding = by_kind["ClusterRole auth"], by_kind["ClusterRoleBinding auth"]
        expect(role["rules"] == want, f"metrics-auth rules {role['rules']}, want {want}")
        expect(binding["roleRef"]["name"] == role["metadata"]["name"], "metrics-auth binding roleRef")
        expect(binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                        "namespace": NAMESPACE}], "metrics-auth binding subject")
        expect(eff.automount, "metrics auth without a mounted token")
    if "ClusterRole reader" in by_kind:
        rules = by_kind["ClusterRole reader"]["rules"]
        expect(rules == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], f"metrics-reader rules {rules}")
    if "ServiceMonitor" in by_kind:
        endpoint = by_kind["ServiceMonitor"]["spec"]["endpoints"][0]
        if not eff.metrics_auth:
            want = (None, None)
        elif eff.metrics_token_secret:
            want = ({"type": "Bearer", "credentials": {"name": eff.metrics_token_secret, "key": "token"}}, None)
        else:
            want = (None, "/var/run/secrets/kubernetes.io/serviceaccount/token")
        got = (endpoint.get("authorization"), endpoint.get("bearerTokenFile"))
        expect(got == want, f"ServiceMonitor credentials {got}, want {want}")
        scheme = "https" if eff.metrics_tls else "http"
        expect(endpoint["scheme"] == scheme, f"ServiceMonitor scheme {endpoint['scheme']}, want {scheme}")


def check_security(container, pod, by_kind, eff):
    expect(container["resources"] == eff.resources, f"resources {container['resources']}")
    sc = container["securityContext"]
    expect(sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
           and sc["capabilities"]["drop"] == ["ALL"], f"container securityContext {sc}")
    expect(pod["securityContext"]["runAsNonRoot"], "pod securityContext runAsNonRoot")
    if "ServiceAccount" in by_kind:
        expect(pod["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"], "ServiceAccount name")
        expect(by_kind["ServiceAccount"]["automountServiceAccountToken"] is eff.automount, "SA token mount")
    expect(pod["automountServiceAccountToken"] is eff.automount,
           f"automountServiceAccountToken {pod['automountServiceAccountToken']}, want {eff.automount}")
    env = [e for e in container["env"] if e["name"] not in ("NAMESPACE", "POD_NAME")]
    expect(env == eff.env, f"env {env}, want {eff.env}")
    env = {e["name"]: e for e in container["env"]}
    expect(env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", "NAMESPACE env")


def check_rbac_pool_monitor(by_kind, pod, args, deploy, eff):
    svc = by_kind["Service"]
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
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    if "ServiceMonitor" in by_kind:
        sports = {p["name"] for p in svc["spec"]["ports"]}
        sm = by_kind["ServiceMonitor"]["spec"]
        expect(sm["endpoints"][0]["port"] in sports and sm["endpoints"][0]["path"] == "/metrics", "SM port")
        expect(sm["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), "SM misses Service")
        expect(sm["namespaceSelector"]["matchNames"] == [NAMESPACE], "SM namespace")
        expect(eff.sm_labels.items() <= by_kind["ServiceMonitor"]["metadata"]["labels"].items(),
               "serviceMonitor.labels")
    if "PodDisruptionBudget" in by_kind:
        selector = by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
        expect(selector.items() <= pod_labels.items(), "PDB does not select the pod")


def check_notes(notes, eff):
    expect(("epp stays NOT_SERVING until InferencePool" in notes) == (not eff.static and not eff.match_labels),
           "NOTES: the missing-pool note")
    expect(("predicted in process by epp" in notes and "no training or prediction sidecars" in notes)
           == eff.predictor, "NOTES: the in-process latency predictor line")
    expect(("x-llm-d-slo-ttft-ms" in notes) == (eff.example in ("predicted-latency-slo", "predicted-latency-epp")),
           "NOTES: the SLO headers")
    expect("is ignored" not in notes, "NOTES still says something is ignored")


def is_dashboard(doc):
    return doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard")


def check_dashboard(docs, merged):
    """The Grafana dashboard ConfigMap: there exactly when `dashboard.enabled`, labelled for the sidecar,
    holding the dashboard's JSON."""
    dashboards = [d for d in docs if is_dashboard(d)]
    settings = merged["dashboard"]
    expect(len(dashboards) == (1 if settings["enabled"] else 0), f"{len(dashboards)} dashboard ConfigMaps")
    for cm in dashboards:
        labels = cm["metadata"].get("labels", {})
        expect(labels.get(settings["label"]) == settings["labelValue"], f"dashboard labels {labels}")
        panels = json.loads(cm["data"]["epp.json"]).get("panels", [])
        expect(len(panels) >= 10, f"the dashboard has {len(panels)} panels")

