//! The metrics port's HTTP server: `/metrics`, and with `--enable-route-probe` the route probe, both
//! behind the access [`Gate`] when there is one (`--metrics-endpoint-auth`, `--metrics-token-file`;
//! docs/operations.md "Who may read the metrics port").

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use anyhow::Context;
use tokio_rustls::rustls::ServerConfig;

use crate::access::Gate;
use crate::director::{Director, ProbeRequest, RouteProbe};
use crate::error::RequestError;
use crate::metrics::MetricsRegistry;
use crate::tls::TlsIncoming;

use super::settings::Serving;

/// What the metrics port serves besides `/metrics`, and how.
pub(super) struct MetricsPort {
    /// `--enable-route-probe`.
    pub probe: Option<ProbeRoute>,
    /// Who may read it (`None`: anyone).
    pub gate: Option<Arc<Gate>>,
    /// `--metrics-cert-dir`: TLS.
    pub tls: Option<Arc<ServerConfig>>,
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
    MetricsPort { probe, gate, tls }: MetricsPort,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
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
    if let Some(gate) = gate {
        // Every route: a path with no route is a 404 either way, and the check comes first.
        app = app.layer(axum::middleware::from_fn_with_state(gate, check_access));
    }
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let served = match tls {
        Some(config) => {
            let incoming = TlsIncoming::new(listener, config).context("--metrics-cert-dir")?;
            tokio::spawn(async move { axum::serve(incoming, app).with_graceful_shutdown(shutdown).await })
        }
        None => {
            tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await })
        }
    };
    Ok(tokio::spawn(async move {
        match served.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "metrics server failed"),
            Err(e) => tracing::error!(error = %e, "metrics server failed"),
        }
    }))
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

/// Lets the request through when the gate allows its bearer token to `get` (or `post`) its path;
/// otherwise answers 401 (with `WWW-Authenticate: Bearer`), 403 or 503.
async fn check_access(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    use axum::http::{header, StatusCode};
    let authorization = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let verb = request.method().as_str().to_ascii_lowercase();
    match gate.check(authorization, &verb, request.uri().path()).await {
        Ok(()) => next.run(request).await,
        Err(denied) => {
            let status = StatusCode::from_u16(denied.status()).unwrap_or(StatusCode::FORBIDDEN);
            let mut response = (status, denied.message()).into_response();
            if status == StatusCode::UNAUTHORIZED {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            }
            response
        }
    }
}
