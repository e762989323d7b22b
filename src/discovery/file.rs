//! File discovery: the pool's endpoints from a YAML or JSON file, for epp without Kubernetes (bare metal,
//! Slurm, Ray, local development), with llm-d-router's `file-discovery` format and rules
//! (`llm-d/llm-d-router:pkg/epp/framework/plugins/datalayer/discovery/file/README.md`):
//!
//! ```yaml
//! endpoints:
//!   - name: vllm-0          # required, unique in the file
//!     namespace: default    # optional, "default"
//!     address: "10.0.0.1"   # required, a literal IPv4 address
//!     port: "8000"          # required, 1-65535, as a string
//!     labels: {k: v}        # optional
//! ```
//!
//! The first load must succeed entirely: an unreadable, malformed or oversized (> 1 MiB) file, or any
//! invalid entry, stops start-up with every error listed. With `--endpoints-file-watch` the file is
//! reloaded on change: invalid entries are then logged and skipped, endpoints no longer listed leave the
//! pool, and a file that cannot be read or parsed keeps the last endpoints. Changes are found by reading
//! the path again every poll period and comparing the bytes, not by watching an inode: an atomic rename
//! over the file and a ConfigMap's `..data` symlink swap (both replace the inode a watch would hold) are
//! seen like an in-place write.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::metrics::DiscoveryMetrics;
use super::pods::DesiredEndpoint;
use super::publish::{MetricsTarget, Publisher, RemovedHook};
use crate::datastore::Datastore;

/// Largest endpoints file accepted (upstream's cap).
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why the endpoints file was refused as a whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileDiscoveryError {
    #[error("endpoints file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("endpoints file {path}: {size} bytes, more than the 1 MiB allowed")]
    TooLarge { path: PathBuf, size: u64 },
    #[error("endpoints file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("endpoints file {path}: {}", .errors.join("; "))]
    InvalidEntries { path: PathBuf, errors: Vec<String> },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointsFile {
    #[serde(default)]
    endpoints: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    address: String,
    #[serde(default)]
    port: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// The file's endpoints: the valid ones, and one message per invalid entry.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Parsed {
    pub endpoints: Vec<DesiredEndpoint>,
    pub invalid: Vec<String>,
}

/// Parses the file's text (YAML, of which JSON is a subset).
pub(crate) fn parse(text: &str) -> Result<Parsed, String> {
    let file: EndpointsFile = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let mut parsed = Parsed::default();
    let mut names = BTreeSet::new();
    for (i, entry) in file.endpoints.into_iter().enumerate() {
        match validate(&entry, &mut names) {
            Ok(endpoint) => parsed.endpoints.push(endpoint),
            Err(e) => parsed.invalid.push(format!("endpoints[{i}] ({:?}): {e}", entry.name)),
        }
    }
    Ok(parsed)
}

fn validate(entry: &Entry, names: &mut BTreeSet<String>) -> Result<DesiredEndpoint, String> {
    if entry.name.is_empty() {
        return Err("name is required".into());
    }
    let ip: Ipv4Addr = entry
        .address
        .parse()
        .map_err(|_| format!("address {:?} is not a literal IPv4 address", entry.address))?;
    let port = entry.port.parse::<u16>().ok().filter(|p| *p != 0);
    let port = port.ok_or_else(|| format!("port {:?} is not an integer in 1-65535", entry.port))?;
    if !names.insert(entry.name.clone()) {
        return Err("name is not unique in the file".into());
    }
    let addr = SocketAddr::from((ip, port));
    Ok(DesiredEndpoint {
        name: entry.name.clone(),
        namespace: entry.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into()),
        addr,
        metrics_addr: addr,
        labels: entry.labels.clone(),
        rank: 0,
    })
}

/// Reads `path` (following symlinks) within the size cap.
fn read(path: &Path) -> Result<Vec<u8>, FileDiscoveryError> {
    let err = |source| FileDiscoveryError::Read { path: path.to_path_buf(), source };
    let size = std::fs::metadata(path).map_err(err)?.len();
    if size > MAX_FILE_BYTES {
        return Err(FileDiscoveryError::TooLarge { path: path.to_path_buf(), size });
    }
    std::fs::read(path).map_err(err)
}

fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Parsed, FileDiscoveryError> {
    let parse_err = |message| FileDiscoveryError::Parse { path: path.to_path_buf(), message };
    let text = std::str::from_utf8(bytes).map_err(|e| parse_err(e.to_string()))?;
    parse(text).map_err(parse_err)
}

