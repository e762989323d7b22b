//! The composition root: resolve the settings, build the components, start the background tasks, bind
//! and serve; and an orderly shutdown. It only wires: each step lives in its own module —
//! [`settings`] (flags + configuration → what each component is built from, with every cross-check),
//! [`build`] (the core, admission, the director, the endpoint sources), [`tasks`] (background tasks),
//! [`serve`] (the listeners and the ext_proc server) and [`metrics_port`] (/metrics and the route probe, behind
//! the access gate).
//!
//! [`Server::start`] binds every port before returning, so tests run the real server on 127.0.0.1:0
//! and read the bound addresses back.

mod build;
mod metrics_port;
mod serve;
mod settings;
mod tasks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_sdk::trace::SdkTracerProvider;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::access::Gate;
use crate::cli::Cli;
use crate::datastore::Datastore;
use crate::director::RequestMetrics;
use crate::discovery::{Discovery, DiscoveryMetrics, LeaderElection, PolicyWatch};
use crate::extproc::grpc_health;
use crate::flowcontrol::{FlowController, SaturationDetector};
use crate::health::HealthMonitor;
use crate::metrics::MetricsRegistry;
use crate::predictor::online::OnlinePredictor;
use crate::request::PolicyStore;
use crate::telemetry::{self, PoolMetrics};

use build::Core;
use serve::Listeners;
use settings::Settings;

/// How long the health port may take to close after the drain.
const HEALTH_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A running epp: bound addresses and the handle that stops it.
pub struct Server {
    pub grpc_addr: SocketAddr,
    pub health_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub datastore: Arc<Datastore>,
    /// Every component's families, as `/metrics` serves them.
    pub metrics: Arc<MetricsRegistry>,
    /// The per-request families (running requests, for tests and drain checks).
    pub request_metrics: Arc<RequestMetrics>,
    /// The flow controller, when the `flowControl` feature gate is on.
    pub flow_controller: Option<FlowController>,
    /// Objective priorities and model rewrites: the config's, with the cluster's laid over them.
    pub policies: Arc<PolicyStore>,
    shutdown: watch::Sender<bool>,
    /// Stops the health server, which outlives the drain so probes see NOT_SERVING until the end.
    health_stop: watch::Sender<bool>,
    health_server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    grpc: JoinHandle<Result<(), tonic::transport::Error>>,
    health: Arc<tonic_health::server::HealthReporter>,
    /// Keeps readiness equal to "synced and leading"; stopped at shutdown so it cannot undo NOT_SERVING.
    readiness: JoinHandle<()>,
    /// The leader-election campaign (`--ha-enable-leader-election`); its Lease is released at shutdown.
    leader: Option<LeaderElection>,
    /// The latency predictor's training thread; stopped (saving its models) at shutdown.
    predictor: Option<OnlinePredictor>,
    /// The OpenTelemetry exporter (`--tracing`); flushed at shutdown so the last spans are not lost.
    tracer_provider: Option<SdkTracerProvider>,
    grace: Duration,
    /// How long NOT_SERVING is reported while streams are still accepted, before the drain.
    delay: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("grpc_addr", &self.grpc_addr).finish()
    }
}

/// Replacements for parts the configuration would otherwise build (tests and embedders).
#[derive(Default, Clone)]
pub struct ServerHooks {
    /// Use this saturation detector (with its name for the metrics) instead of the configured one.
    pub saturation_detector: Option<(String, Arc<dyn SaturationDetector>)>,
}

impl std::fmt::Debug for ServerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.saturation_detector.as_ref().map(|(n, _)| n.as_str());
        f.debug_struct("ServerHooks").field("saturation_detector", &name).finish()
    }
}

impl Server {
    /// Loads the configuration, binds the ports and starts serving.
    pub async fn start(cli: Cli) -> anyhow::Result<Self> {
        Self::start_with(cli, ServerHooks::default()).await
    }

