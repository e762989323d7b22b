//! The predictor as a running service (issue 8, part 2): completed requests flow in, a background thread
//! retrains the TTFT and TPOT models on a stratified window, scores them on held-out samples and publishes
//! them with an atomic swap, and the request path predicts on whichever generation is current.
//!
//! This replaces llm-d's two Python services (llm-d/llm-d-latency-predictor: training/training_server.py
//! and prediction/prediction_server.py) with one thread and a pointer: samples go through a bounded
//! in-process channel instead of `POST /add_training_data_bulk`, and models through an `ArcSwap` instead
//! of a 10–30 s HTTP poll, so every prediction comes from the newest model and there are no replicas to
//! disagree. Defaults are llm-d's chart values (llm-d/llm-d-router:config/charts/routerlib/values.yaml):
//! retrain every 10 s once 100 samples exist, 500 samples per stratum, the mean objective.
//!
//! Pieces: [`Predictor`] (the request path's handle), [`Intake`] (where completions are reported),
//! [`OnlinePredictor`] (owns the training thread, or runs retrains on the caller's thread when not
//! started, as tests do), [`ModelStore`] (the model files), [`PredictorMetrics`].

mod hub;
mod metrics;
mod models;
mod persist;
mod trainer;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::metrics::MetricsRegistry;
use crate::predictor::train::{Objective, Params};

pub use hub::{HubMode, PredictorHub};
pub use metrics::PredictorMetrics;
pub use models::{Model, Models, NoModel, Predictor, Score, Target};
pub use persist::{columns, load_model_file, ModelStore, PersistError};
pub use trainer::{Completion, TPOT_FEATURES, TTFT_FEATURES};
pub use worker::Intake;

use trainer::Trainer;
use worker::{Message, Worker};

/// How the service trains, stores and starts.
#[derive(Debug, Clone)]
pub struct OnlineConfig {
    /// How often the thread retrains (llm-d chart: 10 s; `LATENCY_RETRAINING_INTERVAL_SEC`), at least every
    /// 10 ms. An interval in which no sample arrived retrains nothing.
    pub retrain_interval: Duration,
    /// Training samples a target needs before it is retrained (chart: 100).
    pub min_samples: usize,
    /// Training samples a target needs for its first model, while it has none (llm-d's
    /// `LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH`, 10, which the chart leaves at its default): a rough model
    /// after ten requests beats the fallback, and the next retrains replace it. Never above `min_samples`.
    pub min_samples_fresh: usize,
    /// Streaming mode (llm-d's `streamingMode`, default off): with it off the TTFT model learns end-to-end
    /// latency and no TPOT model is trained.
    pub streaming: bool,
    /// The trainer's parameters; `params.objective` is the mean (squared error) or a quantile.
    pub params: Params,
    /// Newest samples kept per stratum (chart: 500), held-out samples (1,000) and the held-out percentage
    /// (10).
    pub per_bucket: usize,
    pub test_cap: usize,
    pub test_percent: u64,
    /// Completed requests that may wait for the thread; more are dropped and counted.
    pub intake_capacity: usize,
    /// Where models are saved and loaded from; `None` keeps them in memory only.
    pub model_dir: Option<PathBuf>,
    /// How often the models are saved (they are also saved at shutdown).
    pub save_interval: Duration,
    /// XGBoost JSON models to start from when `model_dir` holds none.
    pub seed_ttft: Option<PathBuf>,
    pub seed_tpot: Option<PathBuf>,
}

impl Default for OnlineConfig {
    fn default() -> Self {
        OnlineConfig {
            retrain_interval: Duration::from_secs(10),
            min_samples: 100,
            min_samples_fresh: 10,
            streaming: false,
            params: Params { objective: Objective::SquaredError, ..Params::default() },
            per_bucket: 500,
            test_cap: 1000,
            test_percent: 10,
            intake_capacity: 16_384,
            model_dir: None,
            save_interval: Duration::from_secs(60),
            seed_ttft: None,
            seed_tpot: None,
        }
    }
}

/// Why the service could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum OnlineError {
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error("intake_capacity must be at least 1")]
    ZeroCapacity,
    #[error("starting the predictor's training thread: {0}")]
    Spawn(std::io::Error),
    #[error("the predictor's training thread panicked")]
    Panicked,
}

enum State {
    /// Not started: [`OnlinePredictor::retrain_now`] runs on the caller's thread.
    Manual(Box<Worker>),
    Running {
        thread: JoinHandle<Result<(), PersistError>>,
        stop: Arc<AtomicBool>,
    },
    Stopped,
}

