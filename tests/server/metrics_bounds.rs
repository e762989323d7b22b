//! Bounded metrics under hostile label combinations (issue 11, item 2). First the per-family series cap
//! over the wired components (overflow series, dropped counter, slots freed when an endpoint leaves),
//! then through the real server over loopback gRPC the way Envoy drives it: 100 body models × 100
//! `x-gateway-model-name-rewrite` values, and 3,000 unique model names. Without the cap these made
//! `/metrics` 497 MB and 56 MB (every family kept one series per label combination); with it the page
//! stays small, the overflow series and the dropped-label-set counter say what was folded, and no
//! request goes uncounted.
//!
//! Sizes are asserted, never times: the scrape time is printed for the record only.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::grpc_support::*;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Resp;
use epp::datastore::Endpoint;
use epp::director::DirectorMetrics;
use epp::metrics::{MetricsRegistry, RequestLabels, OVERFLOW_SERIES_LABEL};
use epp::scheduling::PluginMetrics;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// What "a few MB" means here (the uncapped pages were 497 MB and 56 MB). At the default cap a family
/// holds at most 1,000 exposition lines plus its overflow label set, ~150 KB: the ~20 per-request families
/// recorded here make ~2.5 MB, and ~3.1 MB when the attempt families also fill (1,000 target models).
const MAX_PAGE_BYTES: usize = 3_000_000;
const MAX_PAGE_BYTES_ATTEMPTS_FULL: usize = 4_000_000;
/// Streams in flight at once over the one connection (enough to keep the server busy, not a load test).
const CONCURRENCY: usize = 16;
const MARKER: &str = OVERFLOW_SERIES_LABEL;
const DROPPED: &str = "epp_metrics_dropped_label_sets_total";

fn registry(max_series: usize) -> Arc<MetricsRegistry> {
    MetricsRegistry::with_max_series("pool", NonZeroUsize::new(max_series).expect("non-zero"))
}

#[test]
fn combinations_past_the_cap_go_to_the_overflow_series() {
    // 10 series: 10 counter label sets, but one histogram label set (request sizes: 28 series each).
    let r = registry(10);
    let DirectorMetrics { requests, .. } = DirectorMetrics::register(&r);
    let names: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    for model in &names {
        for target in &names {
            let l =
                RequestLabels { model_name: model, target_model_name: target, priority: 2, fairness_id: "" };
            requests.record_request(&requests.series(l), 100);
        }
    }
    let page = r.encode();
    let (total, series) = sum(&page, "inference_objective_request_total", &[]);
    assert_eq!((total, series), (25.0, 11), "10 label sets and the overflow; every request counted");
    let overflow = [("model_name", MARKER), ("target_model_name", MARKER), ("priority", "2")];
    assert_eq!(sum(&page, "inference_objective_request_total", &overflow), (15.0, 1));
    assert_eq!(sum(&page, "llm_d_epp_request_total", &[("fairness_id", MARKER)]), (15.0, 1));
    let (sizes, size_series) = sum(&page, "llm_d_epp_request_size_bytes_count", &[]);
    assert_eq!((sizes, size_series), (25.0, 2), "one histogram label set and the overflow");
    assert_eq!(sum(&page, DROPPED, &[("family", "inference_objective_request")]).0, 15.0);
    assert_eq!(sum(&page, DROPPED, &[("family", "llm_d_epp_request_size_bytes")]).0, 24.0);
    assert_eq!(sum(&page, DROPPED, &[("family", "llm_d_epp_request_error")]).0, 0.0, "nothing dropped yet");
}

#[test]
fn kept_series_record_as_fresh_lookups_would() {
    let r = registry(10);
    let DirectorMetrics { requests, .. } = DirectorMetrics::register(&r);
    let names: Vec<String> = (0..11).map(|i| format!("m{i}")).collect();
    fn l(model: &str) -> RequestLabels<'_> {
        RequestLabels { model_name: model, target_model_name: model, priority: 2, fairness_id: "" }
    }
    // Each flow's series is found once and kept; every request of the flow gets the same one.
    let first = requests.series(l(&names[0]));
    assert!(Arc::ptr_eq(&first, &requests.series(l(&names[0]))), "one flow, one kept series");
    for model in &names[..10] {
        for _ in 0..2 {
            requests.record_request(&requests.series(l(model)), 100);
        }
    }
    // The 11th flow finds the counter family full: each of its recordings, through one kept series, is
    // folded into the overflow series and counted as dropped, as a fresh lookup per recording would be.
    let late = requests.series(l(&names[10]));
    for _ in 0..3 {
        requests.record_request(&late, 100);
    }
    let page = r.encode();
    assert_eq!(
        sum(&page, "inference_objective_request_total", &[]),
        (23.0, 11),
        "10 label sets and the overflow"
    );
    let overflow = [("model_name", MARKER), ("target_model_name", MARKER), ("priority", "2")];
    assert_eq!(sum(&page, "inference_objective_request_total", &overflow), (3.0, 1));
    assert_eq!(sum(&page, DROPPED, &[("family", "inference_objective_request")]).0, 3.0);
    // The size histogram family holds one label set: m0's. Every other recording went to its overflow.
    assert_eq!(sum(&page, DROPPED, &[("family", "llm_d_epp_request_size_bytes")]).0, 21.0);
    assert_eq!(requests.kept_flows(), 11);
}

