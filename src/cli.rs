//! Command-line flags. Names and defaults follow the Go EPP where it has the flag, so a Deployment's
//! args keep working when the image changes.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::discovery::{
    ClientSource, DiscoveryConfig, LeaderConfig, MetricsTarget, PoolSource, PoolSpec, SpecError,
};
use crate::metrics::DEFAULT_MAX_SERIES_PER_FAMILY;

pub mod knobs;
mod predictor;
pub use predictor::{ObjectiveFlag, PredictorFlags, DEFAULT_QUANTILE_ALPHA};

/// Discovery flags that cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryFlagError {
    #[error(
        "--endpoint-selector (standalone discovery) and static endpoints (--endpoints or the config's \
         `endpoints:`) are mutually exclusive"
    )]
    StandaloneWithStatic,
    #[error("--endpoint-selector / --endpoint-target-ports: {0}")]
    Standalone(#[source] SpecError),
    #[error("--pool-group: {0}")]
    PoolGroup(#[source] SpecError),
}

/// The pool's name in metrics when nothing names it.
pub const DEFAULT_POOL_NAME: &str = "default-pool";

/// Endpoint Picker for LLM inference gateways (Envoy ext_proc).
#[derive(Debug, Clone, Parser)]
#[command(name = "epp", version, about)]
pub struct Cli {
    /// ext_proc gRPC port.
    #[arg(long, default_value_t = 9002)]
    pub grpc_port: u16,
    /// gRPC health port.
    #[arg(long, default_value_t = 9003)]
    pub grpc_health_port: u16,
    /// Prometheus metrics port.
    #[arg(long, default_value_t = 9090)]
    pub metrics_port: u16,
    /// Address to bind every port on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// EndpointPickerConfig file.
    #[arg(long, conflicts_with = "config_text")]
    pub config_file: Option<PathBuf>,
    /// EndpointPickerConfig as text.
    #[arg(long)]
    pub config_text: Option<String>,
    /// How often each model server's /metrics is scraped.
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    pub refresh_metrics_interval: Duration,
    /// How often the pool gauges (averages, ready endpoints) are recomputed.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub refresh_prometheus_metrics_interval: Duration,
    /// Telemetry older than this is stale: it does not count towards the pool gauges, and endpoint health
    /// takes the endpoint out of scheduling (unless the config's `endpointHealth.stalenessThreshold` says
    /// otherwise).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub metrics_staleness_threshold: Duration,
    /// Name of the InferencePool this EPP serves. Without static endpoints (--endpoints or the config's
    /// `endpoints:`) epp watches this pool and its pods in Kubernetes; with them it only names the pool in
    /// metrics. Default label: "default-pool".
    #[arg(long)]
    pub pool_name: Option<String>,
    /// Namespace of the pool (defaults to $NAMESPACE, else "default").
    #[arg(long, env = "NAMESPACE", default_value = "default")]
    pub pool_namespace: String,
    /// API group of the InferencePool: `inference.networking.k8s.io` (v1) or the older
    /// `inference.networking.x-k8s.io` (v1alpha2).
    #[arg(long, default_value = crate::discovery::GROUP_V1)]
    pub pool_group: String,
    /// Standalone mode (no InferencePool object): model-server pods are those with these labels,
    /// `k=v,k2=v2`. Needs --endpoint-target-ports; excludes --pool-name and static endpoints.
    #[arg(long, conflicts_with = "pool_name", requires = "endpoint_target_ports")]
    pub endpoint_selector: Option<String>,
    /// Standalone mode: the model servers' ports, `8000,8001` (1 to 8); each is one endpoint per pod.
    #[arg(long, requires = "endpoint_selector")]
    pub endpoint_target_ports: Option<String>,
    /// kubeconfig file for discovery (otherwise $KUBECONFIG, ~/.kube/config, or the in-cluster
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Scrape model-server /metrics on this port instead of the target port (pools with exactly one
    /// target port; 0 = unset).
    #[arg(long)]
    pub model_server_metrics_port: Option<u16>,
    /// Period of discovery's full relist of the pool and its pods (a lost watch event is repaired by the
    /// next one).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub discovery_resync_period: Duration,
    /// Active-passive HA: the replicas campaign for a coordination.k8s.io Lease
    /// (`epp-<namespace>-<pool>.gateway-api-inference-extension.sigs.k8s.io`, as upstream names it) and
    /// only its holder reports ready (readiness and the ext_proc health service); liveness stays serving.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub ha_enable_leader_election: bool,
    /// Leader election: how long a Lease nobody renews stays held (controller-runtime's default; epp's
    /// flag, upstream has none).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub ha_lease_duration: Duration,
    /// Leader election: how long the leader keeps leading while its renewals fail (< lease duration).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub ha_renew_deadline: Duration,
    /// Leader election: how often to try to acquire or renew the Lease (< renew deadline).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub ha_retry_period: Duration,
    /// This pod's name ($POD_NAME): standalone mode derives the pool name from it, as upstream does.
    #[arg(long, env = "POD_NAME", hide = true)]
    pub pod_name: Option<String>,
    /// File discovery (llm-d-router's `file-discovery` format): the pool's endpoints from this YAML or
    /// JSON file (`endpoints: [{name, namespace, address (IPv4), port ("8000"), labels}]`). Excludes static
    /// endpoints and Kubernetes discovery; any error in it stops start-up.
    #[arg(long, conflicts_with_all = ["endpoint_selector", "endpoints"])]
    pub endpoints_file: Option<PathBuf>,
    /// File discovery: reload the file when it changes (read again every second; survives atomic renames
    /// and ConfigMap symlink swaps), skipping invalid entries.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub endpoints_file_watch: bool,
    /// Static endpoints, `ip:port,ip:port` (also possible in the config file).
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<SocketAddr>,
    /// Serve ext_proc over TLS (a self-signed certificate unless --cert-path is given).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub secure_serving: bool,
    /// Directory holding tls.crt and tls.key (read again when they change: rotated certificates are
    /// served to new connections without a restart).
    #[arg(long)]
    pub cert_path: Option<PathBuf>,
    /// Mutual TLS on the ext_proc port: only clients (the gateway) with a certificate this PEM CA bundle
    /// signed may open streams. Needs --secure-serving.
    #[arg(long)]
    pub grpc_client_ca_file: Option<PathBuf>,
    /// Serve the metrics port over TLS with tls.crt and tls.key from this directory (llm-d's flag; read
    /// again when they change). Needs metrics auth or --metrics-client-ca-file, as llm-d requires.
    #[arg(long)]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Mutual TLS on the metrics port: only clients with a certificate this PEM CA bundle signed may connect
    /// (llm-d's flag). Needs --metrics-cert-dir.
    #[arg(long)]
    pub metrics_client_ca_file: Option<PathBuf>,
    /// Lowest TLS version every server accepts: VersionTLS12 (default) or VersionTLS13 (Go's names).
    #[arg(long)]
    pub tls_min_version: Option<String>,
    /// TLS 1.2 cipher suites every server accepts, comma-separated, by Go's names (e.g.
    /// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); default: all of rustls's (ECDHE with AES-GCM or ChaCha20).
    /// TLS 1.3's suites are not configurable, as in Go.
    #[arg(long, value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Ignore the gateway's subset hint.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub disable_endpoint_subset_filter: bool,
    /// Match subset-hint entries on IP only, ignoring ports (the Go EPP's behaviour).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub subset_match_ip_only: bool,
    /// Add per-endpoint scores to the routing metadata (`x-gateway-destination-endpoint-scores`).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub emit_endpoint_scores: bool,
    /// Serve `POST /debug/route` on the metrics port: where a request would be routed and why, without
    /// routing it. Off by default: it shows the pool's endpoints and scores to whoever reaches the port.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enable_route_probe: bool,
    /// Ignore the client's `x-gateway-model-name-rewrite` header (for gateways that do not strip it from
    /// untrusted clients: each distinct value would otherwise mint metric series).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub ignore_model_rewrite_header: bool,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_request_body_bytes: usize,
    /// Most request-body bytes all streams may buffer at once; past it a request gets 503 with the reason.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_buffered_request_bytes: usize,
    /// Most series a metric family with request-derived labels (model names, fairness ids) may hold, each
    /// histogram bucket counting as one; new label sets past it go to the family's `__overflow__` series,
    /// counted in `epp_metrics_dropped_label_sets_total`. Must be > 0.
    #[arg(long, default_value_t = DEFAULT_MAX_SERIES_PER_FAMILY)]
    pub max_series_per_family: NonZeroUsize,
    /// How long shutdown waits for in-flight streams.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_grace_period: Duration,
    /// At SIGTERM, how long readiness and the ext_proc health service report NOT_SERVING while new streams
    /// are still accepted, before the listener closes and the drain starts: time for the gateway's health
    /// checks to move traffic away (the shipped Envoy configs check every 1 s). 0 closes at once.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "epp=debug".
    #[arg(long, env = "EPP_LOG", default_value = "info")]
    pub log_level: String,
    /// Log lines as human text, or one JSON object per line (for log collectors): `timestamp`, `level`,
    /// `target`, `fields` (the message and the event's fields) and the spans it happened in (every line
    /// about a request is in its `request` span, with its `request_id`).
    #[arg(long, env = "EPP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Emit OpenTelemetry traces (llm-d's flag; off by default here, where llm-d's is on and prints spans
    /// to stdout). Configured by the standard OTEL_* variables: OTEL_EXPORTER_OTLP_ENDPOINT,
    /// OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf), OTEL_TRACES_SAMPLER[_ARG] (default
    /// parentbased_traceidratio at 0.1), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES (docs/operations.md).
    #[arg(long, env = "EPP_TRACING", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub tracing: bool,
    /// Authenticate and authorise requests to /metrics and the route probe as the Go EPP does: a bearer
    /// token, checked with TokenReview and SubjectAccessReview (`get` on the path). Unset: on when epp talks
    /// to Kubernetes (discovery or leader election), off in static mode (docs/operations.md).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub metrics_endpoint_auth: Option<bool>,
    /// Bearer tokens (one per line; `#` comments) allowed on /metrics and the route probe without asking the
    /// API server: for a scraper outside the cluster, or static mode with no API server. Turns the check on.
    #[arg(long)]
    pub metrics_token_file: Option<PathBuf>,

    #[command(flatten)]
    pub predictor: PredictorFlags,

    // Deprecated Go EPP flags that fail validation there too: kept so the error names them.
    #[arg(long, hide = true)]
    pub total_queued_requests_metric: Option<String>,
    #[arg(long, hide = true)]
    pub total_running_requests_metric: Option<String>,
    #[arg(long, hide = true)]
    pub kv_cache_usage_percentage_metric: Option<String>,
    #[arg(long, hide = true)]
    pub lora_info_metric: Option<String>,
    #[arg(long, hide = true)]
    pub cache_info_metric: Option<String>,
}

impl Cli {
    /// Rejects the deprecated metric-name flags with the Go EPP's explanation.
    pub fn validate(&self) -> Result<(), String> {
        let deprecated = [
            ("total-queued-requests-metric", &self.total_queued_requests_metric),
            ("total-running-requests-metric", &self.total_running_requests_metric),
            ("kv-cache-usage-percentage-metric", &self.kv_cache_usage_percentage_metric),
            ("lora-info-metric", &self.lora_info_metric),
            ("cache-info-metric", &self.cache_info_metric),
        ];
        for (name, value) in deprecated {
            if value.is_some() {
                return Err(format!(
                    "flag \"--{name}\" is deprecated and cannot be used; configure metrics via engineConfigs in \
                     EndpointPickerConfig instead"
                ));
            }
        }
        if self.refresh_metrics_interval.is_zero() {
            return Err("--refresh-metrics-interval must be > 0".into());
        }
        if self.max_buffered_request_bytes == 0 {
            return Err("--max-buffered-request-bytes must be > 0".into());
        }
        if self.discovery_resync_period.is_zero() {
            return Err("--discovery-resync-period must be > 0".into());
        }
        if self.ha_retry_period.is_zero()
            || self.ha_retry_period >= self.ha_renew_deadline
            || self.ha_renew_deadline >= self.ha_lease_duration
        {
            return Err(
                "leader election needs 0 < --ha-retry-period < --ha-renew-deadline < --ha-lease-duration"
                    .into(),
            );
        }
        Ok(())
    }

    /// Leader election, when `--ha-enable-leader-election` asks for it: the pool's Lease, in the pool's
    /// namespace, held under `<pod name>_<uuid>` (controller-runtime's `<hostname>_<uuid>`).
    pub fn leader_config(&self) -> Option<LeaderConfig> {
        if !self.ha_enable_leader_election {
            return None;
        }
        let host =
            self.pod_name.clone().or_else(|| std::env::var("HOSTNAME").ok()).unwrap_or_else(|| "epp".into());
        let identity = format!("{host}_{}", uuid::Uuid::new_v4());
        let lease = crate::discovery::lease_name(&self.pool_namespace, &self.pool_label());
        let mut config =
            LeaderConfig::new(lease, self.pool_namespace.clone(), identity, self.client_source());
        config.lease_duration = self.ha_lease_duration;
        config.renew_deadline = self.ha_renew_deadline;
        config.retry_period = self.ha_retry_period;
        Some(config)
    }

    pub(crate) fn client_source(&self) -> ClientSource {
        match &self.kubeconfig {
            Some(path) => ClientSource::Kubeconfig(path.clone()),
            None => ClientSource::Infer,
        }
    }

    /// The Kubernetes discovery the flags ask for, `None` for static endpoints. The mode rule:
    /// `--endpoint-selector` is standalone discovery (static endpoints are then an error); `--pool-name`
    /// without static endpoints (`has_static_endpoints`: --endpoints or the config's `endpoints:`) is
    /// InferencePool discovery; anything else is static, and an explicit `--pool-name` then only names the
    /// pool in metrics, as it did before discovery existed.
    pub fn discovery_config(
        &self,
        has_static_endpoints: bool,
        metrics_target: MetricsTarget,
    ) -> Result<Option<DiscoveryConfig>, DiscoveryFlagError> {
        let source = match (&self.endpoint_selector, &self.endpoint_target_ports, &self.pool_name) {
            (Some(_), _, _) if has_static_endpoints => return Err(DiscoveryFlagError::StandaloneWithStatic),
            (Some(selector), Some(ports), _) => PoolSource::Standalone(
                PoolSpec::standalone(selector, ports).map_err(DiscoveryFlagError::Standalone)?,
            ),
            (None, _, Some(name)) if !has_static_endpoints => {
                PoolSource::inference_pool(&self.pool_group, name).map_err(DiscoveryFlagError::PoolGroup)?
            }
            _ => return Ok(None),
        };
        let mut config = DiscoveryConfig::new(source, self.pool_namespace.clone());
        config.client = self.client_source();
        config.metrics_target = metrics_target;
        config.resync_period = self.discovery_resync_period;
        Ok(Some(config))
    }

    /// The pool's name (the `name` label of the pool metrics): `--pool-name`; in standalone mode the
    /// name derived from $POD_NAME (`kubernetes-sigs/gateway-api-inference-extension:cmd/epp/runner/runner.go`);
    /// else "default-pool".
    pub fn pool_label(&self) -> String {
        if let Some(name) = &self.pool_name {
            return name.clone();
        }
        let derived = self.endpoint_selector.as_ref().and(self.pod_name.as_deref());
        derived
            .and_then(crate::discovery::standalone_pool_name)
            .unwrap_or_else(|| DEFAULT_POOL_NAME.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_defaults() {
        let c = Cli::parse_from(["epp"]);
        assert_eq!((c.grpc_port, c.grpc_health_port, c.metrics_port), (9002, 9003, 9090));
        assert_eq!(c.refresh_metrics_interval, Duration::from_millis(50));
        assert!(c.secure_serving);
    }

    #[test]
    fn endpoints_and_bools() {
        let c =
            Cli::parse_from(["epp", "--endpoints", "127.0.0.1:8000,[::1]:8001", "--secure-serving=false"]);
        assert_eq!(c.endpoints.len(), 2);
        assert!(!c.secure_serving);
    }

    #[test]
    fn max_series_per_family_defaults_and_rejects_zero() {
        assert_eq!(Cli::parse_from(["epp"]).max_series_per_family, DEFAULT_MAX_SERIES_PER_FAMILY);
        let c = Cli::parse_from(["epp", "--max-series-per-family", "50"]);
        assert_eq!(c.max_series_per_family.get(), 50);
        let zero = Cli::try_parse_from(["epp", "--max-series-per-family=0"]).unwrap_err().to_string();
        assert!(zero.contains("--max-series-per-family"), "{zero}");
    }

    #[test]
    fn discovery_flags() {
        let c = Cli::parse_from(["epp"]);
        assert_eq!((c.pool_name.as_deref(), c.pool_label().as_str()), (None, DEFAULT_POOL_NAME));
        assert_eq!(c.pool_group, crate::discovery::GROUP_V1);
        let c =
            Cli::parse_from(["epp", "--pool-name", "llama", "--pool-group", "inference.networking.x-k8s.io"]);
        assert_eq!(c.pool_label(), "llama");
        let c = Cli::parse_from([
            "epp",
            "--endpoint-selector",
            "app=vllm",
            "--endpoint-target-ports",
            "8000",
            "--pod-name",
            "vllm-epp-5d8f7c9b4-abcde",
        ]);
        assert_eq!(c.pool_label(), "vllm-epp");
        let both = Cli::try_parse_from([
            "epp",
            "--pool-name=a",
            "--endpoint-selector=a=b",
            "--endpoint-target-ports=1",
        ]);
        assert!(both.unwrap_err().to_string().contains("--endpoint-selector"));
        let alone = Cli::try_parse_from(["epp", "--endpoint-selector=a=b"]).unwrap_err().to_string();
        assert!(alone.contains("--endpoint-target-ports"), "{alone}");
    }

    #[test]
    fn discovery_mode_rule() {
        let mode = |args: &[&str], has_static: bool| {
            let cli = Cli::parse_from([&["epp"], args].concat());
            cli.discovery_config(has_static, MetricsTarget::default()).map(|c| c.map(|c| c.source))
        };
        assert!(mode(&[], false).unwrap().is_none(), "no pool flags: static");
        assert!(
            mode(&["--pool-name=p"], true).unwrap().is_none(),
            "static endpoints: --pool-name is a label"
        );
        let pool = mode(&["--pool-name=p", "--pool-group=inference.networking.x-k8s.io"], false).unwrap();
        assert!(matches!(pool, Some(PoolSource::InferencePool { name, resource, .. })
            if name == "p" && resource.api_version == "inference.networking.x-k8s.io/v1alpha2"));
        let standalone = ["--endpoint-selector=app=vllm", "--endpoint-target-ports=8000,8001"];
        assert!(
            matches!(mode(&standalone, false).unwrap(), Some(PoolSource::Standalone(s)) if s.target_ports.len() == 2)
        );
        assert!(matches!(mode(&standalone, true), Err(DiscoveryFlagError::StandaloneWithStatic)));
        assert!(matches!(
            mode(&["--pool-name=p", "--pool-group=example.com"], false),
            Err(DiscoveryFlagError::PoolGroup(_))
        ));
        let bad = ["--endpoint-selector=app", "--endpoint-target-ports=8000"];
        assert!(matches!(mode(&bad, false), Err(DiscoveryFlagError::Standalone(_))));
    }

    #[test]
    fn leader_election_flags() {
        assert!(Cli::parse_from(["epp"]).leader_config().is_none());
        let c =
            Cli::parse_from(["epp", "--ha-enable-leader-election", "--pool-name=p", "--pool-namespace=llm"]);
        let config = c.leader_config().unwrap();
        assert_eq!(config.lease_name, "epp-llm-p.gateway-api-inference-extension.sigs.k8s.io");
        assert_eq!(
            (config.lease_duration, config.retry_period),
            (Duration::from_secs(15), Duration::from_secs(2))
        );
        assert_ne!(config.identity, c.leader_config().unwrap().identity, "one identity per process start");
        let bad = Cli::parse_from(["epp", "--ha-renew-deadline=20s"]);
        assert!(bad.validate().unwrap_err().contains("--ha-renew-deadline"));
    }

    #[test]
    fn deprecated_flags_are_errors() {
        let c = Cli::parse_from(["epp", "--kv-cache-usage-percentage-metric", "x"]);
        assert!(c.validate().unwrap_err().contains("kv-cache-usage-percentage-metric"));
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// Installs the process's log subscriber: events `filter` lets through, written in this format
    /// (epp's and epp-pd-sidecar's `main`).
    pub fn install(self, filter: tracing_subscriber::EnvFilter) {
        match self {
            LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
            LogFormat::Json => tracing_subscriber::fmt().json().with_env_filter(filter).init(),
        }
    }
}
