//! `label-selector-filter` (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/filter/bylabel/
//! selector.go): keeps the pods whose labels match a Kubernetes `LabelSelector` — `matchLabels`, and
//! `matchExpressions` with the operators `In`, `NotIn`, `Exists` and `DoesNotExist`, all of which must hold
//! (an empty selector keeps every pod, as in Kubernetes). Its deprecated names are accepted with a warning:
//! `by-label-selector` (same parameters) and `by-label` (`label`, `validValues`, `allowsNoLabel`).
//!
//! The selector is checked at startup as the API server checks one: `In` and `NotIn` need values,
//! `Exists` and `DoesNotExist` take none, and an unknown operator or parameter names the field.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, FactoryContext, Filter, PluginError, SchedulingRequest,
};

pub(crate) const TYPE_NAME: &str = "label-selector-filter";
pub(crate) const DEPRECATED_SELECTOR: &str = "by-label-selector";
pub(crate) const DEPRECATED_BY_LABEL: &str = "by-label";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SelectorParams {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<ExpressionParams>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpressionParams {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ByLabelParams {
    label: String,
    #[serde(default)]
    valid_values: Vec<String>,
    #[serde(default)]
    allows_no_label: bool,
}

/// One condition on a pod's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    /// The label is present with one of the values, or (`or_absent`) missing.
    In {
        key: String,
        values: Vec<String>,
        or_absent: bool,
    },
    /// The label is missing or has none of the values.
    NotIn {
        key: String,
        values: Vec<String>,
    },
    Exists {
        key: String,
    },
    DoesNotExist {
        key: String,
    },
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In { key, values, or_absent } => {
                labels.get(key).map_or(*or_absent, |v| values.iter().any(|x| x == v))
            }
            Requirement::NotIn { key, values } => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists { key } => labels.contains_key(key),
            Requirement::DoesNotExist { key } => !labels.contains_key(key),
        }
    }
}

/// Keeps the pods whose labels meet every requirement.
#[derive(Debug, Clone)]
pub(crate) struct LabelSelectorFilter {
    requirements: Vec<Requirement>,
}

impl Filter for LabelSelectorFilter {
    fn filter(&self, _: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        kept.retain(|&i| self.requirements.iter().all(|r| r.matches(&candidates[i].endpoint.labels)));
    }
}

fn requirements(p: SelectorParams) -> Result<Vec<Requirement>, String> {
    let mut out: Vec<Requirement> = p
        .match_labels
        .into_iter()
        .map(|(key, value)| Requirement::In { key, values: vec![value], or_absent: false })
        .collect();
    for (i, e) in p.match_expressions.into_iter().enumerate() {
        let field = format!("matchExpressions[{i}]");
        if e.key.is_empty() {
            return Err(format!("{field}.key must not be empty"));
        }
        if !matches!(e.operator.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist") {
            return Err(format!(
                "{field}.operator {:?} is not one of In, NotIn, Exists, DoesNotExist",
                e.operator
            ));
        }
        let needs_values = matches!(e.operator.as_str(), "In" | "NotIn");
        if needs_values && e.values.is_empty() {
            return Err(format!("{field}.values must not be empty for operator {}", e.operator));
        }
        if !needs_values && !e.values.is_empty() {
            return Err(format!("{field}.values must be empty for operator {}", e.operator));
        }
        let (key, values) = (e.key, e.values);
        out.push(match e.operator.as_str() {
            "In" => Requirement::In { key, values, or_absent: false },
            "NotIn" => Requirement::NotIn { key, values },
            "Exists" => Requirement::Exists { key },
            _ => Requirement::DoesNotExist { key },
        });
    }
    Ok(out)
}

fn build_selector(
    type_name: &'static str,
    name: &str,
    params: Option<&serde_json::Value>,
) -> Result<BuiltPlugin, PluginError> {
    let p: SelectorParams = parse_params(name, type_name, params)?;
    let requirements = requirements(p).map_err(|m| PluginError::new(name, type_name, m))?;
    Ok(BuiltPlugin::new(type_name, name).filter(Arc::new(LabelSelectorFilter { requirements })))
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    build_selector(TYPE_NAME, name, params)
}