/// The first load: every error stops start-up.
pub(crate) fn load(path: &Path) -> Result<(Vec<DesiredEndpoint>, Vec<u8>), FileDiscoveryError> {
    let bytes = read(path)?;
    let parsed = parse_bytes(path, &bytes)?;
    if !parsed.invalid.is_empty() {
        return Err(FileDiscoveryError::InvalidEntries { path: path.to_path_buf(), errors: parsed.invalid });
    }
    Ok((parsed.endpoints, bytes))
}

/// The addresses an endpoints file lists, for readers other than epp's discovery (the P/D sidecar's
/// allow-list of prefillers): the valid entries, and one message per invalid entry. `Err` (naming the
/// file) when it cannot be read or parsed at all.
pub fn endpoint_addresses(path: &Path) -> Result<(Vec<SocketAddr>, Vec<String>), String> {
    let parsed = read(path).and_then(|bytes| parse_bytes(path, &bytes)).map_err(|e| e.to_string())?;
    Ok((parsed.endpoints.iter().map(|e| e.addr).collect(), parsed.invalid))
}

/// Where file discovery publishes: the datastore, the pipeline's removal hook, how `/metrics` URLs are
/// formed, and the discovery metrics.
pub(crate) struct Sink {
    pub datastore: Arc<Datastore>,
    pub on_removed: RemovedHook,
    pub target: MetricsTarget,
    pub metrics: Arc<DiscoveryMetrics>,
}

/// Loads `path` into the datastore (errors stop start-up), then, if `watch_period` is set, reloads it
/// on change until `stop` turns true.
pub(crate) fn start(
    path: PathBuf,
    sink: Sink,
    watch_period: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<JoinHandle<()>>, FileDiscoveryError> {
    let mut publisher = Publisher::new(sink.datastore, sink.on_removed, sink.target, sink.metrics);
    let (endpoints, mut last) = load(&path)?;
    tracing::info!(path = %path.display(), endpoints = endpoints.len(), "file discovery: loaded");
    publisher.publish(endpoints);
    let Some(period) = watch_period else { return Ok(None) };
    Ok(Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            let reloaded = read(&path).and_then(|bytes| {
                let parsed = if bytes == last { None } else { Some(parse_bytes(&path, &bytes)?) };
                Ok((parsed, bytes))
            });
            match reloaded {
                Ok((None, _)) => {}
                Ok((Some(parsed), bytes)) => {
                    for invalid in &parsed.invalid {
                        tracing::warn!(path = %path.display(), entry = %invalid, "file discovery: entry skipped");
                    }
                    tracing::info!(path = %path.display(), endpoints = parsed.endpoints.len(), "file discovery: reloaded");
                    publisher.publish(parsed.endpoints);
                    last = bytes;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "file discovery: reload failed; keeping the last endpoints");
                }
            }
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_validate_as_upstream() {
        let text = "endpoints:\n\
            - {name: a, address: 10.0.0.1, port: \"8000\", labels: {role: decode}}\n\
            - {name: b, namespace: ns, address: \"10.0.0.2\", port: \"8001\"}\n\
            - {name: c, address: vllm.local, port: \"8000\"}\n\
            - {name: d, address: \"::1\", port: \"8000\"}\n\
            - {name: e, address: 10.0.0.3, port: \"0\"}\n\
            - {name: a, address: 10.0.0.4, port: \"8000\"}\n\
            - {address: 10.0.0.5, port: \"8000\"}\n";
        let parsed = parse(text).unwrap();
        let names: Vec<_> =
            parsed.endpoints.iter().map(|e| (e.name.as_str(), e.namespace.as_str())).collect();
        assert_eq!(names, [("a", "default"), ("b", "ns")]);
        assert_eq!(parsed.endpoints[0].labels["role"], "decode");
        assert_eq!(parsed.invalid.len(), 5, "{:?}", parsed.invalid);
        let json = r#"{"endpoints": [{"name": "a", "address": "10.0.0.1", "port": "8000"}]}"#;
        assert_eq!(parse(json).unwrap().endpoints[0].addr, "10.0.0.1:8000".parse().unwrap());
        assert!(parse("endpoints: [{name: a, adress: 10.0.0.1}]").is_err(), "unknown field");
    }

    #[test]
    fn the_first_load_refuses_any_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("endpoints.yaml");
        std::fs::write(&path, "endpoints: [{name: a, address: 10.0.0.1, port: \"x\"}]").unwrap();
        assert!(matches!(load(&path), Err(FileDiscoveryError::InvalidEntries { .. })));
        std::fs::write(&path, vec![b' '; (MAX_FILE_BYTES + 1) as usize]).unwrap();
        assert!(matches!(load(&path), Err(FileDiscoveryError::TooLarge { .. })));
        assert!(matches!(load(&dir.path().join("none")), Err(FileDiscoveryError::Read { .. })));
    }
}
