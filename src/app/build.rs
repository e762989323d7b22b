//! Building components from the resolved settings: the core (metrics registry, datastore, latency
//! predictor, and the plugins the configuration names), admission (flow control or the legacy
//! saturation check), the director, and the endpoint sources. Each component registers its own metric
//! families on the shared registry and gets back only its handles.

use std::sync::Arc;

use anyhow::Context;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::cli::Cli;
use crate::config::{self, LoadedConfig};
use crate::datastore::{Datastore, Endpoint, SubsetMatch};
use crate::director::{Director, DirectorMetrics, DirectorOptions};
use crate::discovery::{Discovery, DiscoveryConfig, DiscoveryMetrics, PolicyWatch, RemovedHook};
use crate::flowcontrol::{
    Admission, FlowControlMetrics, FlowController, FlowControllerParts, ObservedEndpointsDetector,
    SaturationDetector, OBSERVED_ENDPOINTS_DETECTOR,
};
use crate::health::HealthMonitor;
use crate::metrics::MetricsRegistry;
use crate::otel::{self, Tracing, TracingSettings};
use crate::predictor::online::{HubMode, OnlinePredictor, PredictorHub};
use crate::request::PolicyStore;
use crate::scheduling::observer::TimingObserver;
use crate::scheduling::{FactoryContext, Observer, Pipeline, PluginMetrics, Registry};

use super::ServerHooks;

/// What every other component is built around.
pub(super) struct Core {
    pub datastore: Arc<Datastore>,
    /// Every component's families, as `/metrics` serves them.
    pub metrics: Arc<MetricsRegistry>,
    pub director_metrics: DirectorMetrics,
    pub loaded: LoadedConfig,
    pub pipeline: Arc<Pipeline>,
    /// The predictor's training thread, when the configuration has a predicted-latency-producer.
    pub predictor: Option<OnlinePredictor>,
}

impl Core {
    pub(super) fn build(cli: &Cli) -> anyhow::Result<Self> {
        let pool_name = cli.pool_label();
        let datastore = Arc::new(Datastore::new(pool_name.clone()));
        let metrics = MetricsRegistry::with_max_series(&pool_name, cli.max_series_per_family);
        let director_metrics = DirectorMetrics::register(&metrics);
        // The predictor service starts only if the configuration has a predicted-latency-producer.
        let online = cli.predictor.online_config().map_err(anyhow::Error::msg)?;
        let predictor_hub = PredictorHub::new(online, metrics.clone(), HubMode::Threaded);
        let ctx = FactoryContext::new(datastore.clone(), PluginMetrics::register(&metrics))
            .with_predictor(predictor_hub.clone());
        let loaded = load_config(cli, &Registry::with_builtins(), &ctx)?;
        let predictor = predictor_hub.take();
        if predictor.is_some() {
            tracing::info!("latency predictor started (training thread epp-predictor)");
        }
        let pipeline = Arc::new(loaded.pipeline.clone());
        tracing::info!(pipeline = ?pipeline, "configuration loaded");
        Ok(Self { datastore, metrics, director_metrics, loaded, pipeline, predictor })
    }

    /// Tells the pipeline's plugins which endpoints left (they drop per-endpoint state).
    pub(super) fn on_removed(&self) -> RemovedHook {
        let pipeline = self.pipeline.clone();
        Arc::new(move |removed| pipeline.on_endpoints_removed(removed))
    }
}

fn load_config(cli: &Cli, registry: &Registry, ctx: &FactoryContext) -> anyhow::Result<LoadedConfig> {
    let loaded = match (&cli.config_file, &cli.config_text) {
        (Some(path), _) => config::load_file(path, registry, ctx)?,
        (None, Some(text)) => config::load(text, registry, ctx).context("--config-text")?,
        (None, None) => config::load_default(registry, ctx)?,
    };
    Ok(loaded)
}

