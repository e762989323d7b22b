//! The background tasks a running epp spawns beside the request path: readiness (discovery's first sync
//! and leader election), pool gauges, endpoint health refresh, file discovery, and the health server (the
//! metrics port's server is [`super::metrics_port`]). Split from `app` so the wiring stays readable; each task
//! stops on the shutdown signal or is aborted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

use crate::datastore::Datastore;
use crate::discovery::file::{self, Sink};
use crate::discovery::MetricsTarget;
use crate::extproc::grpc_health;
use crate::health::HealthMonitor;
use crate::telemetry::PoolMetrics;

use super::settings::{EndpointsFile, PoolGauges};

/// Keeps readiness (and the ext_proc health service) equal to "discovery has synced (or there is no
/// discovery) and this replica leads (or there is no leader election)". Liveness stays serving throughout.
pub(super) fn spawn_readiness(
    mut synced: Option<watch::Receiver<bool>>,
    mut leading: Option<watch::Receiver<bool>>,
    health: Arc<tonic_health::server::HealthReporter>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut reported = None;
        loop {
            let holds = |rx: &Option<watch::Receiver<bool>>| rx.as_ref().is_none_or(|rx| *rx.borrow());
            let ready = holds(&synced) && holds(&leading);
            if reported != Some(ready) {
                grpc_health::set_ready(&health, ready).await;
                reported = Some(ready);
            }
            tokio::select! {
                _ = next_change(&mut synced) => {}
                _ = next_change(&mut leading) => {}
            }
        }
    })
}

/// Resolves when `rx` changes; never when there is none or its sender is gone (the value then stays).
async fn next_change(rx: &mut Option<watch::Receiver<bool>>) {
    match rx {
        Some(r) => {
            if r.changed().await.is_err() {
                // Keep the last value: a receiver whose sender dropped still borrows it, but never changes.
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

pub(super) fn spawn_pool_gauges(
    datastore: Arc<Datastore>,
    metrics: Arc<PoolMetrics>,
    settings: &PoolGauges,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let (every, staleness) = (settings.every, settings.staleness);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => metrics.update_pool(&datastore.endpoints(), Instant::now(), staleness),
                _ = stop.changed() => return,
            }
        }
    })
}

/// How often endpoint health states are published and their time-driven changes logged.
const HEALTH_REFRESH: Duration = Duration::from_millis(250);

pub(super) fn spawn_health_refresh(
    datastore: Arc<Datastore>,
    health: Arc<HealthMonitor>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEALTH_REFRESH);
        loop {
            tokio::select! {
                _ = tick.tick() => health.refresh(&datastore.endpoints(), Instant::now()),
                _ = stop.changed() => return,
            }
        }
    })
}

pub(super) fn spawn_health_server(
    listener: TcpListener,
    service: tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "health server failed");
        }
    })
}

/// File discovery (`--endpoints-file`): the first load happens here, so a bad file stops start-up; with
/// `--endpoints-file-watch` the returned task reloads it every watch period until `stop`.
pub(super) fn start_file_discovery(
    file: Option<EndpointsFile>,
    sink: impl FnOnce(MetricsTarget) -> Sink,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let Some(EndpointsFile { path, watch_period, target }) = file else { return Ok(None) };
    Ok(file::start(path, sink(target), watch_period, stop)?)
}
