//! The background tasks a running epp spawns beside the request path: readiness (discovery's first sync
//! and leader election), pool gauges, endpoint health refresh, and the health and metrics servers (the
//! latter with the route probe, when enabled). Split from `app` so the wiring stays readable; each task
//! stops on the shutdown signal or is aborted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

use crate::datastore::Datastore;
use crate::director::{Director, ProbeRequest, RouteProbe};
use crate::discovery::file::{self, Sink};
use crate::discovery::MetricsTarget;
use crate::error::RequestError;
use crate::extproc::grpc_health;
use crate::health::HealthMonitor;
use crate::metrics::MetricsRegistry;
use crate::telemetry::PoolMetrics;

use super::settings::{EndpointsFile, PoolGauges, Serving};

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

/// The route probe as the metrics server serves it (`--enable-route-probe`), with the largest body it
/// reads (the ext_proc path's `--max-request-body-bytes`).
pub(super) struct ProbeRoute {
    probe: Arc<RouteProbe>,
    max_body: usize,
}

/// The probe over `director` when `--enable-route-probe` is set; it takes bodies as large as ext_proc does.
pub(super) fn route_probe(serving: &Serving, director: &Director) -> Option<ProbeRoute> {
    serving.route_probe.then(|| ProbeRoute {
        probe: Arc::new(RouteProbe::new(director)),
        max_body: serving.limits.max_request_body,
    })
}

/// `/metrics`, and with the route probe `POST /debug/route[/<inference path>][?seed=N]` (docs/operations.md "Route
/// probe"); without it that path is a 404 like any other.
pub(super) fn spawn_metrics_server(
    listener: TcpListener,
    metrics: Arc<MetricsRegistry>,
    probe: Option<ProbeRoute>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    use axum::{http::header, routing::get, Router};
    let mut app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], metrics.encode()) }
        }),
    );
    if let Some(ProbeRoute { probe, max_body }) = probe {
        use axum::{extract::DefaultBodyLimit, routing::post};
        let handler =
            post(move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: bytes::Bytes| {
                let probe = probe.clone();
                async move { probe_route(&probe, &uri, &headers, body).await }
            });
        app = app
            .route(PROBE_PATH, handler.clone())
            .route(&format!("{PROBE_PATH}/{{*path}}"), handler)
            .layer(DefaultBodyLimit::max(max_body));
    }
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics server failed");
        }
    })
}

const PROBE_PATH: &str = "/debug/route";

/// One probe: the URL after [`PROBE_PATH`] is the inference path, the headers and body are the request's.
/// Errors before scheduling are answered as the ext_proc path answers them (status and body).
async fn probe_route(
    probe: &RouteProbe,
    uri: &axum::http::Uri,
    headers: &axum::http::HeaderMap,
    body: bytes::Bytes,
) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let fail = |e: RequestError| {
        let status = StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, e.to_string()).into_response()
    };
    let seed = match uri.query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("seed="))) {
        None => None,
        Some(raw) => match raw.parse::<u64>() {
            Ok(seed) => Some(seed),
            Err(_) => return fail(RequestError::bad_request(format!("seed {raw:?} is not a u64"))),
        },
    };
    let request = ProbeRequest {
        path: uri.path().strip_prefix(PROBE_PATH).unwrap_or_default().to_string(),
        headers: headers.iter().filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?))).collect(),
        body: body.to_vec(),
        seed,
    };
    match probe.explain(request).await.map(|answer| serde_json::to_vec_pretty(&answer)) {
        Ok(Ok(json)) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Ok(Err(e)) => fail(RequestError::internal(format!("encoding the explanation: {e}"))),
        Err(e) => fail(e),
    }
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
