//! A [`Forest`] written in XGBoost's JSON model format, the inverse of [`load_xgboost_json`]: epp's own
//! models are files that `xgboost.Booster().load_model(path)` reads and predicts with exactly as epp does
//! (tests/predictor_xgboost.rs checks that with the real xgboost), and that epp reads back as a warm start.
//!
//! Why XGBoost's format and not one of our own: it is the format llm-d's training server serves
//! (`/model/{ttft,tpot}/xgb/json`), so a model trained by epp can seed llm-d and the other way round, and
//! any tool that reads XGBoost models can inspect it. Fields follow dmlc/xgboost:doc/model.schema as
//! xgboost 3.x writes them; statistics only training uses (`loss_changes`, `sum_hessian`) are written as
//! zeros, which prediction never reads.
//!
//! [`load_xgboost_json`]: super::load_xgboost_json

use serde_json::{json, Value};

use super::error::ModelError;
use super::forest::{Forest, Node};
use super::xgboost::XgbObjective;

/// XGBoost's "no parent" marker for the root (`std::numeric_limits<int32_t>::max()`).
const NO_PARENT: i64 = i32::MAX as i64;

/// The model as XGBoost JSON bytes. `feature_names` become the model's feature names (XGBoost then
/// checks them against a named `DMatrix`); pass none to leave them out, or exactly `n_features` names.
pub fn save_xgboost_json(
    forest: &Forest,
    objective: XgbObjective,
    feature_names: &[&str],
) -> Result<Vec<u8>, ModelError> {
    if !feature_names.is_empty() && feature_names.len() != forest.n_features() {
        return Err(ModelError::Field {
            field: "learner.feature_names",
            message: format!("{} names for {} features", feature_names.len(), forest.n_features()),
        });
    }
    if !forest.base_score().is_finite() {
        return Err(ModelError::Field {
            field: "learner_model_param.base_score",
            message: format!("{} is not finite", forest.base_score()),
        });
    }
    let trees = (0..forest.n_trees())
        .map(|t| tree_json(t, &forest.tree_nodes(t), forest.n_features()))
        .collect::<Result<Vec<_>, _>>()?;
    let n_trees = trees.len();
    // reg:gamma's base_score is on the prediction's scale: xgboost starts the margin at its logarithm.
    let base_score = match objective {
        XgbObjective::Gamma => forest.base_score().exp(),
        _ => forest.base_score(),
    };
    let objective = match objective {
        XgbObjective::SquaredError => {
            json!({"name": "reg:squarederror", "reg_loss_param": {"scale_pos_weight": "1"}})
        }
        XgbObjective::AbsoluteError => json!({"name": "reg:absoluteerror"}),
        XgbObjective::Gamma => json!({"name": "reg:gamma", "reg_loss_param": {"scale_pos_weight": "1"}}),
        XgbObjective::Quantile { alpha } => json!({
            "name": "reg:quantileerror",
            "quantile_loss_param": {"quantile_alpha": format!("[{alpha:E}]")}
        }),
    };
    let model = json!({
        "learner": {
            "attributes": {},
            "feature_names": feature_names,
            "feature_types": if feature_names.is_empty() { vec![] } else { vec!["float"; feature_names.len()] },
            "gradient_booster": {
                "model": {
                    "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": n_trees.to_string()},
                    "iteration_indptr": (0..=n_trees).collect::<Vec<_>>(),
                    "tree_info": vec![0; n_trees],
                    "trees": trees,
                },
                "name": "gbtree"
            },
            "learner_model_param": {
                "base_score": format!("[{:E}]", base_score),
                "boost_from_average": "1",
                "num_class": "0",
                "num_feature": forest.n_features().to_string(),
                "num_target": "1"
            },
            "objective": objective
        },
        "version": [3, 2, 0]
    });
    serde_json::to_vec(&model).map_err(|e| ModelError::Json { path: String::new(), message: e.to_string() })
}

