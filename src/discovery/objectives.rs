//! `InferenceObjective` and `InferenceModelRewrite` objects → [`Policies`], as upstream reads them
//! (`kubernetes-sigs/gateway-api-inference-extension:apix/v1alpha2/inferenceobjective_types.go`,
//! `.../inferencemodelrewrite_types.go`, `pkg/epp/controller/inferenceobjective_reconciler.go`):
//!
//! - only objects whose `spec.poolRef` names this pool (`name`, and `group`, which defaults to
//!   `inference.networking.k8s.io`) and that are not being deleted count;
//! - an objective's priority is `spec.priority` (unset: 0), keyed by the object's name, which requests
//!   name in `x-gateway-inference-objective`;
//! - rewrite rules: an `Exact` model match beats a rule without `matches` (a catch-all); ties go to the
//!   oldest object (creation timestamp), then to the first rule in the object's list. A target's weight
//!   is `weight` (unset: 1).
//!
//! The same kinds exist in two API groups (GIE's `inference.networking.x-k8s.io` and llm-d-router's
//! `llm-d.ai`); objects of both are merged under the same rules.

use std::collections::hash_map::Entry;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

use super::spec::GROUP_V1;
use crate::request::{Policies, WeightedRewrite};

/// The llm-d-router API group of the two kinds (`llm-d/llm-d-router:apix/v1alpha2`).
pub const GROUP_LLM_D: &str = "llm-d.ai";
/// The two kinds' version in both groups.
pub const POLICY_VERSION: &str = "v1alpha2";

/// Which of the two kinds a collection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    Objective,
    ModelRewrite,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 2] = [PolicyKind::Objective, PolicyKind::ModelRewrite];

    /// The collection of this kind in `group`.
    pub fn resource(self, group: &str) -> ApiResource {
        let (kind, plural) = match self {
            Self::Objective => ("InferenceObjective", "inferenceobjectives"),
            Self::ModelRewrite => ("InferenceModelRewrite", "inferencemodelrewrites"),
        };
        ApiResource {
            group: group.to_string(),
            version: POLICY_VERSION.to_string(),
            api_version: format!("{group}/{POLICY_VERSION}"),
            kind: kind.to_string(),
            plural: plural.to_string(),
        }
    }
}

/// The pool the objects must reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRef {
    pub group: String,
    pub name: String,
}

impl PoolRef {
    fn referenced_by(&self, object: &DynamicObject) -> bool {
        let pool_ref = &object.data["spec"]["poolRef"];
        object.metadata.deletion_timestamp.is_none()
            && pool_ref["name"].as_str() == Some(self.name.as_str())
            && pool_ref["group"].as_str().unwrap_or(GROUP_V1) == self.group
    }
}

/// Sort key of an object: oldest first, then by name (a deterministic order for equal timestamps).
fn age_key(object: &DynamicObject) -> (Option<Time>, String) {
    (object.metadata.creation_timestamp.clone(), object.metadata.name.clone().unwrap_or_default())
}

/// The policies of `objects` (of either kind, from either group) that reference `pool`.
pub fn policies<'a>(
    pool: &PoolRef,
    objects: impl IntoIterator<Item = (PolicyKind, &'a DynamicObject)>,
) -> Policies {
    let mut objectives = Vec::new();
    let mut rewrites = Vec::new();
    for (kind, object) in objects.into_iter().filter(|(_, o)| pool.referenced_by(o)) {
        match kind {
            PolicyKind::Objective => objectives.push(object),
            PolicyKind::ModelRewrite => rewrites.push(object),
        }
    }
    objectives.sort_by_key(|o| age_key(o));
    rewrites.sort_by_key(|o| age_key(o));
    let mut out = Policies::default();
    for object in objectives {
        let Some(name) = object.metadata.name.clone() else { continue };
        let priority = object.data["spec"]["priority"].as_i64().unwrap_or(0);
        let priority = i32::try_from(priority).unwrap_or(if priority < 0 { i32::MIN } else { i32::MAX });
        // The oldest object of a name wins (the same name can exist in both groups).
        out.objectives.entry(name).or_insert(priority);
    }
    for object in rewrites {
        let name = object.metadata.name.clone().unwrap_or_default();
        let rules = object.data["spec"]["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
        for rule in rules {
            let Some(rewrite) = weighted(&name, rule) else { continue };
            let matches = rule["matches"].as_array().map(Vec::as_slice).unwrap_or_default();
            if matches.is_empty() {
                out.fallback = out.fallback.or(Some(rewrite));
                continue;
            }
            for model in matches.iter().filter_map(exact_model) {
                if let Entry::Vacant(slot) = out.rewrites.entry(model.to_string()) {
                    slot.insert(rewrite.clone());
                }
            }
        }
    }
    out
}

/// A rule's targets, or `None` (logged) when it has none usable.
fn weighted(name: &str, rule: &Value) -> Option<WeightedRewrite> {
    let targets: Vec<(String, f64)> = rule["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let model = t["modelRewrite"].as_str().filter(|m| !m.is_empty())?;
            Some((model.to_string(), t["weight"].as_f64().unwrap_or(1.0).max(0.0)))
        })
        .collect();
    if targets.is_empty() {
        tracing::warn!(rewrite = name, "InferenceModelRewrite rule without a target model; ignored");
        return None;
    }
    Some(WeightedRewrite { name: name.to_string(), targets })
}