pub(crate) fn deprecated_selector_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    tracing::warn!(plugin = name, "plugin type {DEPRECATED_SELECTOR:?} is deprecated; use {TYPE_NAME:?}");
    build_selector(DEPRECATED_SELECTOR, name, params)
}

pub(crate) fn deprecated_by_label_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    tracing::warn!(
        plugin = name,
        "plugin type {DEPRECATED_BY_LABEL:?} is deprecated; use {TYPE_NAME:?}, or the role filters"
    );
    let err = |m: &str| PluginError::new(name, DEPRECATED_BY_LABEL, m);
    let p: ByLabelParams = parse_params(name, DEPRECATED_BY_LABEL, params)?;
    if p.label.is_empty() {
        return Err(err("parameter 'label' must not be empty"));
    }
    if p.valid_values.is_empty() && !p.allows_no_label {
        return Err(err("either 'validValues' must be non-empty or 'allowsNoLabel' must be true"));
    }
    let requirement = Requirement::In { key: p.label, values: p.valid_values, or_absent: p.allows_no_label };
    let filter = LabelSelectorFilter { requirements: vec![requirement] };
    Ok(BuiltPlugin::new(DEPRECATED_BY_LABEL, name).filter(Arc::new(filter)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    fn pool() -> Vec<Candidate> {
        let tier = |n, t: Option<&str>, zone: Option<&str>| {
            Candidate::new(labelled_endpoint(n, &[("tier", t), ("zone", zone)]))
        };
        vec![tier(1, Some("gold"), Some("a")), tier(2, Some("silver"), None), tier(3, None, Some("b"))]
    }

    fn kept(factory: FactoryFn, params: serde_json::Value) -> Vec<usize> {
        let built = build(factory, params).unwrap();
        let c = pool();
        let f = RequestFixture::empty();
        let mut kept: Vec<usize> = (0..c.len()).collect();
        built.filter.unwrap().filter(&f.request(), &c, &mut kept);
        kept
    }

    #[test]
    fn match_labels_and_expressions_must_all_hold() {
        assert_eq!(kept(factory, json!({"matchLabels": {"tier": "gold"}})), [0]);
        let expr = |op: &str, values: serde_json::Value| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]});
        assert_eq!(kept(factory, expr("In", json!(["gold", "silver"]))), [0, 1]);
        assert_eq!(kept(factory, expr("NotIn", json!(["gold"]))), [1, 2]);
        assert_eq!(kept(factory, expr("Exists", json!([]))), [0, 1]);
        assert_eq!(kept(factory, expr("DoesNotExist", json!([]))), [2]);
        let both = json!({"matchLabels": {"zone": "a"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]});
        assert_eq!(kept(factory, both), [0]);
        assert_eq!(kept(factory, json!({})), [0, 1, 2]);
    }

    #[test]
    fn bad_selectors_name_the_field() {
        let expr = |op: &str, values: serde_json::Value| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]});
        assert_rejects(factory, expr("In", json!([])), "matchExpressions[0].values");
        assert_rejects(factory, expr("Exists", json!(["x"])), "matchExpressions[0].values");
        assert_rejects(factory, expr("Like", json!(["x"])), "matchExpressions[0].operator");
        assert_rejects(factory, json!({"matchLabel": {}}), "matchLabel");
    }

    #[test]
    fn deprecated_names_still_work() {
        assert_eq!(kept(deprecated_selector_factory, json!({"matchLabels": {"tier": "silver"}})), [1]);
        let by_label = json!({"label": "tier", "validValues": ["gold"], "allowsNoLabel": true});
        assert_eq!(kept(deprecated_by_label_factory, by_label), [0, 2]);
        assert_rejects(deprecated_by_label_factory, json!({"label": "tier"}), "validValues");
    }
}
