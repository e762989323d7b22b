//! Drives a run: checks the target answers (preflight), then releases requests in the workload's shape
//! (open loop at a constant or Poisson rate, or closed loop at a fixed concurrency) until the duration
//! or request count is reached, and collects one [`Sample`] per request.
//!
//! Why open and closed loop both: a closed loop (N users) measures the best throughput the system
//! sustains but hides queueing (a slow system just gets fewer requests); an open loop keeps sending at
//! the offered rate, so overload shows as latency and errors. In a closed loop each worker runs its
//! conversations turn after turn (a turn starts when the previous answer is in); in an open loop request
//! `i` is turn `i % turns` of conversation `i / turns`, released on schedule.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::HeaderName;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use super::body::RequestFactory;
use super::client::{send, ErrorKind, Sample, Target};
use super::progress::{Counters, Progress};
use super::workload::{LoadShape, Workload};
use super::BenchError;

/// How a run behaves beyond its workload.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Redraw a progress line on stderr.
    pub progress: bool,
    /// Send one small request first and fail fast if the target cannot be reached.
    pub preflight: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self { progress: false, preflight: true }
    }
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// One per request, ordered by request index.
    pub samples: Vec<Sample>,
    /// From the first request's release to the last response's end.
    pub elapsed: Duration,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: f64,
}

/// An HTTP client for benchmarking: no proxies, no Nagle, a connection pool as large as the load.
pub fn build_client() -> Result<reqwest::Client, BenchError> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| BenchError::Client(e.to_string()))
}

/// The send target of a validated workload.
pub fn target_of(workload: &Workload, client: reqwest::Client) -> Result<Target, BenchError> {
    let backend_header = HeaderName::from_bytes(workload.backend_header.as_bytes())
        .map_err(|e| BenchError::Client(format!("backend header: {e}")))?;
    Ok(Target { client, url: workload.target_url()?, backend_header, timeout: workload.timeout })
}

/// Sends the workload's smallest request. Unreachable (no response, or none in time) is an error; any
/// HTTP answer means the target is there, and its status is returned for the caller to report.
pub async fn preflight(target: &Target, factory: &RequestFactory) -> Result<u16, BenchError> {
    let quick = Target { timeout: target.timeout.min(Duration::from_secs(10)), ..target.clone() };
    let sample = send(&quick, 0, factory.preflight(), Instant::now()).await;
    match sample.error {
        None => Ok(200),
        Some(ErrorKind::Http(status)) => Ok(status),
        Some(ErrorKind::Connection | ErrorKind::Timeout) => Err(BenchError::Unreachable {
            url: target.url.to_string(),
            detail: sample.error_detail.unwrap_or_default(),
        }),
        // It answered, just not well: the run will count and show it.
        Some(_) => Ok(200),
    }
}

struct Shared {
    target: Target,
    factory: RequestFactory,
    start: Instant,
    counters: Arc<Counters>,
    samples: Mutex<Vec<Sample>>,
}

impl Shared {
    async fn one(&self, index: u64, conversation: u64, turn: u32) {
        self.counters.started.fetch_add(1, Ordering::Relaxed);
        let request = self.factory.build(conversation, turn, index);
        let sample = send(&self.target, index, request, self.start).await;
        if !sample.ok() {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.samples.lock().unwrap_or_else(PoisonError::into_inner).push(sample);
        self.counters.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Validates `workload`, builds a client, and runs it.
pub async fn run(workload: &Workload, options: &RunOptions) -> Result<RunResult, BenchError> {
    run_with_client(workload, build_client()?, options).await
}

/// Runs `workload` with an existing client (so several runs can share one connection pool).
pub async fn run_with_client(
    workload: &Workload,
    client: reqwest::Client,
    options: &RunOptions,
) -> Result<RunResult, BenchError> {
    workload.validate()?;
    let target = target_of(workload, client)?;
    let factory = RequestFactory::new(workload);
    if options.preflight {
        preflight(&target, &factory).await?;
    }
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let start = Instant::now();
    let counters = Arc::new(Counters::default());
    let limit = workload.duration_limit();
    let shared =
        Arc::new(Shared { target, factory, start, counters: counters.clone(), samples: Mutex::default() });
    let progress = Progress::start(options.progress, start, limit, workload.requests, counters);
    let deadline = limit.map(|d| start + d);
    match workload.load_shape() {
        LoadShape::Concurrency(workers) => closed_loop(&shared, workload, workers, deadline).await,
        LoadShape::Rate(rate) => open_loop(&shared, workload, rate, false, deadline).await,
        LoadShape::Poisson(rate) => open_loop(&shared, workload, rate, true, deadline).await,
    }
    let elapsed = start.elapsed();
    progress.finish().await;
    let mut samples = std::mem::take(&mut *shared.samples.lock().unwrap_or_else(PoisonError::into_inner));
    samples.sort_by_key(|s| s.index);
    Ok(RunResult { samples, elapsed, started_unix_s })
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

async fn closed_loop(shared: &Arc<Shared>, workload: &Workload, workers: u32, deadline: Option<Instant>) {
    let next_index = Arc::new(AtomicU64::new(0));
    let next_conversation = Arc::new(AtomicU64::new(0));
    let (turns, limit) = (workload.turns, workload.requests);
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (shared, next_index, next_conversation) =
            (shared.clone(), next_index.clone(), next_conversation.clone());
        tasks.spawn(async move {
            let mut conversation = next_conversation.fetch_add(1, Ordering::Relaxed);
            let mut turn = 0;
            while !past(deadline) {
                let index = next_index.fetch_add(1, Ordering::Relaxed);
                if limit.is_some_and(|n| index >= n) {
                    break;
                }
                if turn == turns {
                    conversation = next_conversation.fetch_add(1, Ordering::Relaxed);
                    turn = 0;
                }
                shared.one(index, conversation, turn).await;
                turn += 1;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Gap before the next release: `1/rate`, or exponential with that mean for a Poisson process.
fn next_gap(rate: f64, poisson: bool, rng: &mut SmallRng) -> Duration {
    let mean = 1.0 / rate;
    let secs = if poisson { -(1.0 - rng.random::<f64>()).ln() * mean } else { mean };
    Duration::from_secs_f64(secs.min(3600.0))
}

async fn open_loop(
    shared: &Arc<Shared>,
    workload: &Workload,
    rate: f64,
    poisson: bool,
    deadline: Option<Instant>,
) {
    let mut rng = SmallRng::seed_from_u64(workload.seed ^ 0x0A11_0CA7_E5EE_D000);
    let turns = u64::from(workload.turns);
    let mut tasks = JoinSet::new();
    // Releases are scheduled from the start, not from the previous release, so a late wake-up is made
    // up for instead of lowering the offered rate.
    let mut offset = Duration::ZERO;
    let mut index = 0u64;
    while workload.requests.is_none_or(|n| index < n) {
        let at = shared.start + offset;
        if deadline.is_some_and(|d| at >= d) {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let shared = shared.clone();
        let turn = u32::try_from(index % turns).unwrap_or(0);
        tasks.spawn(async move { shared.one(index, index / turns, turn).await });
        while tasks.try_join_next().is_some() {}
        index += 1;
        offset += next_gap(rate, poisson, &mut rng);
    }
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_gaps_and_poisson_mean() {
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(next_gap(4.0, false, &mut rng), Duration::from_millis(250));
        let n = 20_000;
        let total: f64 = (0..n).map(|_| next_gap(10.0, true, &mut rng).as_secs_f64()).sum();
        let mean = total / f64::from(n);
        assert!((mean - 0.1).abs() < 0.005, "mean gap {mean}");
    }
}