    /// [`start`](Self::start) with some parts replaced.
    pub async fn start_with(cli: Cli, hooks: ServerHooks) -> anyhow::Result<Self> {
        cli.validate().map_err(anyhow::Error::msg)?;
        let core = Core::build(&cli)?;
        let Settings { endpoints, leader, director: options, health, mut scrape, pool_gauges, serving } =
            Settings::resolve(&cli, &core.loaded)?;
        let policies = options.policies.clone();
        let (discovery, policy_watch) =
            build::start_endpoints(&core, endpoints.statics, endpoints.discovery, &policies);
        let leader = leader.map(LeaderElection::spawn);
        let (flow_controller, admission) = build::admission(&core, hooks, options.subset_match);
        let health_monitor = HealthMonitor::new(health, &core.metrics);
        let (tracing, tracer_provider) = build::tracing(&cli)?;
        let director = build::director(&core, admission, options, health_monitor.clone(), tracing);

        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        // New telemetry may free capacity: wake the dispatcher (wakes coalesce).
        scrape.on_update = flow_controller.as_ref().map(|controller| {
            let waker = controller.waker();
            Arc::new(move || waker.wake()) as telemetry::TelemetryUpdated
        });
        tasks.extend(flow_controller.as_ref().map(FlowController::spawn_dispatcher));
        tasks.push(telemetry::spawn_scrapers(core.datastore.clone(), scrape, shutdown_rx.clone())?);
        let file_sink = |target| crate::discovery::file::Sink {
            datastore: core.datastore.clone(),
            on_removed: core.on_removed(),
            target,
            metrics: DiscoveryMetrics::register(&core.metrics),
        };
        tasks.extend(tasks::start_file_discovery(endpoints.file, file_sink, shutdown_rx.clone())?);
        tasks.push(tasks::spawn_health_refresh(core.datastore.clone(), health_monitor, shutdown_rx.clone()));
        let pool_metrics = PoolMetrics::register(&core.metrics);
        let datastore = core.datastore.clone();
        tasks.push(tasks::spawn_pool_gauges(datastore, pool_metrics, &pool_gauges, shutdown_rx.clone()));

        let (listeners, addresses) = Listeners::bind(&serving).await?;
        let (reporter, health_service) = tonic_health::server::health_reporter();
        // With discovery, NOT_SERVING until the first successful sync: an empty pool is not a ready epp.
        // With leader election, NOT_SERVING unless this replica leads (active-passive, as upstream).
        grpc_health::set_ready(&reporter, discovery.is_none() && leader.is_none()).await;
        let health = Arc::new(reporter);
        let readiness = tasks::spawn_readiness(
            discovery.as_ref().map(Discovery::synced),
            leader.as_ref().map(LeaderElection::leading),
            health.clone(),
        );
        tasks.extend(discovery.map(Discovery::into_task));
        tasks.extend(policy_watch.into_iter().flat_map(PolicyWatch::into_tasks));
        let (health_stop, health_stop_rx) = watch::channel(false);
        let health_server = tasks::spawn_health_server(listeners.health, health_service, health_stop_rx);
        let port = metrics_port::MetricsPort {
            probe: metrics_port::route_probe(&serving, &director),
            gate: Gate::build(&serving.access, &core.metrics)?,
            tls: serving.metrics_tls.clone(),
        };
        let metrics = core.metrics.clone();
        tasks.push(metrics_port::spawn_metrics_server(
            listeners.metrics,
            metrics,
            port,
            shutdown_rx.clone(),
        )?);
        let grpc = serve::serve_ext_proc(listeners.grpc, &serving, director, &core.metrics, shutdown_rx)?;
        let (grpc_addr, health_addr, metrics_addr) = (addresses.grpc, addresses.health, addresses.metrics);
        tracing::info!(%grpc_addr, %health_addr, %metrics_addr, secure = serving.tls.is_some(), "epp serving");
        Ok(Self {
            grpc_addr,
            health_addr,
            metrics_addr,
            datastore: core.datastore,
            metrics: core.metrics,
            request_metrics: core.director_metrics.requests,
            flow_controller,
            policies,
            shutdown,
            health_stop,
            health_server,
            tasks,
            grpc,
            health,
            readiness,
            leader,
            predictor: core.predictor,
            tracer_provider,
            grace: serving.grace,
            delay: serving.delay,
        })
    }

    /// Marks readiness not serving, keeps accepting for the shutdown delay (so health checkers see
    /// NOT_SERVING before connections are refused), stops accepting, waits up to the grace period for
    /// in-flight streams, then closes the health port.
    pub async fn shutdown(self) {
        self.readiness.abort();
        grpc_health::set_shutting_down(&self.health).await;
        // Not serving any more: hand the Lease over now, so a follower leads (and gets the traffic) while
        // this replica drains, instead of after the lease duration.
        if let Some(leader) = self.leader {
            leader.release().await;
        }
        if !self.delay.is_zero() {
            tracing::info!(delay = ?self.delay, "not serving; still accepting streams for the shutdown delay");
            tokio::time::sleep(self.delay).await;
        }
        let _ = self.shutdown.send(true);
        let started = Instant::now();
        match tokio::time::timeout(self.grace, self.grpc).await {
            Ok(_) => tracing::info!(elapsed = ?started.elapsed(), "ext_proc drained"),
            Err(_) => tracing::warn!(grace = ?self.grace, "grace period over with streams still open"),
        }
        // Whatever is still queued cannot be served any more: answer it (500) rather than drop it.
        if let Some(controller) = &self.flow_controller {
            controller.close();
        }
        for t in self.tasks {
            t.abort();
        }
        if let Some(predictor) = self.predictor {
            // Joining the thread may wait for a retrain in progress and a model save: off the runtime.
            match tokio::task::spawn_blocking(move || predictor.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "stopping the latency predictor"),
                Err(error) => tracing::warn!(%error, "stopping the latency predictor"),
            }
        }
        if let Some(provider) = self.tracer_provider {
            // Flushing waits for the last export (up to its timeout): off the runtime, which serves it.
            match tokio::task::spawn_blocking(move || provider.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "flushing OpenTelemetry spans"),
                Err(error) => tracing::warn!(%error, "flushing OpenTelemetry spans"),
            }
        }
        // A health Watch stream never ends on its own, and graceful close waits for every connection:
        // give probes a moment, then close the port regardless.
        let _ = self.health_stop.send(true);
        let abort = self.health_server.abort_handle();
        if tokio::time::timeout(HEALTH_CLOSE_WAIT, self.health_server).await.is_err() {
            abort.abort();
        }
    }

    /// Stops at once, as a crash would: no drain, and the Lease is not released (the other replicas
    /// wait for it to expire). For tests of what the others do when a replica dies.
    pub fn abort(self) {
        if let Some(leader) = &self.leader {
            leader.abort();
        }
        self.readiness.abort();
        self.grpc.abort();
        self.health_server.abort();
        for t in self.tasks {
            t.abort();
        }
    }
}