/// The model of an `Exact` match (the only type there is; unset means `Exact`).
fn exact_model(m: &Value) -> Option<&str> {
    let model = &m["model"];
    let exact = model["type"].as_str().is_none_or(|t| t == "Exact");
    model["value"].as_str().filter(|v| exact && !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn object(kind: &str, name: &str, created: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": kind,
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec,
        }))
        .expect("object")
    }

    fn pool() -> PoolRef {
        PoolRef { group: GROUP_V1.into(), name: "pool".into() }
    }

    fn objective(name: &str, created: &str, priority: Option<i64>, pool: &str) -> DynamicObject {
        let mut spec = json!({"poolRef": {"name": pool}});
        if let Some(p) = priority {
            spec["priority"] = json!(p);
        }
        object("InferenceObjective", name, created, spec)
    }

    fn rewrite(name: &str, created: &str, rules: Value) -> DynamicObject {
        object("InferenceModelRewrite", name, created, json!({"poolRef": {"name": "pool"}, "rules": rules}))
    }

    #[test]
    fn objectives_of_this_pool_only_with_priority_zero_by_default() {
        let objects = [
            objective("critical", "2026-01-01T00:00:00Z", Some(100), "pool"),
            objective("plain", "2026-01-01T00:00:00Z", None, "pool"),
            objective("elsewhere", "2026-01-01T00:00:00Z", Some(5), "other-pool"),
        ];
        let mut other_group = objective("batch", "2026-01-01T00:00:00Z", Some(-1), "pool");
        other_group.data["spec"]["poolRef"]["group"] = json!("inference.networking.x-k8s.io");
        let all = objects.iter().chain([&other_group]).map(|o| (PolicyKind::Objective, o));
        let got = policies(&pool(), all);
        assert_eq!(got.objectives, HashMap::from([("critical".into(), 100), ("plain".into(), 0)]));
    }

    #[test]
    fn exact_matches_beat_the_catch_all_and_the_oldest_object_wins() {
        let target = |m: &str, w: Option<u32>| match w {
            Some(w) => json!({"modelRewrite": m, "weight": w}),
            None => json!({"modelRewrite": m}),
        };
        let older = rewrite(
            "older",
            "2026-01-01T00:00:00Z",
            json!([
                {"targets": [target("base", None)]},
                {"matches": [{"model": {"type": "Exact", "value": "m"}}], "targets": [target("m-v1", Some(90)), target("m-v2", Some(10))]},
            ]),
        );
        let newer = rewrite(
            "newer",
            "2026-02-01T00:00:00Z",
            json!([
                {"matches": [{"model": {"value": "m"}}, {"model": {"value": "n"}}], "targets": [target("x", None)]},
                {"targets": [target("other-base", None)]},
            ]),
        );
        let got = policies(&pool(), [&newer, &older].map(|o| (PolicyKind::ModelRewrite, o)));
        let m = got.rewrite_for("m").expect("m is rewritten");
        assert_eq!(
            (m.name.as_str(), m.targets.clone()),
            ("older", vec![("m-v1".into(), 90.0), ("m-v2".into(), 10.0)])
        );
        assert_eq!(got.rewrite_for("n").map(|r| r.targets[0].0.as_str()), Some("x"));
        assert_eq!(got.rewrite_for("unknown").map(|r| r.targets[0].0.as_str()), Some("base"));
    }
}
