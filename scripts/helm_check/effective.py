"""What a value set means once the upstream layout (inferenceExtension.*, inferencePool.*) is mapped onto
the native values, computed here independently of the templates' helpers."""

import re

import yaml

from .common import API_CALLS, CHART, NAMESPACE, PREDICTOR_ENV, RELEASE, runs_predictor


def _env_value(value):
    """A values-file number as the chart renders it: 5.0 -> "5", 0.85 -> "0.85"."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


class Effective:
    def __init__(self, merged, app_version):
        ie = merged.get("inferenceExtension") or {}
        pool = merged.get("inferencePool") or {}
        self.replicas = ie.get("replicas", merged["replicas"])
        self.active_active = merged["activeActive"]["enabled"]
        self.peer_port = merged["activeActive"]["peerPort"]
        self.leader_election = merged["leaderElection"]["enabled"] or \
            (ie.get("replicas", 1) > 1 and not self.active_active)
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
        # Tracing: upstream's block over the native one, key by key.
        tracing, upstream = merged["tracing"], ie.get("tracing") or {}
        sampling = {**tracing["sampling"], **(upstream.get("sampling") or {})}
        self.tracing = {**tracing, **upstream, "sampling": sampling}

        # The config: a custom one, else the example; upstream's latencyPredictor.enabled turns the
        # default example into predicted-latency-epp (epp's recommended profile).
        lp = ie.get("latencyPredictor") or {}
        self.predictor_enabled = bool(lp.get("enabled"))
        custom = ie.get("pluginsCustomConfig") or {}
        config_file = ie.get("pluginsConfigFile") or (next(iter(custom)) if len(custom) == 1 else "")
        self.custom_config = custom.get(config_file) or merged["config"]["text"]
        example = merged["config"]["example"]
        if self.predictor_enabled and example == "default":
            example = "predicted-latency-epp"
        self.example = None if self.custom_config else example
        self.config = self.custom_config or (CHART / "configs" / f"{example}.yaml").read_text()
        # activeActive: the same config with the precise producer's speculativePeers naming the peers Service.
        self.fullname = merged.get("fullnameOverride") or RELEASE
        self.config_doc = yaml.safe_load(self.config)
        if self.active_active:
            peers = {"listen": f":{self.peer_port}",
                     "peers": [f"{self.fullname}-peers.{NAMESPACE}.svc:{self.peer_port}"]}
            for plugin in self.config_doc["plugins"]:
                if plugin.get("type") == "precise-prefix-cache-producer":
                    plugin.setdefault("parameters", {})["speculativePeers"] = peers

        # The predictor runs when the config has its producer: a model volume and the mapped env then.
        self.predictor = runs_predictor(self.config)
        self.model_pvc = merged["latencyModels"]["persistentVolumeClaim"]
        training = lp.get("trainingServer") or {}
        self.model_size = training.get("volumeSize") or merged["latencyModels"]["sizeLimit"]
        user_env = merged["env"] + (ie.get("env") or [])
        taken = {e["name"] for e in user_env}
        config = training.get("config") or {}
        self.predictor_env = [{"name": n, "value": _env_value(config[n])} for n in PREDICTOR_ENV
                              if self.predictor and n in config and n not in taken]
        # The recommended profile's objective (deploy/helm/epp/templates/_predictor.tpl), unless set.
        if self.predictor and self.example == "predicted-latency-epp" and \
                "LATENCY_OBJECTIVE_TYPE" not in config and "LATENCY_OBJECTIVE_TYPE" not in taken:
            self.predictor_env.append({"name": "LATENCY_OBJECTIVE_TYPE", "value": "log-mean"})
        self.user_env = user_env
        self.env = self.predictor_env + self._tracing_env(taken) + user_env

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
        # Metrics auth: upstream's auth.enabled, else metricsAuth.enabled, else on when epp calls the API.
        auth = prom.get("auth") or {}
        setting = auth["enabled"] if "enabled" in auth else merged["metricsAuth"].get("enabled")
        self.metrics_auth = setting if isinstance(setting, bool) else self.calls_api
        self.metrics_token_secret = auth.get("secretName") or merged["serviceMonitor"]["tokenSecretName"]
        self.metrics_reader = self.metrics_auth and merged["metricsAuth"]["readerClusterRole"]
        self.metrics_tls = bool(merged["metricsTls"]["secretName"])
        token = merged["serviceAccount"]["automountServiceAccountToken"]
        self.automount = token if isinstance(token, bool) else (self.calls_api or self.metrics_auth)
        features = ([] if self.static else ["discovery", "inferencePool"]) + \
            (["leaderElection"] if self.leader_election else [])
        self.rules = [{"apiGroups": [self.pool_group if c["group"] == "POOL_GROUP" else c["group"]],
                       "resources": [c["resource"]], "verbs": c["verbs"]}
                      for f in features for c in API_CALLS[f]] if merged["rbac"]["create"] else []

    def _tracing_env(self, taken):
        """The OTEL_* env upstream's chart sets with tracing on, less the names the user's env sets."""
        tracing = self.tracing
        if not tracing["enabled"]:
            return []
        attributes = "k8s.namespace.name=$(NAMESPACE),k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME)," \
                     "k8s.pod.name=$(POD_NAME)"
        env = [{"name": "OTEL_TRACES_EXPORTER", "value": "otlp"},
               {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": tracing["otelExporterEndpoint"]},
               {"name": "OTEL_TRACES_SAMPLER", "value": tracing["sampling"]["sampler"]},
               {"name": "OTEL_TRACES_SAMPLER_ARG", "value": _env_value(tracing["sampling"]["samplerArg"])},
               {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
               {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attributes}]
        return [e for e in env if e["name"] not in taken]