/// One tree's parallel arrays. A value JSON cannot hold (a non-finite leaf or threshold) is an error,
/// since serde_json would silently write `null` in its place.
fn tree_json(t: usize, nodes: &[Node], n_features: usize) -> Result<Value, ModelError> {
    let n = nodes.len();
    let (mut left, mut right, mut parents) = (vec![-1i64; n], vec![-1i64; n], vec![NO_PARENT; n]);
    let (mut indices, mut conditions, mut default_left) = (vec![0u32; n], vec![0.0f32; n], vec![0u8; n]);
    let mut base_weights = vec![0.0f32; n];
    for (i, node) in nodes.iter().enumerate() {
        let value = match *node {
            Node::Split { feature, threshold, default_left: dl, left: l, right: r } => {
                (left[i], right[i]) = (i64::from(l), i64::from(r));
                for child in [l, r] {
                    parents[child as usize] = i as i64;
                }
                indices[i] = feature;
                default_left[i] = u8::from(dl);
                threshold
            }
            Node::Leaf(value) => {
                base_weights[i] = value;
                value
            }
        };
        if !value.is_finite() {
            let message = format!("{value} cannot be written to JSON");
            return Err(ModelError::Tree { tree: t, node: i, message });
        }
        conditions[i] = value;
    }
    Ok(json!({
        "base_weights": base_weights,
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
        "default_left": default_left,
        "id": t,
        "left_children": left,
        "loss_changes": vec![0.0f32; n],
        "parents": parents,
        "right_children": right,
        "split_conditions": conditions,
        "split_indices": indices,
        "split_type": vec![0u8; n],
        "sum_hessian": vec![0.0f32; n],
        "tree_param": {
            "num_deleted": "0",
            "num_feature": n_features.to_string(),
            "num_nodes": n.to_string(),
            "size_leaf_vector": "1"
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_xgboost_json;

    fn split(feature: u32, threshold: f32, default_left: bool, left: u32, right: u32) -> Node {
        Node::Split { feature, threshold, default_left, left, right }
    }

    #[test]
    fn a_saved_model_loads_back_with_the_same_predictions_and_objective() {
        let first = vec![
            split(0, 1.0, false, 1, 2),
            split(1, 5.0, true, 3, 4),
            Node::Leaf(0.3),
            Node::Leaf(-1.25),
            Node::Leaf(2.0e-7),
        ];
        let trees = vec![first, vec![Node::Leaf(0.125)]];
        let forest = Forest::from_trees(2, 123.456, &trees).unwrap();
        for objective in [XgbObjective::SquaredError, XgbObjective::Quantile { alpha: 0.9 }] {
            let bytes = save_xgboost_json(&forest, objective, &["a", "b"]).unwrap();
            let loaded = load_xgboost_json(&bytes).unwrap();
            assert_eq!(loaded.objective, objective);
            for row in [[0.0, 0.0], [0.0, 5.0], [2.0, 0.0], [f32::NAN, 1.0], [0.5, f32::NAN]] {
                let (x, y) = (forest.predict_one(&row), loaded.forest.predict_one(&row));
                assert_eq!(x.to_bits(), y.to_bits(), "row {row:?}");
            }
        }
    }

    #[test]
    fn a_log_link_model_saves_its_base_on_the_prediction_scale_and_loads_back() {
        let trees = vec![vec![split(0, 1.0, false, 1, 2), Node::Leaf(0.5), Node::Leaf(-0.25)]];
        let forest = Forest::from_trees(1, 3.5, &trees).unwrap();
        let bytes = save_xgboost_json(&forest, XgbObjective::Gamma, &["a"]).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("reg:gamma"), "{text}");
        let loaded = load_xgboost_json(&bytes).unwrap();
        assert_eq!(loaded.objective, XgbObjective::Gamma);
        for row in [[0.0], [2.0]] {
            let (x, y) = (forest.predict_one(&row), loaded.forest.predict_one(&row));
            assert!((x - y).abs() < 1e-5, "row {row:?}: {x} vs {y}");
        }
    }

    #[test]
    fn names_must_match_the_features() {
        let forest = Forest::from_trees(2, 0.0, &[vec![Node::Leaf(1.0)]]).unwrap();
        let err = save_xgboost_json(&forest, XgbObjective::SquaredError, &["only"]).unwrap_err();
        assert!(err.to_string().contains("1 names for 2 features"), "{err}");
        assert!(save_xgboost_json(&forest, XgbObjective::SquaredError, &[]).is_ok());
    }
}
