//! What the access gate adds to a scrape of the metrics port: a decision from the cache (the steady state
//! of a Prometheus scraping every 15 s with one token: the API server is asked once a minute), a static
//! token from `--metrics-token-file`, and beside them the scrape's own work, encoding `/metrics` for a
//! 100-endpoint pool. The first scrape of a token costs a TokenReview and a SubjectAccessReview round trip
//! to the API server on top (here the test kit's fake API server on loopback).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use epp::access::{AccessConfig, Gate};
use epp::datastore::{Datastore, Endpoint};
use epp::discovery::ClientSource;
use epp::metrics::MetricsRegistry;
use epp::telemetry::PoolMetrics;
use epp_testkit::kube_api::FakeKubeApi;

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let api = rt.block_on(FakeKubeApi::start()).expect("fake API server");
    api.reviews().add_token("prometheus", "prometheus", &[]);
    api.reviews().grant("prometheus", "get", "/metrics");
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "static-token\n").expect("write");
    let registry = MetricsRegistry::new("bench");
    let reviewed =
        AccessConfig { kubernetes: Some(ClientSource::Kubeconfig(kubeconfig)), ..Default::default() };
    let reviewed = Gate::build(&reviewed, &registry).expect("gate").expect("on");
    let static_tokens = AccessConfig { token_file: Some(tokens), ..Default::default() };
    let static_tokens =
        Gate::build(&static_tokens, &MetricsRegistry::new("bench")).expect("gate").expect("on");

    let first = std::time::Instant::now();
    rt.block_on(reviewed.check(Some("Bearer prometheus"), "get", "/metrics")).expect("allowed");
    eprintln!("first scrape of a token (TokenReview + SubjectAccessReview, loopback): {:?}", first.elapsed());
    c.bench_function("metrics_auth/cached_review", |b| {
        b.iter(|| {
            rt.block_on(reviewed.check(Some("Bearer prometheus"), "get", "/metrics")).expect("allowed");
        });
    });
    c.bench_function("metrics_auth/static_token", |b| {
        b.iter(|| {
            rt.block_on(static_tokens.check(Some("Bearer static-token"), "get", "/metrics"))
                .expect("allowed");
        });
    });

    // The scrape itself: the exposition of a pool of 100 endpoints.
    let datastore = Arc::new(Datastore::new("bench"));
    let pool =
        (0..100).map(|i| Endpoint::new(format!("ep-{i}"), format!("10.0.0.{i}:8000").parse().expect("addr")));
    datastore.set_endpoints(pool.collect());
    let gauges = PoolMetrics::register(&registry);
    gauges.update_pool(&datastore.endpoints(), std::time::Instant::now(), std::time::Duration::from_secs(5));
    c.bench_function("metrics_auth/encode_100_endpoint_page", |b| {
        b.iter(|| {
            criterion::black_box(registry.encode());
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
