//! Pod, InferencePool, InferenceObjective, InferenceModelRewrite and Lease objects as the API server returns them, for tests to apply to the fake.

use serde_json::{json, Map, Value};

fn map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>())
}

/// A running pod with `ip`, `labels`, and condition Ready = `ready`.
pub fn pod(name: &str, ip: &str, labels: &[(&str, &str)], ready: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": map(labels)},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    })
}

/// `pod` with an annotation set.
pub fn annotated(mut pod: Value, key: &str, value: &str) -> Value {
    pod["metadata"]["annotations"][key] = json!(value);
    pod
}

/// `pod` being deleted (deletionTimestamp set; still Ready, as kubelet has not reported yet).
pub fn terminating(mut pod: Value) -> Value {
    pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    pod
}

/// An `inference.networking.k8s.io/v1` InferencePool.
pub fn inference_pool(name: &str, selector: &[(&str, &str)], target_ports: &[u16]) -> Value {
    let ports: Vec<Value> = target_ports.iter().map(|p| json!({"number": p})).collect();
    json!({
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": map(selector)},
            "targetPorts": ports,
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    })
}

/// An `inference.networking.x-k8s.io/v1alpha2` InferencePool (one target port).
pub fn inference_pool_v1alpha2(name: &str, selector: &[(&str, &str)], target_port: u16) -> Value {
    json!({
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {"selector": map(selector), "targetPortNumber": target_port, "extensionRef": {"name": "epp"}},
    })
}

/// A coordination.k8s.io/v1 Lease held by `holder` (empty: released).
pub fn lease(name: &str, holder: &str, duration_secs: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_secs},
    })
}

/// A `<group>/v1alpha2` InferenceObjective of `priority` (none: unset) referencing the v1 pool `pool`.
pub fn inference_objective(group: &str, name: &str, pool: &str, priority: Option<i32>) -> Value {
    let mut spec =
        json!({"poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool}});
    if let Some(priority) = priority {
        spec["priority"] = json!(priority);
    }
    json!({"apiVersion": format!("{group}/v1alpha2"), "kind": "InferenceObjective",
           "metadata": {"name": name}, "spec": spec})
}

/// A `<group>/v1alpha2` InferenceModelRewrite referencing the v1 pool `pool` with one rule: requests for
/// `model` (none: every model) go to `targets` (model, weight).
pub fn inference_model_rewrite(
    group: &str,
    name: &str,
    pool: &str,
    model: Option<&str>,
    targets: &[(&str, u32)],
) -> Value {
    let matches: Vec<Value> =
        model.map(|m| json!({"model": {"type": "Exact", "value": m}})).into_iter().collect();
    let targets: Vec<Value> = targets.iter().map(|(m, w)| json!({"modelRewrite": m, "weight": w})).collect();
    json!({
        "apiVersion": format!("{group}/v1alpha2"),
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name},
        "spec": {
            "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool},
            "rules": [{"matches": matches, "targets": targets}],
        },
    })
}
