//! epp's latency models: gradient-boosted regression trees that predict TTFT and
//! TPOT for every candidate endpoint of a request, in microseconds and without a sidecar.
//!
//! Why in process: llm-d runs the same models in Python prediction servers reached over HTTP, about 300
//! predictions per second each (llm-d/llm-d-latency-predictor:prediction/prediction_server.py). Here the
//! prediction is a walk over flattened arrays ([`Forest`]); models come from XGBoost's JSON format
//! ([`load_xgboost_json`], the outside anchor: the same predictions as xgboost itself) or from the
//! histogram trainer in [`train`], which produces the same [`Forest`]. [`features`] writes llm-d's
//! TTFT/TPOT feature rows (plus the accelerator class); [`window`] is the stratified sample window a
//! retrain reads.
//!
//! The core is pure and synchronous: no locks, no I/O on the prediction path, no clock. epp's
//! `predictor::online` runs it as a service (a training thread, atomic model swaps, model files, metrics),
//! and `predicted-latency-producer` wires that into routing. This crate depends on nothing of epp's.

mod error;
pub mod features;
mod forest;
pub mod train;
pub mod window;
mod xgboost;
mod xgboost_save;

pub use error::ModelError;
pub use forest::{Forest, Node, MAX_DEPTH};
pub use xgboost::{load_xgboost_json, XgbModel, XgbObjective};
pub use xgboost_save::save_xgboost_json;
