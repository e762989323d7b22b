//! Where the configuration's `predicted-latency-producer` gets its predictor from, and where the app (or
//! the lab) gets the running service back to retrain or stop it.
//!
//! Why a hub rather than a service built by the app: whether there is a predictor at all, and whether it
//! trains TPOT (`streamingMode`), is decided by the EndpointPickerConfig, which is read after the app has
//! wired its registries; the producer's factory asks the hub, the hub builds the one service of this epp
//! on first use with the app's training settings (flags), and the app takes it back after loading to
//! stop it (and save the models) at shutdown. The lab hands in a manual hub so retrains happen at its
//! virtual-time ticks, deterministically, on its own thread.

use std::sync::{Arc, Mutex};

use crate::metrics::MetricsRegistry;

use super::{Intake, OnlineConfig, OnlineError, OnlinePredictor, Predictor};

/// Whether the service retrains on its own thread or only when told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubMode {
    /// The server: the `epp-predictor` thread retrains every interval.
    Threaded,
    /// The lab and tests: retrains run on [`PredictorHub::retrain_now`]'s caller.
    Manual,
}

struct HubState {
    config: OnlineConfig,
    registry: Arc<MetricsRegistry>,
    mode: HubMode,
    service: Option<OnlinePredictor>,
    /// Handed out before the service was taken back, so later attaches see the same one.
    handles: Option<(Predictor, Intake)>,
}

/// Builds the predictor service on first use and hands out its handles. Cheap to clone.
#[derive(Clone)]
pub struct PredictorHub {
    state: Arc<Mutex<HubState>>,
}

impl std::fmt::Debug for PredictorHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("PredictorHub")
            .field("mode", &state.mode)
            .field("attached", &state.handles.is_some())
            .finish()
    }
}

impl PredictorHub {
    /// A hub whose service registers its metrics in `registry` and trains as `config` says
    /// (`config.streaming` is set by the producer that attaches).
    pub fn new(config: OnlineConfig, registry: Arc<MetricsRegistry>, mode: HubMode) -> Self {
        let state = HubState { config, registry, mode, service: None, handles: None };
        PredictorHub { state: Arc::new(Mutex::new(state)) }
    }

    /// A manual hub with the default settings whose metrics nobody scrapes (tests, embedders).
    pub fn detached() -> Self {
        Self::new(OnlineConfig::default(), MetricsRegistry::new("detached"), HubMode::Manual)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The predictor and intake of this epp's service, building (and, threaded, starting) it on the first
    /// call. `streaming` is the producer's `streamingMode`; every producer must agree on it, since one
    /// service trains one TTFT model whose target depends on it.
    pub fn attach(&self, streaming: bool) -> Result<(Predictor, Intake), String> {
        let mut state = self.lock();
        if let Some(handles) = &state.handles {
            if state.config.streaming != streaming {
                return Err(format!(
                    "streamingMode {streaming} differs from another predicted-latency-producer's {}: one \
                     predictor serves them all",
                    state.config.streaming
                ));
            }
            return Ok(handles.clone());
        }
        state.config.streaming = streaming;
        let built = match state.mode {
            HubMode::Threaded => OnlinePredictor::start(&state.config, &state.registry),
            HubMode::Manual => OnlinePredictor::new(&state.config, &state.registry),
        };
        let service = built.map_err(|e: OnlineError| e.to_string())?;
        let handles = (service.predictor(), service.intake());
        state.service = Some(service);
        state.handles = Some(handles.clone());
        Ok(handles)
    }

    /// Whether a producer attached (so a service exists).
    pub fn attached(&self) -> bool {
        self.lock().handles.is_some()
    }

    /// The streaming mode the attached producers chose; `None` before any attached.
    pub fn streaming(&self) -> Option<bool> {
        let state = self.lock();
        state.handles.as_ref().map(|_| state.config.streaming)
    }

    /// Retrains now on the queued samples (manual hubs; a threaded one waits for its thread); `false` when
    /// nothing was published or no service exists.
    pub fn retrain_now(&self) -> bool {
        self.lock().service.as_mut().is_some_and(OnlinePredictor::retrain_now)
    }

    /// The current model generation, 0 before any model or without a service.
    pub fn generation(&self) -> u64 {
        self.lock().handles.as_ref().map_or(0, |(p, _)| p.generation())
    }

    /// Takes the service back (to stop it at shutdown); the handles already given out keep working until
    /// it stops.
    pub fn take(&self) -> Option<OnlinePredictor> {
        self.lock().service.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_share_one_service_and_must_agree_on_streaming() {
        let hub = PredictorHub::detached();
        assert!(!hub.attached());
        assert_eq!(hub.streaming(), None);
        let (first, _) = hub.attach(true).unwrap();
        assert_eq!(hub.streaming(), Some(true));
        let (second, _) = hub.attach(true).unwrap();
        assert_eq!(first.generation(), second.generation());
        let err = hub.attach(false).unwrap_err();
        assert!(err.contains("streamingMode"), "{err}");
        assert!(hub.attached());
        assert!(!hub.retrain_now(), "no samples: nothing to publish");
        assert!(hub.take().is_some());
        assert!(hub.take().is_none());
    }
}
