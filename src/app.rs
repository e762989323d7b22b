//! Wiring: configuration → plugins → datastore → scrapers → servers, and an orderly shutdown.
//!
//! [`Server::start`] binds every port before returning, so tests run the real server on 127.0.0.1:0
//! and read the bound addresses back. The background tasks live in [`tasks`].

mod parts;
mod tasks;

use parts::{
    config_policies, configured_detector, engine_set, load_config, metrics_scheme, static_endpoints,
};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::cli::Cli;
use crate::config;
use crate::datastore::Datastore;
use crate::datastore::SubsetMatch;
use crate::director::{Director, DirectorMetrics, DirectorOptions, RequestMetrics};
use crate::discovery::{
    Discovery, DiscoveryMetrics, LeaderElection, MetricsTarget, PolicyWatch, RemovedHook,
};
use crate::extproc::{health, tls, ExtProcService, OverheadMetrics, StreamLimits};
use crate::flowcontrol::{
    Admission, FlowControlMetrics, FlowController, FlowControllerParts, ObservedEndpointsDetector,
    SaturationDetector, OBSERVED_ENDPOINTS_DETECTOR,
};
use crate::health::HealthMonitor;
use crate::metrics::MetricsRegistry;
use crate::predictor::online::{HubMode, OnlinePredictor, PredictorHub};
use crate::request::PolicyStore;
use crate::scheduling::observer::TimingObserver;
use crate::scheduling::{FactoryContext, Observer, PluginMetrics, Registry};
use crate::telemetry::{self, PoolMetrics};

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
        let pool_name = cli.pool_label();
        let datastore = Arc::new(Datastore::new(pool_name.clone()));
        // The composition root: each component registers its own families and gets only its handles.
        let metrics = MetricsRegistry::with_max_series(&pool_name, cli.max_series_per_family);
        let director_metrics = DirectorMetrics::register(&metrics);
        // The predictor service starts only if the configuration has a predicted-latency-producer.
        let online = cli.predictor.online_config().map_err(anyhow::Error::msg)?;
        let predictor_hub = PredictorHub::new(online, metrics.clone(), HubMode::Threaded);
        let ctx = FactoryContext::new(datastore.clone(), PluginMetrics::register(&metrics))
            .with_predictor(predictor_hub.clone());
        let registry = Registry::with_builtins();
        let loaded = load_config(&cli, &registry, &ctx)?;
        let predictor = predictor_hub.take();
        if predictor.is_some() {
            tracing::info!("latency predictor started (training thread epp-predictor)");
        }
        let engines = Arc::new(engine_set(&loaded)?);
        let pipeline = Arc::new(loaded.pipeline.clone());
        tracing::info!(pipeline = ?pipeline, "configuration loaded");

        let statics = static_endpoints(&cli, &loaded);
        let target = MetricsTarget {
            scheme: metrics_scheme(&loaded),
            path: loaded.data_source.path.clone(),
            port: cli.model_server_metrics_port.filter(|port| *port != 0),
        };
        if cli.endpoints_file.is_some() && !statics.is_empty() {
            anyhow::bail!("--endpoints-file and the config's `endpoints:` are mutually exclusive");
        }
        let file_target = target.clone();
        let policies = Arc::new(PolicyStore::new(config_policies(&loaded)));
        let mut policy_watch = None;
        let discovery = match cli
            .discovery_config(!statics.is_empty() || cli.endpoints_file.is_some(), target)?
        {
            None => {
                let changes = datastore.set_endpoints(statics);
                pipeline.on_endpoints_removed(&changes.removed);
                None
            }
            Some(config) => {
                tracing::info!(source = %config.source, namespace = %config.namespace, "Kubernetes discovery");
                let hook = pipeline.clone();
                let on_removed: RemovedHook = Arc::new(move |removed| hook.on_endpoints_removed(removed));
                let metrics = DiscoveryMetrics::register(&metrics);
                policy_watch = PolicyWatch::spawn(&config, policies.clone());
                Some(Discovery::spawn(config, datastore.clone(), on_removed, metrics))
            }
        };

        let leader = cli.leader_config().map(LeaderElection::spawn);

        let observer: Arc<dyn Observer> = {
            let m = director_metrics.scheduler.clone();
            Arc::new(TimingObserver::new(move |point, id, secs| {
                m.observe_plugin(point.as_str(), id.type_name, &id.name, secs)
            }))
        };
        let options = DirectorOptions {
            policies: policies.clone(),
            token_estimator: crate::request::TokenEstimator::new(
                loaded.token_estimator.characters_per_token,
                loaded.token_estimator.output_ratio,
            )
            .context("tokenEstimator")?,
            subset_match: if cli.disable_endpoint_subset_filter {
                SubsetMatch::Disabled
            } else if cli.subset_match_ip_only {
                SubsetMatch::IpOnly
            } else {
                SubsetMatch::Exact
            },
            emit_scores: cli.emit_endpoint_scores,
            parse_bodies: loaded.parser == config::ParserKind::OpenAi,
            ignore_model_rewrite_header: cli.ignore_model_rewrite_header,
        };
        let detector = hooks.saturation_detector.or_else(|| configured_detector(&loaded));
        // Registered whether or not the gate is on, as upstream does: dashboards read 0, not "no data".
        let flow_metrics = FlowControlMetrics::register(&metrics);
        let flow_controller = loaded.flow_control.as_ref().map(|settings| {
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
                datastore: datastore.clone(),
                metrics: flow_metrics.clone(),
                subset_match: options.subset_match,
            };
            FlowController::new(settings, parts)
        });
        let admission = match &flow_controller {
            Some(controller) => Admission::flow_control(controller.clone()),
            None => Admission::legacy(detector.map(|(_, d)| d)),
        };
        let health = HealthMonitor::new(loaded.endpoint_health.clone(), &metrics);
        let director = Arc::new(
            Director::new(
                datastore.clone(),
                pipeline.clone(),
                admission,
                director_metrics.clone(),
                observer,
                options,
            )
            .with_health(health.clone()),
        );

        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        // New telemetry may free capacity: wake the dispatcher (wakes coalesce).
        let on_update = flow_controller.as_ref().map(|controller| {
            let waker = controller.waker();
            Arc::new(move || waker.wake()) as telemetry::TelemetryUpdated
        });
        if let Some(controller) = &flow_controller {
            tasks.push(controller.spawn_dispatcher());
        }
        let scrape = telemetry::ScrapeConfig {
            refresh_interval: cli.refresh_metrics_interval,
            insecure_skip_verify: loaded.data_source.insecure_skip_verify,
            engines,
            on_update,
            ..Default::default()
        };
        tasks.push(telemetry::spawn_scrapers(datastore.clone(), scrape, shutdown_rx.clone())?);
        let file_sink = || crate::discovery::file::Sink {
            datastore: datastore.clone(),
            on_removed: Arc::new({
                let pipeline = pipeline.clone();
                move |removed| pipeline.on_endpoints_removed(removed)
            }),
            target: file_target,
            metrics: DiscoveryMetrics::register(&metrics),
        };
        tasks.extend(tasks::start_file_discovery(&cli, file_sink, shutdown_rx.clone())?);
        tasks.push(tasks::spawn_health_refresh(datastore.clone(), health, shutdown_rx.clone()));
        tasks.push(tasks::spawn_pool_gauges(
            datastore.clone(),
            PoolMetrics::register(&metrics),
            &cli,
            shutdown_rx.clone(),
        ));

        let bind = |port: u16| SocketAddr::new(cli.bind_address, port);
        let grpc_listener = TcpListener::bind(bind(cli.grpc_port)).await.context("binding --grpc-port")?;
        let health_listener =
            TcpListener::bind(bind(cli.grpc_health_port)).await.context("binding --grpc-health-port")?;
        let metrics_listener =
            TcpListener::bind(bind(cli.metrics_port)).await.context("binding --metrics-port")?;
        let grpc_addr = grpc_listener.local_addr()?;
        let health_addr = health_listener.local_addr()?;
        let metrics_addr = metrics_listener.local_addr()?;

        let (reporter, health_service) = tonic_health::server::health_reporter();
        // With discovery, NOT_SERVING until the first successful sync: an empty pool is not a ready epp.
        // With leader election, NOT_SERVING unless this replica leads (active-passive, as upstream).
        health::set_ready(&reporter, discovery.is_none() && leader.is_none()).await;
        let health = Arc::new(reporter);
        let readiness = tasks::spawn_readiness(
            discovery.as_ref().map(Discovery::synced),
            leader.as_ref().map(LeaderElection::leading),
            health.clone(),
        );
        tasks.extend(discovery.map(Discovery::into_task));
        tasks.extend(policy_watch.into_iter().flat_map(PolicyWatch::into_tasks));
        let (health_stop, health_stop_rx) = watch::channel(false);
        let health_server = tasks::spawn_health_server(health_listener, health_service, health_stop_rx);
        let probe = tasks::route_probe(&cli, &director);
        tasks.push(tasks::spawn_metrics_server(
            metrics_listener,
            metrics.clone(),
            probe,
            shutdown_rx.clone(),
        ));

        let limits = StreamLimits {
            max_request_body: cli.max_request_body_bytes,
            max_buffered_request_bytes: cli.max_buffered_request_bytes,
        };
        let service =
            ExtProcService::new(director, limits, OverheadMetrics::register(&metrics)).into_server();
        let mut builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .max_concurrent_streams(Some(100_000));
        if cli.secure_serving {
            builder = builder.tls_config(tls::server_tls(cli.cert_path.as_deref())?)?;
        }
        let mut rx = shutdown_rx.clone();
        let grpc = tokio::spawn(builder.add_service(service).serve_with_incoming_shutdown(
            // serve_with_incoming ignores the builder's tcp_nodelay; without it Nagle holds epp's first
            // answer on each new Envoy connection until Envoy's delayed ACK (~40ms).
            TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            },
        ));
        tracing::info!(%grpc_addr, %health_addr, %metrics_addr, secure = cli.secure_serving, "epp serving");
        Ok(Self {
            grpc_addr,
            health_addr,
            metrics_addr,
            datastore,
            metrics,
            request_metrics: director_metrics.requests,
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
            predictor,
            grace: cli.shutdown_grace_period,
            delay: cli.shutdown_delay,
        })
    }

    /// Marks readiness not serving, keeps accepting for the shutdown delay (so health checkers see
    /// NOT_SERVING before connections are refused), stops accepting, waits up to the grace period for
    /// in-flight streams, then closes the health port.
    pub async fn shutdown(self) {
        self.readiness.abort();
        health::set_shutting_down(&self.health).await;
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
