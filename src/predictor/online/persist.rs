//! Models on disk: a directory holding `ttft.json` and `tpot.json` in XGBoost's JSON format, written
//! periodically and at shutdown and read back at start, so a restart predicts at once instead of waiting
//! for `min_samples` new requests; and seed files, XGBoost models trained elsewhere (e.g. llm-d's training
//! server's `/model/{ttft,tpot}/xgb/json`) to start from.
//!
//! Why one XGBoost file per model: `xgboost.Booster().load_model("ttft.json")` reads what epp wrote, and
//! epp reads what xgboost or llm-d wrote; the feature names inside say which row layout the model needs.
//! A file is written beside its final name and renamed over it, so a crash mid-write leaves the previous
//! model, never half of one. Every failure names the file and why (never a panic): a bad model file is a
//! startup error the operator can act on.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::predictor::features::{TPOT_COLUMNS, TTFT_COLUMNS};
use crate::predictor::train::Objective;
use crate::predictor::{load_xgboost_json, save_xgboost_json, ModelError, XgbObjective};

use super::models::{Model, Models, Target};

/// A model file that could not be read or written.
#[derive(Debug, Error)]
pub enum PersistError {
    #[error("model file {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("model file {}: {source}", path.display())]
    Model { path: PathBuf, source: ModelError },
    #[error("model file {}: the model takes {found} features, a {target} row has {expected}", path.display())]
    Features { path: PathBuf, target: Target, expected: usize, found: usize },
    #[error("writing model file {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// The row layout a target's model must take.
pub fn columns(target: Target) -> &'static [&'static str] {
    match target {
        Target::Ttft => &TTFT_COLUMNS,
        Target::Tpot => &TPOT_COLUMNS,
    }
}

/// Reads an XGBoost JSON model for `target`, checking it takes that target's row.
pub fn load_model_file(path: &Path, target: Target) -> Result<Model, PersistError> {
    let bytes = std::fs::read(path).map_err(|source| PersistError::Read { path: path.into(), source })?;
    let model =
        load_xgboost_json(&bytes).map_err(|source| PersistError::Model { path: path.into(), source })?;
    let expected = columns(target).len();
    if model.forest.n_features() != expected {
        let found = model.forest.n_features();
        return Err(PersistError::Features { path: path.into(), target, expected, found });
    }
    let objective = match model.objective {
        XgbObjective::SquaredError => Objective::SquaredError,
        XgbObjective::Quantile { alpha } => Objective::Quantile { alpha },
        XgbObjective::AbsoluteError => Objective::Quantile { alpha: 0.5 },
        XgbObjective::Gamma => Objective::LogSquaredError,
    };
    Ok(Model { forest: model.forest, objective, score: None })
}

/// The directory models are saved in and loaded from.
#[derive(Debug, Clone)]
pub struct ModelStore {
    dir: PathBuf,
}

impl ModelStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ModelStore { dir: dir.into() }
    }

    /// Where `target`'s model lives.
    pub fn path(&self, target: Target) -> PathBuf {
        self.dir.join(format!("{}.json", target.as_str()))
    }

    /// The saved models: `None` when there is no TTFT file (a first start), the TPOT model only when its
    /// file exists. A file that exists but does not load is an error, except a model of another row
    /// width: an earlier epp saved it with other feature columns (an upgrade), so it is set aside with a
    /// warning and the service starts as on a first start; its first retrain writes over it.
    pub fn load(&self) -> Result<Option<(Model, Option<Model>)>, PersistError> {
        let Some(ttft) = load_saved(&self.path(Target::Ttft), Target::Ttft)? else {
            return Ok(None);
        };
        Ok(Some((ttft, load_saved(&self.path(Target::Tpot), Target::Tpot)?)))
    }

    /// Writes every model of `models`, each through a temporary file renamed over the old one.
    pub fn save(&self, models: &Models) -> Result<(), PersistError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|source| PersistError::Write { path: self.dir.clone(), source })?;
        for target in Target::ALL {
            let Some(model) = models.get(target) else { continue };
            let path = self.path(target);
            let objective = match model.objective {
                Objective::SquaredError => XgbObjective::SquaredError,
                Objective::Quantile { alpha } => XgbObjective::Quantile { alpha },
                // Trained on ln(latency) by squared error, not gamma deviance; what the file must say
                // is the log link, so xgboost predicts exp(margin) from it too.
                Objective::LogSquaredError => XgbObjective::Gamma,
            };
            let bytes = save_xgboost_json(&model.forest, objective, columns(target))
                .map_err(|source| PersistError::Model { path: path.clone(), source })?;
            let partial = path.with_extension("json.partial");
            let write = std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, &path));
            write.map_err(|source| PersistError::Write { path, source })?;
        }
        Ok(())
    }
}

/// A saved model, `None` when absent or of another feature width (with a warning).
fn load_saved(path: &Path, target: Target) -> Result<Option<Model>, PersistError> {
    match load_if_present(path, target) {
        Err(PersistError::Features { path, expected, found, .. }) => {
            tracing::warn!(
                path = %path.display(),
                found,
                expected,
                "saved {target} model has another feature layout (an earlier epp's); starting without it"
            );
            Ok(None)
        }
        loaded => loaded,
    }
}

fn load_if_present(path: &Path, target: Target) -> Result<Option<Model>, PersistError> {
    match load_model_file(path, target) {
        Ok(model) => Ok(Some(model)),
        Err(PersistError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
