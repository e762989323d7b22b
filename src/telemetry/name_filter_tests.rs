//! Scrape loops asking for only their families, against real HTTP servers on 127.0.0.1 that answer the
//! way the servers in `super::name_filter`'s docs do. What a fake cannot show: the real vLLM's answer,
//! which `tests/e2e_vllm.rs` checks against the real server.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::datastore::Endpoint;
use crate::telemetry::test_data::sample_page;
use crate::telemetry::{EngineSet, ScrapeConfig, ScrapeConnection, Scraper};

/// vLLM with one API server: `/metrics` ignores the query, `/metrics/` honours it.
const VLLM: u8 = 0;
/// vLLM with several API servers (a multiprocess registry): `/metrics/` restricted is an empty page.
const MULTIPROCESS: u8 = 1;
/// A server that refuses any query with 400.
const REFUSES_QUERIES: u8 = 2;
/// A server that redirects `/metrics/` (as Starlette does for a mount without vLLM's workaround) and
/// ignores queries on `/metrics`.
const REDIRECTS: u8 = 3;
/// A server that fails with 503 whatever it is asked.
const UNAVAILABLE: u8 = 4;

#[derive(Clone)]
struct Server {
    mode: Arc<AtomicU8>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(mode: u8) -> (Self, Endpoint) {
        let server = Server { mode: Arc::new(AtomicU8::new(mode)), asked: Arc::default() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/metrics", axum::routing::get(answer))
            .route("/metrics/", axum::routing::get(answer))
            .with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (server, Endpoint::new("a", addr))
    }

    /// The paths asked since the last call, with `?…` standing for any query.
    fn asked(&self) -> Vec<String> {
        let asked = std::mem::take(&mut *self.asked.lock().unwrap());
        asked
            .into_iter()
            .map(|uri| uri.split_once('?').map_or(uri.clone(), |(p, _)| format!("{p}?…")))
            .collect()
    }
}

async fn answer(State(server): State<Server>, uri: Uri) -> Response {
    server.asked.lock().unwrap().push(uri.to_string());
    let page = String::from_utf8(sample_page("vllm-v1-metrics.txt")).unwrap();
    let names = uri.query().map(requested_names).unwrap_or_default();
    let mode = server.mode.load(Ordering::SeqCst);
    if mode == REFUSES_QUERIES && uri.query().is_some() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    if mode == REDIRECTS && uri.path() == "/metrics/" {
        return (StatusCode::TEMPORARY_REDIRECT, [("location", "/metrics")]).into_response();
    }
    if mode == UNAVAILABLE {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if uri.path() != "/metrics/" || names.is_empty() {
        return page.into_response();
    }
    if mode == MULTIPROCESS {
        return String::new().into_response();
    }
    // prometheus_client's restricted registry: only the samples named.
    let sample_name = |line: &str| line.split(['{', ' ']).next().unwrap_or("").to_string();
    let kept: String = page
        .lines()
        .filter(|l| !l.starts_with('#') && names.contains(&sample_name(l)))
        .map(|l| format!("{l}\n"))
        .collect();
    kept.into_response()
}

fn requested_names(query: &str) -> Vec<String> {
    // The only escapes epp's forms hold (`name[]=vllm:…`).
    let decode = |text: &str| text.replace("%5B", "[").replace("%5D", "]").replace("%3A", ":");
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| decode(key) == "name[]")
        .map(|(_, value)| decode(value))
        .collect()
}

async fn poll(scraper: &Scraper, endpoint: &Endpoint, connection: &mut ScrapeConnection) {
    let engine = EngineSet::builtin().default_engine().clone();
    let before = endpoint.telemetry();
    scraper.scrape_once(endpoint, &engine, connection).await.unwrap();
    let after = endpoint.telemetry();
    assert!(after.update_time > before.update_time, "every poll publishes fresh telemetry");
    assert_eq!((after.waiting_queue_size, after.running_requests, after.kv_cache_usage), (3, 14, 0.6421875));
    assert_eq!((after.cache_block_size, after.cache_num_blocks), (16, 81767));
    assert!(after.active_models.contains("food-review-1"));
}

fn connection_for(endpoint: &Endpoint, enabled: bool) -> ScrapeConnection {
    let engine = EngineSet::builtin().default_engine().clone();
    ScrapeConnection::filtered(&endpoint.metrics_url, engine.wanted_names(), enabled)
}

#[tokio::test]
async fn vllm_is_asked_for_its_five_gauges_where_it_honours_the_filter() {
    let (server, endpoint) = Server::start(VLLM).await;
    let scraper = Scraper::new(ScrapeConfig::default()).unwrap();
    let mut connection = connection_for(&endpoint, true);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics?…"], "the whole page came back and was used");
    assert!(!connection.is_filtered());
    for _ in 0..3 {
        poll(&scraper, &endpoint, &mut connection).await;
        assert_eq!(server.asked(), ["/metrics/?…"]);
        assert!(connection.is_filtered());
    }
    let asked_names = requested_names(connection.url().split_once('?').unwrap().1);
    assert_eq!(asked_names, EngineSet::builtin().default_engine().wanted_names());
}

#[tokio::test]
async fn an_empty_restricted_page_is_asked_again_whole_in_the_same_poll() {
    let (server, endpoint) = Server::start(MULTIPROCESS).await;
    let scraper = Scraper::new(ScrapeConfig::default()).unwrap();
    let mut connection = connection_for(&endpoint, true);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics?…"]);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics/?…", "/metrics"]);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics"], "the whole page from now on");
}