/// Kubernetes discovery (and the cluster's objectives and rewrites laid over `policies`) when configured;
/// else the static endpoints go into the datastore now. An endpoints file is loaded later, with the
/// other background tasks.
pub(super) fn start_endpoints(
    core: &Core,
    statics: Vec<Endpoint>,
    discovery: Option<DiscoveryConfig>,
    policies: &Arc<PolicyStore>,
) -> (Option<Discovery>, Option<PolicyWatch>) {
    let Some(config) = discovery else {
        let changes = core.datastore.set_endpoints(statics);
        core.pipeline.on_endpoints_removed(&changes.removed);
        return (None, None);
    };
    tracing::info!(source = %config.source, namespace = %config.namespace, "Kubernetes discovery");
    let metrics = DiscoveryMetrics::register(&core.metrics);
    let policy_watch = PolicyWatch::spawn(&config, policies.clone());
    let discovery = Discovery::spawn(config, core.datastore.clone(), core.on_removed(), metrics);
    (Some(discovery), policy_watch)
}

/// Admission: the flow controller when the `flowControl` feature gate is on, else the legacy check
/// against the saturation detector (the hook's, or `saturationDetector.pluginRef`'s).
pub(super) fn admission(
    core: &Core,
    hooks: ServerHooks,
    subset_match: SubsetMatch,
) -> (Option<FlowController>, Admission) {
    let detector = hooks.saturation_detector.or_else(|| configured_detector(&core.loaded));
    // Registered whether or not the gate is on, as upstream does: dashboards read 0, not "no data".
    let flow_metrics = FlowControlMetrics::register(&core.metrics);
    let flow_controller = core.loaded.flow_control.as_ref().map(|settings| {
        let (detector_name, detector) = detector.clone().unwrap_or_else(|| {
            tracing::warn!(
                "flow control without a saturation detector: dispatching whenever an endpoint has \
                 reported telemetry"
            );
            (OBSERVED_ENDPOINTS_DETECTOR.to_string(), Arc::new(ObservedEndpointsDetector))
        });
        let parts = FlowControllerParts {
            detector,
            detector_name,
            datastore: core.datastore.clone(),
            metrics: flow_metrics,
            subset_match,
        };
        FlowController::new(settings, parts)
    });
    let admission = match &flow_controller {
        Some(controller) => Admission::flow_control(controller.clone()),
        None => Admission::legacy(detector.map(|(_, d)| d)),
    };
    (flow_controller, admission)
}

/// The configured saturation detector: `saturationDetector.pluginRef`'s plugin, if it fills that role.
fn configured_detector(loaded: &LoadedConfig) -> Option<(String, Arc<dyn SaturationDetector>)> {
    let name = loaded.saturation_detector.as_deref()?;
    let detector = loaded.pipeline.plugin(name).and_then(|p| p.saturation_detector.clone());
    if detector.is_none() {
        tracing::warn!(plugin = name, "saturationDetector.pluginRef names a plugin without a detector role");
    }
    detector.map(|d| (name.to_string(), d))
}

/// Tracing as `--tracing` and the `OTEL_*` variables ask (a bad variable fails start-up, naming it), and
/// the provider to flush at shutdown.
pub(super) fn tracing(cli: &Cli) -> anyhow::Result<(Tracing, Option<SdkTracerProvider>)> {
    if !cli.tracing {
        return Ok((Tracing::disabled(), None));
    }
    let settings = TracingSettings::from_env().context("--tracing")?;
    let provider = otel::tracer_provider(&settings).context("--tracing")?;
    tracing::info!(exporter = ?settings.exporter, sampler = ?settings.sampler, "OpenTelemetry tracing on");
    Ok((Tracing::new(&provider), Some(provider)))
}

/// The director over the pipeline, timing each plugin into the scheduler's families.
pub(super) fn director(
    core: &Core,
    admission: Admission,
    options: DirectorOptions,
    health: Arc<HealthMonitor>,
    tracing: Tracing,
) -> Arc<Director> {
    let observer: Arc<dyn Observer> = {
        let m = core.director_metrics.scheduler.clone();
        Arc::new(TimingObserver::new(move |point, id, secs| {
            m.observe_plugin(point.as_str(), id.type_name, &id.name, secs);
        }))
    };
    let director = Director::new(
        core.datastore.clone(),
        core.pipeline.clone(),
        admission,
        core.director_metrics.clone(),
        observer,
        options,
    );
    Arc::new(director.with_health(health).with_tracing(tracing))
}
