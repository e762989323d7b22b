//! The virtual-time routing lab: epp's real scheduling pipeline and plugins routing a simulated fleet of
//! vLLM-like engines, in simulated time, to compare routing configs on one workload and fleet.
//!
//! Why: a routing claim is only worth what its measurement is, and measuring on GPUs is slow, costly and
//! noisy. Here nothing sleeps and nothing talks over a socket: an hour of traffic on a 16-replica fleet
//! runs in seconds, every run of a comparison sees exactly the same requests, and the same seed gives
//! the same report bit for bit. What is simulated is only the model servers ([`epp_sim::Engine`]);
//! request parsing, token estimation, the plugin pipeline, its state (prefix index, in-flight counts)
//! and its view of stale telemetry are epp's own code.
//!
//! The pieces: [`Fleet`] and [`Workload`] (the two input files), [`Plan`] (the request stream, planned
//! once per comparison), [`RouterChoice`] (a config or a baseline), [`simulation::run`] (one run's
//! event loop), [`training`] (a predicted-latency config's own predictor, retrained at virtual-time
//! ticks), [`LabReport`] (the numbers) and [`format_table`] (the side-by-side view). A config column may run
//! as several active epp replicas (`--epp-replicas`), and a `precise-prefix-cache-producer` is fed the
//! engines' KV events in process.
//!
//! Admission is the server's: with `featureGates: [flowControl]` requests wait in flow control (the
//! simulation's `flow` module); without it a sheddable request is refused while the config's saturation
//! detector reads the pool as full. Not modelled: model rewrites, network latency, and client behaviour
//! (sessions are open-loop; see [`workload`]). A retrain publishes its model at the tick itself, where
//! the server's training thread takes a moment: the lab's predictor is never behind.

pub mod cli;
pub mod fleet;
mod flow_gate;
pub mod generate;
pub mod oracle;
mod replicas;
pub mod report;
pub mod router;
pub mod samples;
pub mod scenario;
pub mod simulation;
mod table;
pub mod training;
pub mod values;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::de::DeserializeOwned;

pub use fleet::Fleet;
pub use generate::Plan;
pub use report::{LabReport, Percentiles, RunReport};
pub use router::{RouterChoice, RouterSpec};
pub use table::format_table;
pub use training::PredictorReport;
pub use workload::Workload;

/// Why the lab could not run.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A problem in a file; wraps the error with the file's path.
    // The inner error is part of the message rather than a `source`, so it is not printed twice.
    #[error("{}: {error}", path.display())]
    InFile { path: PathBuf, error: Box<LabError> },
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// A value is missing, unknown, of the wrong type or out of range; `field` is its path.
    #[error("{}{message}", field_prefix(field))]
    Invalid { field: String, message: String },
    /// A routing config could not be built.
    #[error("routing config {name:?}: {message}")]
    Router { name: String, message: String },
    #[error("internal lab error: {0}")]
    Internal(String),
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() || field == "." {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl LabError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        LabError::Invalid { field: field.into(), message: message.into() }
    }

    fn in_file(self, path: &Path) -> Self {
        LabError::InFile { path: path.to_path_buf(), error: Box::new(self) }
    }
}

/// Decodes YAML strictly; an error carries the path of the offending value.
fn parse_yaml<T: DeserializeOwned>(text: &str) -> Result<T, LabError> {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let message = e.into_inner().to_string();
        // serde_yaml_ng may prefix its message with the value's path, which `field` already gives.
        let message = match message.split_once(": ") {
            Some((prefix, rest)) if !prefix.contains(' ') && field.starts_with(prefix) => rest.to_string(),
            _ => message,
        };
        LabError::invalid(field, message)
    })
}

fn read_file(path: &Path) -> Result<String, LabError> {
    std::fs::read_to_string(path).map_err(LabError::Read)
}

/// Runs every choice on the same fleet and workload, up to `jobs` at a time (runs are independent, so
/// running them in parallel changes nothing in the results). Reports come back in `choices` order.
pub fn compare(
    fleet: &Fleet,
    workload: &Workload,
    choices: &[RouterChoice],
    jobs: usize,
) -> Result<LabReport, LabError> {
    workload.validate()?;
    let plan = Plan::new(workload);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<RunReport, LabError>>>> =
        Mutex::new(choices.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, choices.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(choice) = choices.get(i) else { break };
                let result = simulation::run(fleet, workload, &plan, choice);
                results.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(result);
            });
        }
    });
    let runs = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(LabError::Internal("a run did not report".into()))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LabReport {
        replicas: fleet.replicas.len(),
        requests: plan.requests.len(),
        duration_s: workload.duration.0,
        seed: workload.seed,
        scrape_interval_s: fleet.scrape_interval,
        runs,
    })
}
