//! Scrape loops against real HTTP servers on 127.0.0.1. No timing assertions: every wait polls for a
//! condition under a generous deadline.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::*;
use crate::telemetry::engines::DEFAULT_ENGINE_LABEL_KEY;
use crate::telemetry::test_data::sample_page;
use crate::telemetry::ScrapeConnection;

const SERVE: u8 = 0;
const FAIL: u8 = 1;
const HANG: u8 = 2;

#[derive(Clone)]
struct FakeServer {
    mode: Arc<AtomicU8>,
    hits: Arc<AtomicUsize>,
    page: Arc<Vec<u8>>,
}

impl FakeServer {
    async fn start(mode: u8, page: Vec<u8>) -> (Self, SocketAddr) {
        let server = FakeServer {
            mode: Arc::new(AtomicU8::new(mode)),
            hits: Arc::new(AtomicUsize::new(0)),
            page: Arc::new(page),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(metrics_page))
            .with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (server, addr)
    }

    fn set_mode(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn metrics_page(State(server): State<FakeServer>) -> Response {
    server.hits.fetch_add(1, Ordering::SeqCst);
    match server.mode.load(Ordering::SeqCst) {
        SERVE => (StatusCode::OK, server.page.as_ref().clone()).into_response(),
        FAIL => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        _ => std::future::pending::<Response>().await,
    }
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn fast_config() -> ScrapeConfig {
    ScrapeConfig {
        refresh_interval: Duration::from_millis(10),
        poll_timeout: Duration::from_millis(200),
        ..ScrapeConfig::default()
    }
}

struct Harness {
    datastore: Arc<Datastore>,
    shutdown: watch::Sender<bool>,
    supervisor: JoinHandle<()>,
}

fn start_supervisor(config: ScrapeConfig, endpoints: Vec<Endpoint>) -> Harness {
    let datastore = Arc::new(Datastore::new("pool"));
    datastore.set_endpoints(endpoints);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let supervisor = spawn_scrapers(datastore.clone(), config, shutdown_rx).unwrap();
    Harness { datastore, shutdown, supervisor }
}

fn v1_page() -> Vec<u8> {
    sample_page("vllm-v1-metrics.txt")
}

#[tokio::test]
async fn fills_metrics_from_the_sample_page_and_notifies() {
    let (_server, addr) = FakeServer::start(SERVE, v1_page()).await;
    let updates = Arc::new(AtomicUsize::new(0));
    let counter = updates.clone();
    let config = ScrapeConfig {
        on_update: Some(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })),
        ..fast_config()
    };
    let h = start_supervisor(config, vec![Endpoint::new("a", addr)]);
    let ep = h.datastore.endpoints()[0].clone();
    eventually("metrics published", || ep.telemetry().update_time.is_some()).await;
    let m = ep.telemetry();
    assert_eq!((m.waiting_queue_size, m.running_requests, m.kv_cache_usage), (3, 14, 0.6421875));
    assert_eq!((m.cache_block_size, m.cache_num_blocks, m.max_active_models), (16, 81767, 2));
    assert!(m.active_models.contains("food-review-1"));
    eventually("update callback", || updates.load(Ordering::SeqCst) > 0).await;
}

#[tokio::test]
async fn server_errors_then_recovery() {
    let (server, addr) = FakeServer::start(FAIL, v1_page()).await;
    let h = start_supervisor(fast_config(), vec![Endpoint::new("a", addr)]);
    let ep = h.datastore.endpoints()[0].clone();
    eventually("several failed polls", || server.hits() >= 3).await;
    assert_eq!(ep.telemetry().update_time, None, "a 500 publishes nothing");
    server.set_mode(SERVE);
    eventually("recovered metrics", || ep.telemetry().waiting_queue_size == 3).await;
}

#[tokio::test]
async fn a_hanging_server_times_out_and_the_loop_keeps_going() {
    let (server, addr) = FakeServer::start(HANG, v1_page()).await;
    let h = start_supervisor(fast_config(), vec![Endpoint::new("a", addr)]);
    let ep = h.datastore.endpoints()[0].clone();
    eventually("polls after timeouts", || server.hits() >= 3).await;
    assert_eq!(ep.telemetry().update_time, None);
    server.set_mode(SERVE);
    eventually("metrics after the server wakes", || ep.telemetry().running_requests == 14).await;
}

#[tokio::test]
async fn a_removed_endpoint_loses_its_loop() {
    let (_server, addr) = FakeServer::start(SERVE, v1_page()).await;
    let (_other_server, other_addr) = FakeServer::start(SERVE, v1_page()).await;
    let h = start_supervisor(fast_config(), vec![Endpoint::new("a", addr), Endpoint::new("b", other_addr)]);
    let removed = h.datastore.endpoints()[0].clone();
    let kept = h.datastore.endpoints()[1].clone();
    eventually("first scrape", || removed.telemetry().update_time.is_some()).await;
    let changes = h.datastore.set_endpoints(vec![Endpoint::new("b", other_addr)]);
    assert_eq!(changes.removed.len(), 1);
    drop(changes);
    // The loop and the supervisor's map hold the only other references: once both let go, the loop is gone.
    eventually("loop of the removed endpoint dropped", || Arc::strong_count(&removed) == 1).await;
    // The kept endpoint is still scraped: its telemetry keeps being replaced.
    let before = kept.telemetry();
    eventually("kept endpoint still scraped", || !Arc::ptr_eq(&before, &kept.telemetry())).await;
}

#[tokio::test]
async fn shutdown_stops_the_supervisor_and_every_loop() {
    let (_server, addr) = FakeServer::start(SERVE, v1_page()).await;
    let h = start_supervisor(fast_config(), vec![Endpoint::new("a", addr)]);
    let ep = h.datastore.endpoints()[0].clone();
    eventually("first scrape", || ep.telemetry().update_time.is_some()).await;
    h.shutdown.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), h.supervisor).await.unwrap().unwrap();
    // Held by this test and the datastore only.
    eventually("loop dropped", || Arc::strong_count(&ep) == 2).await;
}

#[tokio::test]
async fn the_engine_label_selects_the_mapping() {
    let page = b"sglang:num_queue_reqs 4\nsglang:num_running_reqs 5\nsglang:token_usage 0.5\n".to_vec();
    let (_server, addr) = FakeServer::start(SERVE, page).await;
    let labels = BTreeMap::from([(DEFAULT_ENGINE_LABEL_KEY.to_string(), "sglang".to_string())]);
    let h = start_supervisor(fast_config(), vec![Endpoint::new("a", addr).with_labels(labels)]);
    let ep = h.datastore.endpoints()[0].clone();
    eventually("sglang metrics", || ep.telemetry().running_requests == 5).await;
    assert_eq!((ep.telemetry().waiting_queue_size, ep.telemetry().kv_cache_usage), (4, 0.5));
}

#[tokio::test]
async fn connection_refused_publishes_nothing_and_keeps_polling() {
    // Bind then drop to get a port with (very likely) nothing listening.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let scraper = Scraper::new(fast_config()).unwrap();
    let ep = Endpoint::new("gone", addr);
    let engine = crate::telemetry::EngineSet::builtin().default_engine().clone();
    let mut connection = ScrapeConnection::new(&ep.metrics_url);
    let err = scraper.scrape_once(&ep, &engine, &mut connection).await.unwrap_err();
    assert!(matches!(err, ScrapeError::Request(_) | ScrapeError::Timeout(_)), "{err}");
    assert_eq!(ep.telemetry().update_time, None);
}
