"""Rendering the chart with helm-python-sdk and validating each manifest strictly: Kubernetes' own kinds
against the OpenAPI schemas kubernetes-validate ships, custom resources against strict CRD subsets
(deploy/helm/check/crd-subsets.yaml; no CRD schemas ship with kubernetes-validate)."""

import jsonschema
import kubernetes_validate
import yaml

from .common import CHECK_DIR, KUBE_VERSIONS, NAMESPACE, RELEASE, CheckFailed, expect

CRD_SUBSETS = yaml.safe_load((CHECK_DIR / "crd-subsets.yaml").read_text())
SERVICE_MONITOR_SCHEMA = CRD_SUBSETS["ServiceMonitor"]
INFERENCE_POOL_SCHEMAS = CRD_SUBSETS["InferencePool"]
OBJECT_META = CRD_SUBSETS["objectMeta"]


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