#[test]
fn flows_folded_by_the_label_cap_are_not_kept() {
    let r = registry(10_000);
    let DirectorMetrics { requests, .. } = DirectorMetrics::register(&r);
    fn l(model: &str) -> RequestLabels<'_> {
        RequestLabels { model_name: model, target_model_name: "", priority: 0, fairness_id: "" }
    }
    // The per-label cap admits 1,000 model names; later ones read `other` and their flows are not kept,
    // so that a name pinned later (a configured model) is recorded under itself from then on.
    let names: Vec<String> = (0..1001).map(|i| format!("model-{i}")).collect();
    for name in &names {
        requests.record_request(&requests.series(l(name)), 1);
    }
    assert_eq!(requests.kept_flows(), 1000);
    assert!(!Arc::ptr_eq(&requests.series(l(&names[1000])), &requests.series(l(&names[1000]))));
    let page = r.encode();
    assert_eq!(sum(&page, "llm_d_epp_request_total", &[("model_name", "other")]).0, 1.0);
}

#[test]
fn an_endpoint_that_leaves_frees_its_attempt_slots() {
    let r = registry(2);
    let DirectorMetrics { scheduler, .. } = DirectorMetrics::register(&r);
    let plugins = PluginMetrics::register(&r);
    let ep = |name: &str, addr: &str| Endpoint::new(name, addr.parse().expect("address"));
    let (a, b, c, d) = (
        ep("a", "10.0.0.1:8000"),
        ep("b", "10.0.0.2:8000"),
        ep("c", "10.0.0.3:8000"),
        ep("d", "10.0.0.4:8000"),
    );
    for endpoint in [&a, &b, &c] {
        scheduler.record_scheduling(Duration::ZERO, "t", Some(endpoint));
    }
    let attempts = "llm_d_epp_scheduler_attempts_total";
    let page = r.encode();
    assert_eq!(sum(&page, attempts, &[("endpoint_name", "c"), ("target_model_name", MARKER)]), (1.0, 1));
    // a leaves: its slot is free for d; c's overflow series goes with c.
    plugins.inflight.remove_endpoint(&a);
    plugins.inflight.remove_endpoint(&c);
    scheduler.record_scheduling(Duration::ZERO, "t", Some(&d));
    let page = r.encode();
    assert_eq!(sum(&page, attempts, &[("endpoint_name", "d"), ("target_model_name", "t")]), (1.0, 1));
    assert_eq!(sum(&page, attempts, &[("endpoint_name", "a")]).1, 0);
    assert_eq!(sum(&page, attempts, &[("endpoint_name", "c")]).1, 0);
    assert_eq!(sum(&page, attempts, &[]), (2.0, 2), "b and d: the cap holds");
    assert_eq!(sum(&page, DROPPED, &[("family", "llm_d_epp_scheduler_attempts")]).0, 1.0);
    // The family is full again.
    scheduler.record_scheduling(Duration::ZERO, "t", Some(&a));
    let page = r.encode();
    assert_eq!(sum(&page, attempts, &[("endpoint_name", "a"), ("target_model_name", MARKER)]), (1.0, 1));
}

/// One request: the body's model and the client's rewrite header, if any.
struct Request {
    model: String,
    rewrite: Option<String>,
}

