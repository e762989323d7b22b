//! XGBoost's JSON model format, read into a [`Forest`]: what `Booster.save_model("m.json")` writes and
//! what llm-d's training server serves at `/model/{ttft,tpot}/xgb/json`. This is the outside anchor: a
//! model trained by xgboost predicts here what it predicts in xgboost (tests/predictor_xgboost.rs).
//!
//! Format (dmlc/xgboost:doc/model.schema): `learner.learner_model_param.base_score` (a string, `"5E-1"`,
//! or since 3.x a list `"[5E-1]"`), `learner.objective`, and `learner.gradient_booster.model.trees[*]`
//! with parallel arrays per node. A leaf's value is its `split_conditions` entry (already scaled by the
//! learning rate). Identity-link objectives are accepted, and `reg:gamma`, whose log link predicts
//! `exp(margin)` and whose `base_score` is on the prediction's scale (the margin starts at its
//! logarithm); categorical splits, multi-target models and dart are refused by name.

use serde::Deserialize;

use super::error::ModelError;
use super::forest::{Forest, Node};

/// The training objective a model was saved with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum XgbObjective {
    /// `reg:squarederror`: predicts the mean.
    SquaredError,
    /// `reg:quantileerror` with one `quantile_alpha`: predicts that quantile.
    Quantile { alpha: f32 },
    /// `reg:absoluteerror`: predicts the median.
    AbsoluteError,
    /// `reg:gamma`: the forest's sum is ln(prediction). The forest read holds the margin (its base is
    /// ln `base_score`); the caller applies `exp`.
    Gamma,
}

/// A loaded XGBoost model.
#[derive(Debug, Clone)]
pub struct XgbModel {
    pub forest: Forest,
    pub objective: XgbObjective,
}

#[derive(Deserialize)]
struct ModelFile {
    learner: Learner,
}

#[derive(Deserialize)]
struct Learner {
    learner_model_param: ModelParam,
    gradient_booster: Booster,
    objective: Objective,
}

#[derive(Deserialize)]
struct ModelParam {
    base_score: String,
    num_feature: String,
    #[serde(default)]
    num_class: Option<String>,
    #[serde(default)]
    num_target: Option<String>,
}

#[derive(Deserialize)]
struct Booster {
    name: String,
    #[serde(default)]
    model: Option<GbTree>,
}

#[derive(Deserialize)]
struct GbTree {
    trees: Vec<JsonTree>,
}

#[derive(Deserialize)]
struct JsonTree {
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    split_indices: Vec<i64>,
    split_conditions: Vec<f64>,
    /// 0/1 in current versions, booleans in some older ones.
    default_left: Vec<serde_json::Value>,
    #[serde(default)]
    split_type: Vec<i64>,
}

#[derive(Deserialize)]
struct Objective {
    name: String,
    #[serde(default)]
    quantile_loss_param: Option<QuantileParam>,
}

#[derive(Deserialize)]
struct QuantileParam {
    quantile_alpha: String,
}

