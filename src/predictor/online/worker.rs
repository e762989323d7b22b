//! The background side: the bounded intake the request path reports completed requests into, and the
//! worker that owns the windows, retrains on its interval and publishes.
//!
//! Why a bounded channel with `try_send`: the request path must never wait for training. When the worker is
//! busy (a retrain takes seconds) and the channel fills, a completed request is dropped and counted rather
//! than queued without bound or blocking the caller; the stratified window loses little from a missed
//! sample. Why one `std::thread`: a retrain is seconds of CPU, which on a tokio worker would stall every
//! stream on that worker; one dedicated thread bounds the predictor to one core.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::metrics::PredictorMetrics;
use super::models::{Models, Predictor, Target};
use super::persist::{ModelStore, PersistError};
use super::trainer::{Completion, Trainer};

/// The longest the worker sleeps before looking at its stop flag.
const POLL: Duration = Duration::from_millis(200);
/// The shortest retrain interval: a zero interval would spin the thread while no sample comes.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

pub(super) enum Message {
    Completion(Completion),
    /// Retrain now and say whether new models were published.
    Retrain(SyncSender<bool>),
    /// Save, then stop.
    Stop,
}

/// Where the request path reports completed requests. Cheap to clone; never blocks.
#[derive(Debug, Clone)]
pub struct Intake {
    pub(super) sender: SyncSender<Message>,
    pub(super) dropped: Counter,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Completion(_) => "Completion",
            Message::Retrain(_) => "Retrain",
            Message::Stop => "Stop",
        })
    }
}

impl Intake {
    /// Hands a completed request to the trainer; `false` (and one more dropped sample) when the intake is
    /// full or the trainer has stopped.
    pub fn record(&self, completion: Completion) -> bool {
        match self.sender.try_send(Message::Completion(completion)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.inc();
                false
            }
        }
    }

    /// Completed requests dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }
}

/// Everything the training thread owns.
#[derive(Debug)]
pub(super) struct Worker {
    pub receiver: Receiver<Message>,
    pub trainer: Trainer,
    pub predictor: Predictor,
    pub metrics: Arc<PredictorMetrics>,
    pub store: Option<ModelStore>,
    pub retrain_interval: Duration,
    pub save_interval: Duration,
    /// Samples taken since the last retrain: an interval with none retrains nothing.
    pub fresh: usize,
    pub last_save: Instant,
    pub saved_generation: u64,
}

impl Worker {
    /// The thread's loop: take samples as they come, retrain every interval, save every save interval,
    /// and save once more when stopped.
    pub(super) fn run(mut self, stop: &AtomicBool) -> Result<(), PersistError> {
        let interval = self.retrain_interval.max(MIN_INTERVAL);
        let mut next = Instant::now() + interval;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                if self.fresh > 0 {
                    self.retrain();
                }
                if self.last_save.elapsed() >= self.save_interval {
                    self.save_logged();
                }
                next = Instant::now() + interval;
                continue;
            }
            let go_on = match self.receiver.recv_timeout((next - now).min(POLL)) {
                Ok(message) => self.handle(message),
                Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => false,
            };
            if !go_on {
                break;
            }
        }
        self.save()
    }

    /// Takes every message already queued; `false` when one says stop.
    pub(super) fn drain(&mut self) -> bool {
        while let Ok(message) = self.receiver.try_recv() {
            if !self.handle(message) {
                return false;
            }
        }
        self.refresh_window_gauges();
        true
    }

    fn handle(&mut self, message: Message) -> bool {
        match message {
            Message::Completion(completion) => {
                self.trainer.ingest(&completion);
                self.fresh += 1;
            }
            Message::Retrain(reply) => {
                self.drain();
                let published = self.retrain();
                // The asker may have given up waiting; nothing to do then.
                let _ = reply.try_send(published);
            }
            Message::Stop => return false,
        }
        true
    }

    /// Retrains every target with enough samples and publishes the next generation (a target that did
    /// not retrain keeps its current model). `false` when nothing was published.
    pub(super) fn retrain(&mut self) -> bool {
        self.fresh = 0;
        self.refresh_window_gauges();
        let mut trained = [None, None];
        let current = self.predictor.snapshot();
        for (slot, target) in trained.iter_mut().zip(Target::ALL) {
            let has_model = current.as_ref().is_some_and(|m| m.get(target).is_some());
            if !self.trainer.ready(target, has_model) {
                continue;
            }
            let started = Instant::now();
            match self.trainer.retrain(target) {
                Ok(model) => {
                    self.metrics.trained(target, started.elapsed(), model.score);
                    *slot = Some(model);
                }
                Err(error) => {
                    self.metrics.retrain_failed(target);
                    tracing::warn!(model = %target, %error, "retraining the latency predictor failed; keeping the current model");
                }
            }
        }
        let [ttft, tpot] = trained;
        if ttft.is_none() && tpot.is_none() {
            return false;
        }
        let Some(ttft) = ttft.or_else(|| current.as_ref().map(|m| m.ttft.clone())) else {
            return false;
        };
        let tpot = tpot.or_else(|| current.as_ref().and_then(|m| m.tpot.clone()));
        let generation = current.map_or(0, |m| m.generation) + 1;
        self.predictor.publish(Models { generation, ttft, tpot });
        self.metrics.published(generation, true);
        true
    }

    /// Writes the current models if they changed since the last save.
    pub(super) fn save(&mut self) -> Result<(), PersistError> {
        self.last_save = Instant::now();
        let (Some(store), Some(models)) = (&self.store, self.predictor.snapshot()) else {
            return Ok(());
        };
        if models.generation == self.saved_generation {
            return Ok(());
        }
        store.save(&models).inspect_err(|_| self.metrics.save_failed())?;
        self.saved_generation = models.generation;
        Ok(())
    }

    fn save_logged(&mut self) {
        if let Err(error) = self.save() {
            tracing::warn!(%error, "saving the latency predictor's models failed");
        }
    }

    fn refresh_window_gauges(&self) {
        for target in Target::ALL {
            let t = &self.trainer;
            self.metrics.set_window(target, t.len(target), t.buckets_filled(target), t.test_len(target));
        }
    }
}
