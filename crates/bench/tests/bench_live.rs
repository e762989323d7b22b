//! epp-bench's library against a live epp-test-backend: a short streaming run and a counted
//! non-streaming run whose summaries must add up, a target with nothing listening (a clear error before
//! any load), and a backend answering 503 (HTTP errors, kept out of the latency statistics).

use std::time::Duration;

use epp_bench::{BenchError, Distribution, Report, RunOptions, Workload};
use epp_testkit::*;

const CHUNKS: u64 = 4;

fn workload(port: u16) -> Workload {
    Workload {
        url: Some(format!("http://127.0.0.1:{port}")),
        prompt_tokens: Distribution::Fixed(20),
        output_tokens: Distribution::Fixed(CHUNKS),
        ..Default::default()
    }
}

fn fast_backends(count: usize) -> TestBackends {
    start_test_backends(count, &["--chunks", &CHUNKS.to_string(), "--chunk-delay-ms", "1"])
}

#[tokio::test]
async fn streaming_run_measures_every_request() {
    let backends = fast_backends(1);
    let w = Workload {
        concurrency: Some(4),
        duration: Some(Duration::from_secs(1)),
        slo_ttft_ms: Some(60_000.0),
        ..workload(backends.ports[0])
    };
    let result = epp_bench::run(&w, &RunOptions::default()).await.expect("run");
    let report = Report::new(&w, &result, true);
    assert!(report.requests > 0);
    assert_eq!(report.ok, report.requests, "errors: {:?}", report.errors);
    assert!(report.errors.is_empty());
    let ttft = report.ttft_ms.expect("TTFT measured");
    assert_eq!(ttft.count as u64, report.ok);
    assert_eq!(report.tpot_ms.expect("TPOT measured").count as u64, report.ok);
    // Each stream has CHUNKS content events: CHUNKS - 1 gaps.
    assert_eq!(report.itl_ms.expect("ITL measured").count as u64, report.ok * (CHUNKS - 1));
    let e2e = report.e2e_ms.expect("E2E measured");
    assert!(e2e.p50 >= ttft.p50);
    assert_eq!(report.backends.get(&backends.id(0)), Some(&report.requests));
    let samples = report.samples.as_ref().expect("samples kept");
    assert!(samples.iter().all(|s| s.output_tokens == CHUNKS && s.prompt_tokens == 20));
    assert_eq!(report.slo.as_ref().map(|s| s.met), Some(report.requests));
    assert!(report.to_table().contains(&backends.id(0)));
}

#[tokio::test]
async fn counted_open_loop_run_sends_exactly_that_many() {
    let backends = fast_backends(2);
    let w = Workload {
        api: epp_bench::Api::Completions,
        stream: false,
        rate: Some(200.0),
        requests: Some(20),
        ..workload(backends.ports[1])
    };
    let result = epp_bench::run(&w, &RunOptions::default()).await.expect("run");
    let report = Report::new(&w, &result, false);
    assert_eq!((report.requests, report.ok), (20, 20), "errors: {:?}", report.errors);
    assert!(report.ttft_ms.is_none(), "no TTFT without streaming");
    assert_eq!(report.e2e_ms.expect("E2E").count, 20);
    assert_eq!((report.output_tokens_per_s * report.duration_s).round(), (20 * CHUNKS) as f64);
    assert_eq!(report.backends.get(&backends.id(1)), Some(&20));
}

#[tokio::test]
async fn unreachable_target_is_a_clear_error_before_any_load() {
    let port = free_port(); // nothing listens here
    let w = Workload { requests: Some(5), ..workload(port) };
    let error = epp_bench::run(&w, &RunOptions::default()).await.expect_err("nothing listens");
    assert!(matches!(error, BenchError::Unreachable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("cannot reach") && message.contains(&port.to_string()), "{message}");

    // Without the preflight the run goes ahead and counts connection errors instead.
    let options = RunOptions { preflight: false, ..Default::default() };
    let report = Report::new(&w, &epp_bench::run(&w, &options).await.expect("run"), false);
    assert_eq!((report.requests, report.ok), (5, 0));
    assert_eq!(report.errors.get("connection"), Some(&5));
    assert!(report.e2e_ms.is_none());
}

#[tokio::test]
async fn http_errors_are_counted_not_timed() {
    let backends = fast_backends(1);
    let mut w = Workload { concurrency: Some(2), requests: Some(10), ..workload(backends.ports[0]) };
    w.headers.insert("x-test-status".into(), "503".into());
    let report = Report::new(&w, &epp_bench::run(&w, &RunOptions::default()).await.expect("run"), false);
    assert_eq!((report.requests, report.ok), (10, 0));
    assert_eq!(report.errors.get("http_503"), Some(&10));
    assert!(report.e2e_ms.is_none() && report.ttft_ms.is_none(), "errors must not enter latency stats");
    assert_eq!(report.throughput_rps, 0.0);
    assert!(report.to_table().contains("http_503 10"));
}

#[tokio::test]
async fn bench_backend_streams_and_counts_in_process() {
    let options = epp_bench::backend::BackendOptions {
        model: "m".into(),
        chunks: 3,
        chunk_delay: Duration::ZERO,
        chunks_from_max_tokens: false,
        id_prefix: "inproc".into(),
    };
    let addrs =
        epp_bench::backend::serve(&["127.0.0.1:0".parse().expect("addr")], &options).await.expect("serve");
    for (api, stream) in
        [(epp_bench::Api::Chat, true), (epp_bench::Api::Completions, true), (epp_bench::Api::Chat, false)]
    {
        let w = Workload {
            url: Some(format!("http://{}", addrs[0])),
            api,
            stream,
            concurrency: Some(3),
            requests: Some(30),
            ..Default::default()
        };
        let report = Report::new(&w, &epp_bench::run(&w, &RunOptions::default()).await.expect("run"), false);
        assert_eq!((report.requests, report.ok), (30, 30), "{api:?} stream={stream}: {:?}", report.errors);
        assert_eq!((report.output_tokens_per_s * report.duration_s).round(), 90.0);
        assert_eq!(report.ttft_ms.is_some(), stream);
        assert_eq!(report.backends.get(&format!("inproc-{}", addrs[0].port())), Some(&30));
    }
}
