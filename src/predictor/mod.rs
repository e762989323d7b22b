//! The in-process latency predictor (issue 8): the models are the `epp-predictor` crate
//! (crates/predictor: trees, XGBoost JSON, the trainer, feature rows, the sample window), re-exported here
//! so the rest of epp names them `crate::predictor::…`; [`online`] runs them as a service (a training
//! thread, atomic model swaps, model files, metrics) and is the only part that imports from the rest of
//! epp (`crate::metrics`). `predicted-latency-producer` (in scheduling) wires it into routing through
//! [`online::PredictorHub`].

pub mod online;

pub use epp_predictor::{
    features, load_xgboost_json, save_xgboost_json, train, window, Forest, ModelError, Node, XgbModel,
    XgbObjective, MAX_DEPTH,
};