#[tokio::test]
async fn a_server_that_refuses_queries_is_scraped_whole_from_the_first_poll() {
    let (server, endpoint) = Server::start(REFUSES_QUERIES).await;
    let scraper = Scraper::new(ScrapeConfig::default()).unwrap();
    let mut connection = connection_for(&endpoint, true);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics?…", "/metrics/?…", "/metrics"]);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics"]);
}

#[tokio::test]
async fn a_redirect_is_a_form_not_served_and_a_5xx_is_a_failed_poll() {
    let (server, endpoint) = Server::start(REDIRECTS).await;
    let scraper = Scraper::new(ScrapeConfig::default()).unwrap();
    let mut connection = connection_for(&endpoint, true);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics?…"]);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics/?…", "/metrics"], "the redirect is not followed, the page is");

    let (server, endpoint) = Server::start(UNAVAILABLE).await;
    let mut connection = connection_for(&endpoint, true);
    let engine = EngineSet::builtin().default_engine().clone();
    for _ in 0..2 {
        let failed = scraper.scrape_once(&endpoint, &engine, &mut connection).await;
        assert!(failed.is_err());
        assert_eq!(
            server.asked(),
            ["/metrics?…"],
            "a 5xx says nothing about the form: asked again next poll"
        );
    }
}

#[tokio::test]
async fn a_server_that_stops_filtering_is_scraped_whole_without_a_stale_poll() {
    let (server, endpoint) = Server::start(VLLM).await;
    let scraper = Scraper::new(ScrapeConfig::default()).unwrap();
    let mut connection = connection_for(&endpoint, true);
    poll(&scraper, &endpoint, &mut connection).await;
    poll(&scraper, &endpoint, &mut connection).await;
    assert!(connection.is_filtered());
    server.asked();
    // Restarted with several API servers.
    server.mode.store(MULTIPROCESS, Ordering::SeqCst);
    poll(&scraper, &endpoint, &mut connection).await;
    assert_eq!(server.asked(), ["/metrics/?…", "/metrics"]);
    assert!(!connection.is_filtered());
}

#[tokio::test]
async fn disabled_asks_for_the_whole_page_only() {
    let (server, endpoint) = Server::start(VLLM).await;
    let scraper = Scraper::new(ScrapeConfig { name_filter: false, ..ScrapeConfig::default() }).unwrap();
    let mut connection = connection_for(&endpoint, false);
    for _ in 0..2 {
        poll(&scraper, &endpoint, &mut connection).await;
        assert_eq!(server.asked(), ["/metrics"]);
    }
}
