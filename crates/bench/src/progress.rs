//! A one-line progress display on stderr (`\r` redraws): elapsed time, requests done, rate, errors and
//! requests in flight.
//!
//! Why hand-rolled: one line redrawn four times a second is all a load generator needs, and the counters
//! are atomics the request tasks bump anyway. It is off when stderr is not a terminal (CI logs, pipes) so
//! logs never fill with carriage returns.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters shared by the request tasks and the display.
#[derive(Debug, Default)]
pub struct Counters {
    pub started: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    pub fn in_flight(&self) -> u64 {
        self.started.load(Ordering::Relaxed).saturating_sub(self.done.load(Ordering::Relaxed))
    }
}

/// The text of one progress line.
pub fn progress_line(
    elapsed: Duration,
    limit: Option<Duration>,
    total: Option<u64>,
    counters: &Counters,
) -> String {
    let done = counters.done.load(Ordering::Relaxed);
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let time = match limit {
        Some(limit) => format!("{secs:5.1}s/{:.0}s", limit.as_secs_f64()),
        None => format!("{secs:5.1}s"),
    };
    let count = match total {
        Some(total) => format!("{done}/{total}"),
        None => done.to_string(),
    };
    format!(
        "[{time}] {count} done  {rate:.1} req/s  {} errors  {} in flight",
        counters.errors.load(Ordering::Relaxed),
        counters.in_flight()
    )
}

/// Writes `text` to stderr at once (the lock is not held across an await).
fn redraw(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// A running display; [`Progress::finish`] clears the line.
pub struct Progress {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts redrawing when `enabled`; otherwise does nothing.
    pub fn start(
        enabled: bool,
        started: Instant,
        limit: Option<Duration>,
        total: Option<u64>,
        counters: Arc<Counters>,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = enabled.then(|| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut width = 0;
                while !stop.load(Ordering::Relaxed) {
                    let line = progress_line(started.elapsed(), limit, total, &counters);
                    width = width.max(line.len());
                    redraw(&format!("\r{line:<width$}"));
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                redraw(&format!("\r{:width$}\r", ""));
            })
        });
        Self { stop, task }
    }

    pub async fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_counts_rate_and_errors() {
        let counters = Counters::default();
        counters.started.store(12, Ordering::Relaxed);
        counters.done.store(10, Ordering::Relaxed);
        counters.errors.store(1, Ordering::Relaxed);
        let line = progress_line(Duration::from_secs(2), Some(Duration::from_secs(30)), Some(50), &counters);
        assert_eq!(line, "[  2.0s/30s] 10/50 done  5.0 req/s  1 errors  2 in flight");
        let open = progress_line(Duration::ZERO, None, None, &counters);
        assert!(open.starts_with("[  0.0s] 10 done  0.0 req/s"));
    }
}
