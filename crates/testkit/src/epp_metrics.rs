//! Reading epp's Prometheus `/metrics` in e2e tests, and waiting for telemetry to propagate.
//!
//! Why: epp only routes on what it has scraped, and scraping is asynchronous (every 50ms in tests). A test
//! that changes a backend's load must wait until epp has *seen* the change before it sends traffic, or it
//! races the scraper. epp exports what it scraped (`inference_pool_per_pod_queue_size`, refreshed every
//! `--refresh-prometheus-metrics-interval`), so tests poll that instead of sleeping.

use std::time::{Duration, Instant};

use super::{http_get_blocking, Epp};

/// How long telemetry may take to reach epp's /metrics. Generous: scrapes run every 50ms in tests, but
/// CI machines stall.
pub const PROPAGATION_DEADLINE: Duration = Duration::from_secs(30);
const ASYNC_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// The epp flag that makes the pool gauges (averages, per-pod queue) refresh fast enough for tests.
pub const FAST_POOL_GAUGES: &str = "--refresh-prometheus-metrics-interval=100ms";

impl Epp {
    /// epp's Prometheus exposition (empty if the metrics port does not answer 200).
    pub fn metrics_text(&self) -> String {
        match http_get_blocking(self.metrics_port, "/metrics") {
            Some((200, body)) => body,
            _ => String::new(),
        }
    }
}

/// The value of the first sample of `name` (exact metric name, e.g. `inference_objective_request_total`)
/// whose labels include every `(label, value)` in `labels`.
pub fn metric_sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once('}')?,
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        let has_all =
            labels.iter().all(|(label, value)| label_text.contains(&format!("{label}=\"{value}\"")));
        if !has_all {
            return None;
        }
        value.split_whitespace().next()?.parse().ok()
    })
}

/// The sum of every sample of `name` whose labels include every `(label, value)` in `labels`; `None`
/// when no sample matches. Series of one family differ in labels a test may not care about.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: Vec<String> = labels.iter().map(|(label, value)| format!("{label}=\"{value}\"")).collect();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (label_text, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once('}')?,
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            wanted.iter().all(|w| label_text.contains(w.as_str())).then_some(())?;
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .fold(None, |sum, value| Some(sum.unwrap_or(0.0) + value))
}

/// Polls `ready` (async) until it returns true or `deadline` passes; returns whether it became true.
/// The async twin of [`super::wait_until`], for use inside `#[tokio::test]` without blocking the runtime.
pub async fn wait_until_async<F, Fut>(deadline: Duration, mut ready: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < deadline {
        if ready().await {
            return true;
        }
        tokio::time::sleep(ASYNC_POLL_INTERVAL).await;
    }
    ready().await
}

/// Waits (up to [`PROPAGATION_DEADLINE`]) until each of `gauges` sums to 0 on the page `metrics` returns
/// (and the page is not empty): nothing left in flight. Otherwise returns each gauge's last sum.
pub async fn wait_for_gauges_zero(metrics: impl Fn() -> String, gauges: &[&str]) -> Result<(), Vec<String>> {
    let sums =
        |text: &str| gauges.iter().map(|g| (*g, metric_sum(text, g, &[]).unwrap_or(0.0))).collect::<Vec<_>>();
    let settled = wait_until_async(PROPAGATION_DEADLINE, || {
        let text = metrics();
        let ok = !text.is_empty() && sums(&text).iter().all(|(_, sum)| *sum == 0.0);
        async move { ok }
    })
    .await;
    match settled {
        true => Ok(()),
        false => Err(sums(&metrics()).into_iter().map(|(g, sum)| format!("{g}={sum}")).collect()),
    }
}

/// Reads `value` until it equals `want` or [`PROPAGATION_DEADLINE`] passes; returns the last reading. For
/// a server's own counters, which it may update a moment after it answers (llama.cpp, vLLM's stat logger).
pub async fn settled_value(want: f64, mut value: impl FnMut() -> f64) -> f64 {
    let mut last = value();
    let start = Instant::now();
    while last != want && start.elapsed() < PROPAGATION_DEADLINE {
        tokio::time::sleep(ASYNC_POLL_INTERVAL).await;
        last = value();
    }
    last
}

/// Waits until epp's `inference_pool_per_pod_queue_size` for each `127.0.0.1:<port>` equals the queue
/// length given for it, i.e. until epp has scraped loads set with `set_backend_load`. Panics with epp's
/// metrics if it does not happen within [`PROPAGATION_DEADLINE`]. Needs epp started with
/// [`FAST_POOL_GAUGES`].
pub async fn wait_for_scraped_queues(epp: &Epp, queues: &[(u16, f64)]) {
    let seen = |text: &str| {
        queues.iter().all(|(port, queue)| {
            let pod = format!("127.0.0.1:{port}");
            metric_sample(text, "inference_pool_per_pod_queue_size", &[("model_server_pod", &pod)])
                == Some(*queue)
        })
    };
    let scraped = wait_until_async(PROPAGATION_DEADLINE, || {
        let text = epp.metrics_text();
        async move { seen(&text) }
    })
    .await;
    assert!(scraped, "epp did not report queues {queues:?} in time; /metrics:\n{}", epp.metrics_text());
}