/// Routes `request` and answers it with a JSON response carrying usage, as a model server would.
async fn one_request(client: ExternalProcessorClient<tonic::transport::Channel>, request: Request) {
    let (tx, rx) = mpsc::channel(8);
    let rx = client.clone().process(ReceiverStream::new(rx)).await.expect("process").into_inner();
    let mut s = Stream { tx, rx };
    let mut headers = vec![(":method", "POST"), (":path", "/v1/completions")];
    if let Some(target) = &request.rewrite {
        headers.push(("x-gateway-model-name-rewrite", target));
    }
    s.send(request_headers(&headers, false, None)).await;
    let payload = format!(r#"{{"model":"{}","prompt":"hi","max_tokens":4}}"#, request.model);
    s.send(body(payload.as_bytes(), true)).await;
    let routing = s.recv_full().await;
    assert!(routing_of(&routing).set.contains_key("x-gateway-destination-endpoint"), "routed");
    let (_, eos) = streamed_of(&s.recv().await);
    assert!(eos);
    s.send(response_headers(&[(":status", "200"), ("content-type", "application/json")], false)).await;
    assert!(matches!(s.recv().await, Resp::ResponseHeaders(_)));
    let answer = br#"{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
    s.send(response_body(answer, true)).await;
    let (_, eos) = streamed_of(&s.recv().await);
    assert!(eos);
}

/// Starts epp with `extra` flags, sends every request, waits until each has been accounted for, and
/// returns the `/metrics` page as Prometheus would scrape it.
async fn scrape_after(requests: Vec<Request>, extra: &[&str]) -> String {
    let server = FakeModelServer::start(0, 0.1).await;
    let epp = start_epp(&[server.addr], extra).await;
    let client =
        ExternalProcessorClient::connect(format!("http://{}", epp.grpc_addr)).await.expect("connect");
    let total = requests.len();
    futures::stream::iter(requests)
        .map(|r| one_request(client.clone(), r))
        .buffer_unordered(CONCURRENCY)
        .collect::<()>()
        .await;
    // A stream's last response message is sent before its request is released: wait for the releases.
    wait_until(|| epp.request_metrics.running_requests() == 0).await;
    let started = Instant::now();
    let page = reqwest::get(format!("http://{}/metrics", epp.metrics_addr))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("page");
    eprintln!(
        "{total} requests, flags {extra:?}: /metrics {} bytes, scraped in {:?}; peak RSS {} kB",
        page.len(),
        started.elapsed(),
        peak_rss_kb()
    );
    epp.shutdown().await;
    page
}

/// The test process's peak resident set (epp runs in it), for the record.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The sum of every sample of `name` whose labels include all of `labels`, and how many there were.
fn sum(page: &str, name: &str, labels: &[(&str, &str)]) -> (f64, usize) {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = series.split_once('{').unwrap_or((series, ""));
            let matches = series_name == name && wanted.iter().all(|w| rest.contains(w.as_str()));
            matches.then(|| value.parse::<f64>().ok())?
        })
        .fold((0.0, 0), |(total, n), v| (total + v, n + 1))
}

/// Asserts what every capped page must show: small, every request counted, the overflow series and
/// the dropped counter present.
fn assert_bounded(page: &str, requests: usize, max_bytes: usize) {
    assert!(page.len() < max_bytes, "/metrics is {} bytes", page.len());
    assert!(page.ends_with("# EOF\n"));
    for family in ["inference_objective_request_total", "llm_d_epp_request_total"] {
        let (total, _) = sum(page, family, &[]);
        assert_eq!(total, requests as f64, "{family}: every request counted, none lost");
        let (overflowed, series) = sum(page, family, &[("target_model_name", MARKER)]);
        assert!(overflowed > 0.0 && series >= 1, "{family} has its overflow series");
    }
    let (completed, _) = sum(page, "llm_d_epp_request_duration_seconds_count", &[]);
    assert_eq!(completed, requests as f64, "every response recorded");
    for family in ["llm_d_epp_request", "inference_objective_request", "llm_d_epp_request_duration_seconds"] {
        let (dropped, _) = sum(page, DROPPED, &[("family", family)]);
        assert!(dropped > 0.0, "dropped label sets of {family} counted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_models_times_hundred_rewrites_stay_small() {
    let requests: Vec<Request> = (0..100)
        .flat_map(|m| (0..100).map(move |t| (m, t)))
        .map(|(m, t)| Request { model: format!("model-{m}"), rewrite: Some(format!("target-{t}")) })
        .collect();
    let page = scrape_after(requests, &[]).await;
    assert_bounded(&page, 10_000, MAX_PAGE_BYTES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_model_names_stay_small() {
    let requests: Vec<Request> =
        (0..3000).map(|m| Request { model: format!("unique-model-{m}"), rewrite: None }).collect();
    let page = scrape_after(requests, &[]).await;
    assert_bounded(&page, 3000, MAX_PAGE_BYTES_ATTEMPTS_FULL);
}
