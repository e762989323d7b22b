//! A closed-loop load: `concurrency` clients, each sending a completion as soon as its last one ended,
//! recording when each ended, how (status, or a cut body / transport error), and which replica served it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinSet;

use crate::MODEL;

/// How one request ended.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub at: Instant,
    /// HTTP status; 0 when the request failed before or while its response arrived.
    pub status: u16,
    /// The body was cut (or the connection failed) after the status arrived.
    pub cut: bool,
    pub backend: Option<String>,
}

impl Sample {
    pub(crate) fn ok(&self) -> bool {
        self.status == 200 && !self.cut
    }
}

/// A running load; [`ClosedLoop::stop`] ends it and returns every sample in completion order.
pub(crate) struct ClosedLoop {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    tasks: JoinSet<()>,
}

impl ClosedLoop {
    /// Starts `concurrency` clients against `url` (`/v1/completions` through Envoy).
    pub(crate) fn start(url: String, concurrency: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("build the load's HTTP client");
        let mut tasks = JoinSet::new();
        for worker in 0..concurrency {
            let (stop, samples, client, url) = (stop.clone(), samples.clone(), client.clone(), url.clone());
            tasks.spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let prompt = format!("worker {worker} request {n} {}", rand::random::<u64>());
                    let sample = send(&client, &url, &prompt).await;
                    samples.lock().unwrap_or_else(PoisonError::into_inner).push(sample);
                }
            });
        }
        Self { stop, samples, tasks }
    }

    /// The samples so far.
    pub(crate) fn snapshot(&self) -> Vec<Sample> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits until `ready(samples)` holds (polling), or `deadline` passes; returns whether it held.
    pub(crate) async fn wait_for(&self, deadline: Duration, ready: impl Fn(&[Sample]) -> bool) -> bool {
        let end = Instant::now() + deadline;
        while Instant::now() < end {
            if ready(&self.snapshot()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ready(&self.snapshot())
    }

    /// Stops every client after its current request and returns all samples.
    pub(crate) async fn stop(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
        self.snapshot()
    }
}

async fn send(client: &reqwest::Client, url: &str, prompt: &str) -> Sample {
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 5});
    let request = client.post(url).header("content-type", "application/json").body(body.to_string());
    match request.send().await {
        Err(_) => Sample { at: Instant::now(), status: 0, cut: false, backend: None },
        Ok(response) => {
            let status = response.status().as_u16();
            let backend =
                response.headers().get("x-backend-id").and_then(|v| v.to_str().ok()).map(str::to_string);
            let cut = response.bytes().await.is_err();
            Sample { at: Instant::now(), status, cut, backend }
        }
    }
}

/// Samples that ended after `since`.
pub(crate) fn after(samples: &[Sample], since: Instant) -> Vec<Sample> {
    samples.iter().filter(|s| s.at >= since).cloned().collect()
}

/// How many of `samples` failed.
pub(crate) fn errors(samples: &[Sample]) -> usize {
    samples.iter().filter(|s| !s.ok()).count()
}

/// How many of `samples` `backend` served.
pub(crate) fn served_by(samples: &[Sample], backend: &str) -> usize {
    samples.iter().filter(|s| s.backend.as_deref() == Some(backend)).count()
}

/// The last `n` samples all succeeded (the fault's errors have stopped).
pub(crate) fn last_all_ok(samples: &[Sample], n: usize) -> bool {
    samples.len() >= n && samples[samples.len() - n..].iter().all(Sample::ok)
}

/// An open-loop load: requests started at a fixed rate whatever the responses do, recording like
/// [`ClosedLoop`]; at most `max_outstanding` at once (a start beyond that is not sent and counted in
/// [`OpenLoop::shed`]: the load generator, not the system under test, ran out of room).
pub(crate) struct OpenLoop {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    shed: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl OpenLoop {
    pub(crate) fn start(url: String, rate_per_second: f64, max_outstanding: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("build the load's HTTP client");
        let (stop_flag, recorded) = (stop.clone(), samples.clone());
        let shed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let shed_count = shed.clone();
        let task = tokio::spawn(async move {
            let period = Duration::from_secs_f64(1.0 / rate_per_second.max(0.001));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let outstanding = Arc::new(tokio::sync::Semaphore::new(max_outstanding));
            let mut n = 0u64;
            let mut running = JoinSet::new();
            while !stop_flag.load(Ordering::Relaxed) {
                tick.tick().await;
                while running.try_join_next().is_some() {}
                n += 1;
                let Ok(permit) = outstanding.clone().try_acquire_owned() else {
                    shed_count.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let (client, url, recorded) = (client.clone(), url.clone(), recorded.clone());
                running.spawn(async move {
                    let sample =
                        send(&client, &url, &format!("open loop {n} {}", rand::random::<u64>())).await;
                    recorded.lock().unwrap_or_else(PoisonError::into_inner).push(sample);
                    drop(permit);
                });
            }
            while running.join_next().await.is_some() {}
        });
        Self { stop, samples, shed, task }
    }

    /// Starts skipped because `max_outstanding` requests were already out.
    pub(crate) fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self) -> Vec<Sample> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops starting requests, waits for the outstanding ones, and returns all samples.
    pub(crate) async fn stop(self) -> Vec<Sample> {
        let Self { stop, samples, task, .. } = self;
        stop.store(true, Ordering::Relaxed);
        let _ = task.await;
        let all = samples.lock().unwrap_or_else(PoisonError::into_inner).clone();
        all
    }
}