/// The online predictor: the handle, the intake, and the training thread (or its state, before start).
pub struct OnlinePredictor {
    predictor: Predictor,
    intake: Intake,
    state: State,
}

impl OnlinePredictor {
    /// Builds the service without starting its thread: saved models (or seeds) are loaded and published
    /// as generation 1, and retrains happen only on [`retrain_now`](Self::retrain_now).
    pub fn new(config: &OnlineConfig, registry: &MetricsRegistry) -> Result<Self, OnlineError> {
        let (predictor, intake, worker) = Self::build(config, registry)?;
        Ok(OnlinePredictor { predictor, intake, state: State::Manual(worker) })
    }

    /// [`new`](Self::new), then the training thread (`epp-predictor`) starts retraining every
    /// `retrain_interval`.
    pub fn start(config: &OnlineConfig, registry: &MetricsRegistry) -> Result<Self, OnlineError> {
        let (predictor, intake, worker) = Self::build(config, registry)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("epp-predictor".into())
            .spawn(move || worker.run(&flag))
            .map_err(OnlineError::Spawn)?;
        Ok(OnlinePredictor { predictor, intake, state: State::Running { thread, stop } })
    }

    fn build(
        config: &OnlineConfig,
        registry: &MetricsRegistry,
    ) -> Result<(Predictor, Intake, Box<Worker>), OnlineError> {
        if config.intake_capacity == 0 {
            return Err(OnlineError::ZeroCapacity);
        }
        let metrics = PredictorMetrics::register(registry);
        let predictor = Predictor::new();
        let store = config.model_dir.as_ref().map(ModelStore::new);
        let saved = store.as_ref().map(ModelStore::load).transpose()?.flatten();
        let loaded = match saved {
            Some(models) => Some(models),
            None => match &config.seed_ttft {
                Some(path) => Some((
                    load_model_file(path, Target::Ttft)?,
                    config.seed_tpot.as_deref().map(|p| load_model_file(p, Target::Tpot)).transpose()?,
                )),
                None => None,
            },
        };
        let saved_generation = u64::from(loaded.is_some());
        if let Some((ttft, tpot)) = loaded {
            let tpot = tpot.filter(|_| config.streaming);
            predictor.publish(Models { generation: 1, ttft, tpot });
            metrics.published(1, false);
        }
        let (sender, receiver) = sync_channel(config.intake_capacity);
        let intake = Intake { sender, dropped: metrics.dropped.clone() };
        let worker = Worker {
            receiver,
            trainer: Trainer::new(config),
            predictor: predictor.clone(),
            metrics,
            store,
            retrain_interval: config.retrain_interval,
            save_interval: config.save_interval,
            fresh: 0,
            last_save: Instant::now(),
            saved_generation,
        };
        Ok((predictor, intake, Box::new(worker)))
    }

    /// The request path's handle.
    pub fn predictor(&self) -> Predictor {
        self.predictor.clone()
    }

    /// Where completed requests are reported.
    pub fn intake(&self) -> Intake {
        self.intake.clone()
    }

    /// Takes the queued samples and retrains now, whatever the interval; `true` when new models were
    /// published. With the thread running this waits for it (for tests and admin use, not the request
    /// path).
    pub fn retrain_now(&mut self) -> bool {
        match &mut self.state {
            State::Manual(worker) => {
                worker.drain();
                worker.retrain()
            }
            State::Running { .. } => {
                let (reply, answer) = sync_channel(1);
                self.intake.sender.send(Message::Retrain(reply)).is_ok() && answer.recv().unwrap_or(false)
            }
            State::Stopped => false,
        }
    }

    /// Stops the thread (if started) and saves the models one last time.
    pub fn shutdown(mut self) -> Result<(), OnlineError> {
        match std::mem::replace(&mut self.state, State::Stopped) {
            State::Manual(mut worker) => Ok(worker.save()?),
            State::Running { thread, stop } => {
                stop.store(true, Ordering::Relaxed);
                // Wakes the thread if it is waiting; a full channel means it has work and will see the flag.
                let _ = self.intake.sender.try_send(Message::Stop);
                thread.join().map_err(|_| OnlineError::Panicked)??;
                Ok(())
            }
            State::Stopped => Ok(()),
        }
    }
}

impl Drop for OnlinePredictor {
    /// A service dropped without [`shutdown`](OnlinePredictor::shutdown) tells its thread to stop (it saves
    /// on the way out) without waiting for it.
    fn drop(&mut self) {
        if let State::Running { stop, .. } = &self.state {
            stop.store(true, Ordering::Relaxed);
            let _ = self.intake.sender.try_send(Message::Stop);
        }
    }
}

#[cfg(test)]
mod tests;
