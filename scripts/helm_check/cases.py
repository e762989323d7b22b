"""The value sets helm-check renders, and those the chart must refuse with a given message."""

import helm_python as helm
import yaml

from .common import CHECK_DIR, ROOT

# Copies the chart ships of the repository's config/ examples (kept byte-identical).
EXAMPLES = ["default", "weighted-random", "flow-control", "flow-control-autoscaling", "gie-integration",
            "conformance", "predicted-latency", "predicted-latency-slo", "predicted-latency-epp",
            "pd-disaggregation"]

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

# The shipped precise config (config/precise-prefix.yaml) with a render URL, for activeActive.
PRECISE_CONFIG = (ROOT / "config" / "precise-prefix.yaml").read_text() \
    .replace("http://render:8000", "http://vllm-llama3-8b-instruct:8000")

# `helm upgrade --install epp deploy/helm/epp --set ...` as the upstream chart's README installs a pool,
# with the GKE predicted-latency guide's switch.
UPSTREAM_SETS = ["inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct",
                 "inferenceExtension.latencyPredictor.enabled=true"]
# The same switch with training settings in upstream's layout, as --set expressions.
PREDICTOR_SETS = ["inferenceExtension.latencyPredictor.enabled=true",
                  "inferenceExtension.latencyPredictor.trainingServer.config.LATENCY_RETRAINING_INTERVAL_SEC=1",
                  "inferenceExtension.latencyPredictor.trainingServer.config.LATENCY_OBJECTIVE_TYPE=quantile",
                  "inferenceExtension.latencyPredictor.trainingServer.config.LATENCY_QUANTILE_ALPHA=0.85",
                  "inferenceExtension.latencyPredictor.trainingServer.volumeSize=2Gi"]