/// Reads an XGBoost JSON model. Every failure is a [`ModelError`] naming the field, tree or node.
pub fn load_xgboost_json(bytes: &[u8]) -> Result<XgbModel, ModelError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let file: ModelFile = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| ModelError::Json { path: e.path().to_string(), message: e.inner().to_string() })?;
    let learner = file.learner;
    let param = &learner.learner_model_param;
    let base_score = single_number("learner_model_param.base_score", &param.base_score)?;
    let num_feature = param.num_feature.parse::<usize>().map_err(|e| ModelError::Field {
        field: "learner_model_param.num_feature",
        message: e.to_string(),
    })?;
    for (field, value) in [("num_class", &param.num_class), ("num_target", &param.num_target)] {
        if value.as_deref().is_some_and(|v| v != "0" && v != "1") {
            return Err(ModelError::Unsupported(format!(
                "{field} = {} (one output only)",
                value.as_deref().unwrap_or("")
            )));
        }
    }
    let objective = match learner.objective.name.as_str() {
        "reg:squarederror" => XgbObjective::SquaredError,
        "reg:absoluteerror" => XgbObjective::AbsoluteError,
        "reg:gamma" => XgbObjective::Gamma,
        "reg:quantileerror" => {
            let alpha = learner.objective.quantile_loss_param.as_ref().map(|p| p.quantile_alpha.as_str());
            let alpha = alpha.ok_or(ModelError::Field {
                field: "objective.quantile_loss_param",
                message: "missing for reg:quantileerror".into(),
            })?;
            XgbObjective::Quantile {
                alpha: single_number("objective.quantile_loss_param.quantile_alpha", alpha)?,
            }
        }
        other => {
            return Err(ModelError::Unsupported(format!(
                "objective {other} (identity-link objectives and reg:gamma only)"
            )))
        }
    };
    let booster = learner.gradient_booster;
    if booster.name != "gbtree" {
        return Err(ModelError::Unsupported(format!("booster {} (gbtree only)", booster.name)));
    }
    let model = booster.model.ok_or(ModelError::Field {
        field: "gradient_booster.model",
        message: "missing for a gbtree booster".into(),
    })?;
    let trees = model
        .trees
        .iter()
        .enumerate()
        .map(|(t, tree)| convert_tree(t, tree))
        .collect::<Result<Vec<_>, _>>()?;
    let base_margin = match objective {
        XgbObjective::Gamma if base_score > 0.0 => base_score.ln(),
        XgbObjective::Gamma => {
            return Err(ModelError::Field {
                field: "learner_model_param.base_score",
                message: format!("{base_score} is not positive (reg:gamma takes its logarithm)"),
            })
        }
        _ => base_score,
    };
    let forest = Forest::from_trees(num_feature, base_margin, &trees)?;
    Ok(XgbModel { forest, objective })
}

/// A number XGBoost writes as a string: `"5E-1"`, or a one-element list `"[5E-1]"` (xgboost ≥ 3.0).
fn single_number(field: &'static str, text: &str) -> Result<f32, ModelError> {
    let inner = text.trim().strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text).trim();
    if inner.contains(',') {
        return Err(ModelError::Unsupported(format!("{field} = {text:?} (one output only)")));
    }
    let value = inner
        .parse::<f32>()
        .map_err(|e| ModelError::Field { field, message: format!("{text:?} is not a number: {e}") })?;
    if !value.is_finite() {
        return Err(ModelError::Field { field, message: format!("{text:?} is not finite") });
    }
    Ok(value)
}

