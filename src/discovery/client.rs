//! The Kubernetes client: from `--kubeconfig`, else inferred as kube-rs does (`KUBECONFIG` or
//! `~/.kube/config`, then the in-cluster service account). Building it can fail (no configuration yet,
//! an unreadable file); discovery then retries with backoff instead of exiting, like any other API error.

use std::path::PathBuf;

use kube::api::ApiResource;
use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

use super::spec::{pool_version, SpecError};

/// Where the client's configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSource {
    /// `--kubeconfig PATH`.
    Kubeconfig(PathBuf),
    /// `KUBECONFIG`, `~/.kube/config`, or the in-cluster configuration.
    Infer,
}

/// Why discovery could not reach or understand the API server.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error("no Kubernetes configuration: {0}")]
    Infer(#[from] InferConfigError),
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within {0:?}")]
    Timeout(std::time::Duration),
    #[error("watch ended with an error status {code}: {message}")]
    WatchStatus { code: u16, message: String },
}

impl DiscoveryError {
    /// 410 Gone: the resourceVersion is too old (compacted); only a fresh list recovers.
    pub fn is_expired(&self) -> bool {
        match self {
            Self::Api(kube::Error::Api(status)) => status.code == 410,
            Self::WatchStatus { code, .. } => *code == 410,
            _ => false,
        }
    }
}

/// Builds a client from `source`.
pub async fn build_client(source: &ClientSource) -> Result<Client, DiscoveryError> {
    let config = match source {
        ClientSource::Kubeconfig(path) => {
            let err = |source| DiscoveryError::Kubeconfig { path: path.clone(), source };
            let kubeconfig = Kubeconfig::read_from(path).map_err(err)?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.map_err(err)?
        }
        ClientSource::Infer => Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// The InferencePool resource of `group` (`v1`, or `v1alpha2` for the older group).
pub(super) fn pool_resource(group: &str) -> Result<ApiResource, SpecError> {
    let version = pool_version(group)?;
    Ok(ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: format!("{group}/{version}"),
        kind: "InferencePool".into(),
        plural: "inferencepools".into(),
    })
}

/// One API call, bounded by `timeout`: a partitioned API server that accepts connections but never
/// answers must not stall discovery (a watch's own silence is bounded by the resync deadline).
pub(super) async fn bounded<T>(
    timeout: std::time::Duration,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, DiscoveryError> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| DiscoveryError::Timeout(timeout))?
        .map_err(Into::into)
}
