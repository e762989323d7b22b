//! Keeps exactly one scrape loop running per endpoint of the datastore.
//!
//! The supervisor reconciles against the whole endpoint list on each datastore change rather than replaying
//! `EndpointChanges`: the watch channel coalesces bursts of updates, so only the latest list is reliable.
//! Loops are keyed by the endpoint's `Arc` pointer; the map holds a clone of that `Arc`, so a pointer
//! cannot be reused by a new endpoint while its key is still in the map. An endpoint replaced with a
//! new identity (new name or labels at the same address) gets a fresh loop and the old loop is aborted.
//! Dropping the supervisor (shutdown, or its own task aborted) aborts every loop it started.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::scraper::{ScrapeConfig, ScrapeError, Scraper};
use crate::datastore::{Datastore, Endpoint};

/// Starts the supervisor task. It stops (aborting every scrape loop) when `shutdown` becomes `true` or its
/// sender is dropped. Must be called from within a tokio runtime.
pub fn spawn_scrapers(
    datastore: Arc<Datastore>,
    config: ScrapeConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, ScrapeError> {
    let scraper = Arc::new(Scraper::new(config)?);
    Ok(tokio::spawn(supervise(datastore, scraper, shutdown)))
}

async fn supervise(datastore: Arc<Datastore>, scraper: Arc<Scraper>, mut shutdown: watch::Receiver<bool>) {
    // Subscribe before the first read so that no change between the two is missed.
    let mut versions = datastore.subscribe();
    let mut loops = ScrapeLoops::new(scraper);
    loop {
        if *shutdown.borrow_and_update() {
            break;
        }
        loops.reconcile(&datastore.endpoints());
        tokio::select! {
            changed = versions.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    tracing::debug!(loops = loops.len(), "scraper supervisor stopping");
}

/// The running scrape loops, keyed by endpoint identity.
#[derive(Debug)]
pub struct ScrapeLoops {
    scraper: Arc<Scraper>,
    running: HashMap<usize, (Arc<Endpoint>, JoinHandle<()>)>,
}

impl ScrapeLoops {
    pub fn new(scraper: Arc<Scraper>) -> Self {
        Self { scraper, running: HashMap::new() }
    }

    /// Starts a loop for each endpoint without one and aborts the loops of endpoints no longer listed.
    pub fn reconcile(&mut self, endpoints: &[Arc<Endpoint>]) {
        let wanted: HashSet<usize> = endpoints.iter().map(identity).collect();
        self.running.retain(|key, (endpoint, handle)| {
            let keep = wanted.contains(key);
            if !keep {
                handle.abort();
                tracing::debug!(endpoint = %endpoint.name, "stopped scraping");
            }
            keep
        });
        for endpoint in endpoints {
            let key = identity(endpoint);
            if !self.running.contains_key(&key) {
                tracing::debug!(endpoint = %endpoint.name, url = %endpoint.metrics_url, "started scraping");
                let handle = self.scraper.spawn_endpoint(Arc::clone(endpoint));
                self.running.insert(key, (Arc::clone(endpoint), handle));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

impl Drop for ScrapeLoops {
    fn drop(&mut self) {
        for (_, handle) in self.running.values() {
            handle.abort();
        }
    }
}

fn identity(endpoint: &Arc<Endpoint>) -> usize {
    Arc::as_ptr(endpoint) as usize
}

#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;
