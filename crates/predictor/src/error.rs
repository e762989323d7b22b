//! Why a model could not be built or loaded. Every failure names what is wrong (the JSON path, the tree
//! and node, the value) so that a bad model file is a readable startup error, never a panic.

use thiserror::Error;

/// A model that cannot be turned into a [`Forest`](super::Forest).
#[derive(Debug, Error)]
pub enum ModelError {
    /// The file is not JSON, or a field is missing or has the wrong type; `path` is the JSON path.
    #[error("model JSON at {path}: {message}")]
    Json { path: String, message: String },
    /// A field parsed but holds a value the model cannot have (e.g. a base_score that is not a number).
    #[error("model field {field}: {message}")]
    Field { field: &'static str, message: String },
    /// XGBoost features the engine does not implement (another booster, objective, categorical splits…).
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A tree's arrays disagree with each other or point outside the tree.
    #[error("tree {tree}, node {node}: {message}")]
    Tree { tree: usize, node: usize, message: String },
    /// A tree deeper than the flattened layout holds (every tree is stored as a complete binary tree).
    #[error("tree {tree} is deeper than {max} levels (the flattened layout's limit)")]
    TooDeep { tree: usize, max: u32 },
}