/// One JSON tree into [`Node`]s, checking that the parallel arrays agree.
fn convert_tree(t: usize, tree: &JsonTree) -> Result<Vec<Node>, ModelError> {
    let n = tree.left_children.len();
    let lengths = [
        ("right_children", tree.right_children.len()),
        ("split_indices", tree.split_indices.len()),
        ("split_conditions", tree.split_conditions.len()),
        ("default_left", tree.default_left.len()),
    ];
    for (name, len) in lengths {
        if len != n {
            let message = format!("{name} has {len} entries, left_children {n}");
            return Err(ModelError::Tree { tree: t, node: 0, message });
        }
    }
    if let Some(node) = tree.split_type.iter().position(|&kind| kind != 0) {
        return Err(ModelError::Unsupported(format!("tree {t}, node {node}: categorical split")));
    }
    let node_error = |node: usize, message: String| ModelError::Tree { tree: t, node, message };
    (0..n)
        .map(|i| {
            let (left, right) = (tree.left_children[i], tree.right_children[i]);
            let value = tree.split_conditions[i] as f32;
            if left == -1 && right == -1 {
                return Ok(Node::Leaf(value));
            }
            let child = |c: i64| u32::try_from(c).map_err(|_| node_error(i, format!("child index {c}")));
            let feature = u32::try_from(tree.split_indices[i])
                .map_err(|_| node_error(i, format!("split index {}", tree.split_indices[i])))?;
            let default_left = match &tree.default_left[i] {
                serde_json::Value::Bool(b) => *b,
                serde_json::Value::Number(n) if n.as_u64() == Some(0) || n.as_u64() == Some(1) => {
                    n.as_u64() == Some(1)
                }
                other => {
                    return Err(node_error(i, format!("default_left is {other}, not 0, 1 or a boolean")))
                }
            };
            Ok(Node::Split {
                feature,
                threshold: value,
                default_left,
                left: child(left)?,
                right: child(right)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-written model in xgboost 3.x's shape: one depth-1 tree on feature 1.
    fn model(base_score: &str, objective: &str, tree: &str) -> String {
        format!(
            r#"{{"learner":{{"learner_model_param":{{"base_score":"{base_score}","num_feature":"2","num_class":"0","num_target":"1"}},
            "objective":{objective},
            "gradient_booster":{{"name":"gbtree","model":{{"trees":[{tree}]}}}}}},"version":[3,2,0]}}"#
        )
    }
    const TREE: &str = r#"{"left_children":[1,-1,-1],"right_children":[2,-1,-1],"split_indices":[1,0,0],
        "split_conditions":[0.5,-1.0,2.0],"default_left":[1,0,0],"split_type":[0,0,0],"base_weights":[0,0,0]}"#;
    const SQUARED: &str = r#"{"name":"reg:squarederror"}"#;

    #[test]
    fn reads_base_score_objective_and_trees() {
        let m = load_xgboost_json(model("[5E-1]", SQUARED, TREE).as_bytes()).unwrap();
        assert_eq!(m.objective, XgbObjective::SquaredError);
        assert_eq!(m.forest.predict_one(&[0.0, 0.25]), -0.5);
        assert_eq!(m.forest.predict_one(&[0.0, 0.5]), 2.5);
        assert_eq!(m.forest.predict_one(&[0.0, f32::NAN]), -0.5, "default_left");
        let quantile = r#"{"name":"reg:quantileerror","quantile_loss_param":{"quantile_alpha":"[9E-1]"}}"#;
        let m = load_xgboost_json(model("5E-1", quantile, TREE).as_bytes()).unwrap();
        assert_eq!(m.objective, XgbObjective::Quantile { alpha: 0.9 });
    }

    #[test]
    fn malformed_files_are_errors_that_say_what_is_wrong() {
        let cases = [
            ("not json".to_string(), "model JSON"),
            (r#"{"learner":{}}"#.to_string(), "learner_model_param"),
            (model("half", SQUARED, TREE), "base_score"),
            (model("[1,2]", SQUARED, TREE), "one output"),
            (model("0.5", r#"{"name":"binary:logistic"}"#, TREE), "binary:logistic"),
            (model("0", r#"{"name":"reg:gamma"}"#, TREE), "not positive"),
            (model("0.5", r#"{"name":"reg:quantileerror"}"#, TREE), "quantile_loss_param"),
            (model("0.5", SQUARED, &TREE.replace("[1,-1,-1]", "[1,-1]")), "right_children has 3"),
            (model("0.5", SQUARED, &TREE.replace("[1,-1,-1]", "[9,-1,-1]")), "child 9"),
            (
                model("0.5", SQUARED, &TREE.replace("\"split_indices\":[1", "\"split_indices\":[7")),
                "feature 7",
            ),
            (
                model("0.5", SQUARED, &TREE.replace("\"split_type\":[0,0,0]", "\"split_type\":[1,0,0]")),
                "categorical",
            ),
            (
                model("0.5", SQUARED, &TREE.replace("\"default_left\":[1", "\"default_left\":[2")),
                "default_left is 2",
            ),
            (model("0.5", SQUARED, &TREE.replace("[0.5,-1.0,2.0]", "[0.5,\"x\",2.0]")), "split_conditions"),
        ];
        for (text, expected) in cases {
            let err = load_xgboost_json(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{err:?} should mention {expected:?}");
        }
    }
}
