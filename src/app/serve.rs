//! The listening side: binding the three ports before anything is served (so a taken port fails start-up
//! and tests can bind port 0 and read the addresses back), and the ext_proc gRPC server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::director::Director;
use crate::extproc::{ExtProcService, OverheadMetrics};
use crate::metrics::MetricsRegistry;
use crate::tls::TlsIncoming;

use super::settings::Serving;

/// The ext_proc, health and metrics listeners, bound.
pub(super) struct Listeners {
    pub grpc: TcpListener,
    pub health: TcpListener,
    pub metrics: TcpListener,
}

/// The addresses the listeners got (the real ports when port 0 was asked for).
pub(super) struct Addresses {
    pub grpc: SocketAddr,
    pub health: SocketAddr,
    pub metrics: SocketAddr,
}

impl Listeners {
    pub(super) async fn bind(serving: &Serving) -> anyhow::Result<(Self, Addresses)> {
        let grpc = TcpListener::bind(serving.grpc).await.context("binding --grpc-port")?;
        let health = TcpListener::bind(serving.health).await.context("binding --grpc-health-port")?;
        let metrics = TcpListener::bind(serving.metrics).await.context("binding --metrics-port")?;
        let addresses = Addresses {
            grpc: grpc.local_addr()?,
            health: health.local_addr()?,
            metrics: metrics.local_addr()?,
        };
        Ok((Self { grpc, health, metrics }, addresses))
    }
}

/// Serves ext_proc on `listener` until `stop` turns true (then finishes the open streams).
pub(super) fn serve_ext_proc(
    listener: TcpListener,
    serving: &Serving,
    director: Arc<Director>,
    metrics: &MetricsRegistry,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<Result<(), tonic::transport::Error>>> {
    let service =
        ExtProcService::new(director, serving.limits, OverheadMetrics::register(metrics)).into_server();
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(100_000));
    let router = builder.add_service(service);
    let shutdown = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    Ok(match &serving.tls {
        // rustls directly (crate::tls) rather than tonic's TLS: the version and suite policy, client
        // certificates, and certificates reloaded when they rotate.
        Some(config) => {
            let incoming = TlsIncoming::new(listener, config.clone()).context("--secure-serving")?;
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown))
        }
        // serve_with_incoming ignores the builder's tcp_nodelay; without it Nagle holds epp's first
        // answer on each new Envoy connection until Envoy's delayed ACK (~40ms).
        None => tokio::spawn(
            router
                .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown),
        ),
    })
}