# An upstream-layout values file, keys epp ignores among the mapped ones.
UPSTREAM_VALUES = yaml.safe_load((CHECK_DIR / "upstream-values.yaml").read_text())
# Upstream's latencyPredictor block, sidecar settings included (accepted and ignored).
UPSTREAM_PREDICTOR = yaml.safe_load((CHECK_DIR / "upstream-latency-predictor.yaml").read_text())

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
    # Active-active precise prefix routing: native replicas, and upstream's replicas (no leader election then),
    # with another peer port and a fullname override.
    "active-active": {"activeActive": {"enabled": True}, "replicas": 3, "config": {"text": PRECISE_CONFIG},
                      "strategy": {"type": "RollingUpdate"}},
    "active-active upstream replicas": {"activeActive": {"enabled": True, "peerPort": 7100},
                                        "inferenceExtension": {"replicas": 2, "pluginsCustomConfig": {
                                            "precise.yaml": PRECISE_CONFIG}},
                                        "fullnameOverride": "picker"},
    "no rbac, own token setting": {"rbac": {"create": False}, "serviceAccount": {"automountServiceAccountToken": True}},
    # The latency predictor: upstream's switch with training settings, upstream's whole block (sidecar keys
    # ignored), off (the default config unchanged), with the routing-only example and a model PVC, and with
    # a custom config that has the producer (in flow style; an env entry of the user's wins over the mapped
    # one).
    "latency predictor --set": helm.parse_set_string(",".join(PREDICTOR_SETS)),
    "latency predictor upstream block": UPSTREAM_PREDICTOR,
    "latency predictor off": {"inferenceExtension": {"latencyPredictor": {"enabled": False}}},
    "latency predictor routing only, PVC": {
        "config": {"example": "predicted-latency"}, "latencyModels": {"persistentVolumeClaim": "epp-models"},
        "flags": {"latency-min-samples-for-retrain": 50}},
    "latency predictor custom config": {
        "inferenceExtension": {
            "latencyPredictor": {"enabled": True, "trainingServer": {"config": {
                "LATENCY_MIN_SAMPLES_FOR_RETRAIN": 20, "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET": 1000}}},
            "env": [{"name": "LATENCY_MIN_SAMPLES_FOR_RETRAIN", "value": "30"}],
            "pluginsCustomConfig": {"p.yaml": "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
                                              "plugins:\n- {type: predicted-latency-producer}\n- type: latency-scorer\n"
                                              "- type: max-score-picker\nschedulingProfiles:\n- name: default\n"
                                              "  plugins:\n  - pluginRef: latency-scorer\n"
                                              "  - pluginRef: max-score-picker\n"}}},
    "dashboard": {"dashboard": {"enabled": True}},
    # Metrics auth: forced on with static endpoints (a token Secret for the ServiceMonitor, no reader role),
    # and upstream's switch turning it off in InferencePool mode.
    "metrics auth static": {"endpoints": ["10.0.0.1:8000"], "metricsAuth": {"enabled": True, "readerClusterRole": False},
                            "serviceMonitor": {"enabled": True, "tokenSecretName": "prom-token"}},
    # Mutual TLS on ext_proc and TLS on the metrics port (the start-up check puts self-signed files where
    # the Secrets would be mounted).
    "mutual TLS and metrics TLS": {"tls": {"secretName": "epp-tls", "clientCaSecretName": "gateway-ca"},
                                   "metricsTls": {"secretName": "epp-metrics-tls"},
                                   "serviceMonitor": {"enabled": True}},
    "metrics auth upstream off": {"inferenceExtension": {"monitoring": {"prometheus": {
        "enabled": True, "auth": {"enabled": False}}}}},
    # Tracing: the native switch, and upstream's block (its keys win) with a user env entry that wins.
    "tracing": {"tracing": {"enabled": True, "sampling": {"sampler": "always_on"}}},
    "tracing upstream block": {
        "tracing": {"otelExporterEndpoint": "http://native:4317"},
        "inferenceExtension": {"tracing": {"enabled": True, "otelExporterEndpoint": "http://collector:4317",
                                           "sampling": {"samplerArg": 0.5}},
                               "env": [{"name": "OTEL_TRACES_SAMPLER", "value": "traceidratio"}]}},
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
    "model dir flag": ({"flags": {"latency-model-dir": "/tmp"}}, "use latencyModels"),
    "bad duration": ({"shutdownGracePeriod": "soon"}, "shutdownGracePeriod"),
    "replicas without leader election": ({"replicas": 2}, "replicas=2 needs leaderElection.enabled"),
    "active-active without a precise producer": (
        {"activeActive": {"enabled": True}, "replicas": 2},
        "activeActive needs the config to have one precise-prefix-cache-producer (it has 0)"),
    "active-active without speculation": (
        {"activeActive": {"enabled": True},
         "config": {"text": PRECISE_CONFIG.replace("speculativeIndexing: true", "speculativeIndexing: false")}},
        "precise-prefix-cache-producer needs speculativeIndexing: true"),
    "active-active with peers of its own": (
        {"activeActive": {"enabled": True}, "config": {"text": PRECISE_CONFIG.replace(
            "speculativeIndexing: true", "speculativeIndexing: true\n    speculativePeers: {listen: ':1', peers: ['x:1']}")}},
        "the chart sets the precise-prefix-cache-producer's speculativePeers itself"),
    "active-active and leader election": (
        {"activeActive": {"enabled": True}, "leaderElection": {"enabled": True}, "config": {"text": PRECISE_CONFIG}},
        "activeActive.enabled and leaderElection.enabled"),
    "active-active on the metrics port": (
        {"activeActive": {"enabled": True, "peerPort": 9090}, "config": {"text": PRECISE_CONFIG}},
        "activeActive.peerPort 9090 is one of epp's other ports"),
    "unknown upstream key": ({"inferenceExtension": {"replica": 2}}, "additional properties 'replica'"),
    "metrics TLS without auth": ({"endpoints": ["10.0.0.1:8000"], "metricsTls": {"secretName": "m"}},
                                 "metricsTls.secretName without metrics auth"),
    "client CA without TLS": ({"secureServing": False, "tls": {"clientCaSecretName": "ca"}},
                              "tls.clientCaSecretName is set but secureServing is false"),
    "metrics auth flag": ({"flags": {"metrics-endpoint-auth": False}}, "use metricsAuth.enabled instead"),
    "unknown sampler": ({"tracing": {"enabled": True, "sampling": {"sampler": "jaeger_remote"}}}, "sampler"),
    "latency predictor without its plugin": (
        {"inferenceExtension": {"latencyPredictor": {"enabled": True}}, "config": {"example": "flow-control"}},
        "config (config.example flow-control) has no predicted-latency-producer plugin"),
    "latency predictor, custom config without it": (
        {"inferenceExtension": {"latencyPredictor": {"enabled": True}}, "config": {"text": CUSTOM_CONFIG}},
        "config (config.text / inferenceExtension.pluginsCustomConfig) has no predicted-latency-producer"),
    "latency model type": (
        {"inferenceExtension": {"latencyPredictor": {
            "enabled": True, "trainingServer": {"config": {"LATENCY_MODEL_TYPE": "bayesian_ridge"}}}}},
        'trainingServer.config.LATENCY_MODEL_TYPE "bayesian_ridge": epp\'s in-process predictor trains XGBoost'),
    "model PVC with replicas": (
        {"latencyModels": {"persistentVolumeClaim": "m"}, "inferenceExtension": {"replicas": 2}},
        "latencyModels.persistentVolumeClaim with replicas=2"),
}
