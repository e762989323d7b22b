//! The resolve step: the flags and the loaded configuration become the settings each component is built
//! from. Every translation from config types to runtime types and every cross-check between a flag and a
//! config field happens here, once, and each error names the flag or field; `app` then only assembles
//! components from [`Settings`] (linkerd2-proxy's `Config` then `build`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_rustls::rustls::ServerConfig;

use crate::access::AccessConfig;
use crate::cli::Cli;
use crate::config::{self, LoadedConfig};
use crate::datastore::{Endpoint, SubsetMatch};
use crate::director::DirectorOptions;
use crate::discovery::{DiscoveryConfig, LeaderConfig, MetricsTarget};
use crate::extproc::StreamLimits;
use crate::health::HealthSettings;
use crate::request::{Policies, PolicyStore, TokenEstimator, WeightedRewrite};
use crate::telemetry;
use crate::tls::{ServerTls, TlsPolicy};

/// Everything `app` builds from, resolved and cross-checked.
pub(super) struct Settings {
    pub endpoints: EndpointSources,
    /// `--ha-enable-leader-election`: the Lease campaign.
    pub leader: Option<LeaderConfig>,
    pub director: DirectorOptions,
    /// Endpoint health: the config's `endpointHealth`, its staleness threshold defaulting to
    /// `--metrics-staleness-threshold`.
    pub health: HealthSettings,
    /// How model servers are scraped (`on_update` is set by `app`, which owns the flow controller).
    pub scrape: telemetry::ScrapeConfig,
    pub pool_gauges: PoolGauges,
    pub serving: Serving,
}

/// Where endpoints come from: exactly one of static endpoints, an endpoints file or Kubernetes discovery
/// (static endpoints may be empty: a pool of none, filled by nothing).
pub(super) struct EndpointSources {
    /// `--endpoints` and the config's `endpoints:`, with their `/metrics` URLs.
    pub statics: Vec<Endpoint>,
    pub file: Option<EndpointsFile>,
    pub discovery: Option<DiscoveryConfig>,
}

/// `--endpoints-file`: read at start-up, and with `--endpoints-file-watch` every `watch_period`.
pub(super) struct EndpointsFile {
    pub path: PathBuf,
    pub watch_period: Option<Duration>,
    pub target: MetricsTarget,
}

/// The pool gauges' refresh (`--refresh-prometheus-metrics-interval`) and what counts as stale telemetry
/// (`--metrics-staleness-threshold`).
pub(super) struct PoolGauges {
    pub every: Duration,
    pub staleness: Duration,
}

/// The three listening sockets and how the ext_proc server behaves on them.
pub(super) struct Serving {
    pub grpc: SocketAddr,
    pub health: SocketAddr,
    pub metrics: SocketAddr,
    /// `--secure-serving`: the ext_proc port's TLS (from `--cert-path`, or self-signed; with
    /// `--grpc-client-ca-file`, mutual).
    pub tls: Option<Arc<ServerConfig>>,
    /// `--metrics-cert-dir`: the metrics port's TLS (with `--metrics-client-ca-file`, mutual).
    pub metrics_tls: Option<Arc<ServerConfig>>,
    pub limits: StreamLimits,
    /// `--enable-route-probe`: `POST /debug/route` on the metrics port.
    pub route_probe: bool,
    /// Who may read the metrics port's endpoints (`--metrics-endpoint-auth`, `--metrics-token-file`).
    pub access: AccessConfig,
    pub grace: Duration,
    pub delay: Duration,
}

/// How often a watched endpoints file is read again.
const FILE_POLL_PERIOD: Duration = Duration::from_secs(1);

/// The pool gauges are never refreshed faster than this, whatever the flag says.
const MIN_POOL_GAUGE_PERIOD: Duration = Duration::from_millis(10);

impl Settings {
    /// Resolves the flags against the loaded configuration.
    pub(super) fn resolve(cli: &Cli, loaded: &LoadedConfig) -> anyhow::Result<Self> {
        let endpoints = EndpointSources::resolve(cli, loaded)?;
        let leader = cli.leader_config();
        let kubernetes = endpoints.discovery.is_some() || leader.is_some();
        Ok(Self {
            endpoints,
            leader,
            director: director_options(cli, loaded)?,
            health: health_settings(cli, loaded),
            scrape: telemetry::ScrapeConfig {
                refresh_interval: cli.refresh_metrics_interval,
                insecure_skip_verify: loaded.data_source.insecure_skip_verify,
                name_filter: loaded.data_source.name_filter,
                engines: Arc::new(engine_set(loaded)?),
                on_update: None,
                ..Default::default()
            },
            pool_gauges: PoolGauges {
                every: cli.refresh_prometheus_metrics_interval.max(MIN_POOL_GAUGE_PERIOD),
                staleness: cli.metrics_staleness_threshold,
            },
            serving: Serving::resolve(cli, kubernetes)?,
        })
    }
}

impl EndpointSources {
    fn resolve(cli: &Cli, loaded: &LoadedConfig) -> anyhow::Result<Self> {
        let target = MetricsTarget {
            scheme: metrics_scheme(loaded),
            path: loaded.data_source.path.clone(),
            port: cli.model_server_metrics_port.filter(|port| *port != 0),
        };
        let statics = static_endpoints(cli, loaded, &target);
        if cli.endpoints_file.is_some() && !statics.is_empty() {
            anyhow::bail!("--endpoints-file and the config's `endpoints:` are mutually exclusive");
        }
        let file = cli.endpoints_file.as_ref().map(|path| EndpointsFile {
            path: path.clone(),
            watch_period: cli.endpoints_file_watch.then_some(FILE_POLL_PERIOD),
            target: target.clone(),
        });
        let discovery = cli.discovery_config(!statics.is_empty() || file.is_some(), target)?;
        Ok(Self { statics, file, discovery })
    }
}

impl Serving {
    /// `kubernetes`: epp talks to an API server (discovery or leader election), so the metrics port's
    /// endpoints are reviewed by it unless `--metrics-endpoint-auth=false`.
    fn resolve(cli: &Cli, kubernetes: bool) -> anyhow::Result<Self> {
        let bind = |port: u16| SocketAddr::new(cli.bind_address, port);
        let policy = TlsPolicy::parse(cli.tls_min_version.as_deref(), &cli.tls_cipher_suites)?;
        if cli.grpc_client_ca_file.is_some() && !cli.secure_serving {
            anyhow::bail!("--grpc-client-ca-file needs --secure-serving (mutual TLS is TLS)");
        }
        let tls = match cli.secure_serving {
            true => Some(
                ServerTls {
                    cert_dir: cli.cert_path.clone(),
                    client_ca: cli.grpc_client_ca_file.clone(),
                    policy: policy.clone(),
                    alpn: vec![b"h2".to_vec()],
                }
                .server_config()
                .context("--secure-serving")?,
            ),
            false => None,
        };
        let access = AccessConfig {
            kubernetes: cli.metrics_endpoint_auth.unwrap_or(kubernetes).then(|| cli.client_source()),
            token_file: cli.metrics_token_file.clone(),
            ..AccessConfig::default()
        };
        let metrics_tls = metrics_tls(cli, &access, policy)?;
        Ok(Self {
            grpc: bind(cli.grpc_port),
            health: bind(cli.grpc_health_port),
            metrics: bind(cli.metrics_port),
            tls,
            limits: StreamLimits {
                max_request_body: cli.max_request_body_bytes,
                max_buffered_request_bytes: cli.max_buffered_request_bytes,
            },
            route_probe: cli.enable_route_probe,
            access,
            metrics_tls,
            grace: cli.shutdown_grace_period,
            delay: cli.shutdown_delay,
        })
    }
}

/// One staleness setting: `--metrics-staleness-threshold` (upstream's flag, which already governs the pool
/// gauges) is also endpoint health's threshold, unless the config's `endpointHealth.stalenessThreshold`
/// says otherwise.
fn health_settings(cli: &Cli, loaded: &LoadedConfig) -> HealthSettings {
    let mut health = loaded.endpoint_health.clone();
    if !loaded.endpoint_health_staleness_set {
        health.staleness = cli.metrics_staleness_threshold;
    }
    health
}

fn director_options(cli: &Cli, loaded: &LoadedConfig) -> anyhow::Result<DirectorOptions> {
    let estimator = &loaded.token_estimator;
    Ok(DirectorOptions {
        policies: Arc::new(PolicyStore::new(config_policies(loaded))),
        token_estimator: TokenEstimator::new(estimator.characters_per_token, estimator.output_ratio)
            .context("tokenEstimator")?,
        subset_match: if cli.disable_endpoint_subset_filter {
            SubsetMatch::Disabled
        } else if cli.subset_match_ip_only {
            SubsetMatch::IpOnly
        } else {
            SubsetMatch::Exact
        },
        emit_scores: cli.emit_endpoint_scores,
        parse_bodies: loaded.parser == config::ParserKind::OpenAi,
        ignore_model_rewrite_header: cli.ignore_model_rewrite_header,
    })
}

/// The engine mappings from the `core-metrics-extractor` parameters (built-in defaults when absent).
fn engine_set(loaded: &LoadedConfig) -> anyhow::Result<telemetry::EngineSet> {
    let Some(raw) = &loaded.extractor_params else { return Ok(telemetry::EngineSet::builtin()) };
    let params: telemetry::ExtractorParams =
        crate::scheduling::parse_params("core-metrics-extractor", "core-metrics-extractor", Some(raw))?;
    telemetry::EngineSet::from_params(&params).context("core-metrics-extractor parameters")
}

/// The data source's scrape scheme.
fn metrics_scheme(loaded: &LoadedConfig) -> &'static str {
    match loaded.data_source.scheme {
        config::MetricsScheme::Http => "http",
        config::MetricsScheme::Https => "https",
    }
}

/// `--endpoints`, then the config's `endpoints:` not already named, each scraped at `target`'s URL
/// (`--model-server-metrics-port` is for discovered pods: a static endpoint's port is its own).
fn static_endpoints(cli: &Cli, loaded: &LoadedConfig, target: &MetricsTarget) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    for addr in &cli.endpoints {
        out.push(Endpoint::new(crate::datastore::format_host_port(*addr), *addr));
    }
    for e in &loaded.endpoints {
        if out.iter().any(|o| o.addr == e.address) {
            continue;
        }
        let name =
            if e.name.is_empty() { crate::datastore::format_host_port(e.address) } else { e.name.clone() };
        out.push(Endpoint::new(name, e.address).with_labels(e.labels.clone()));
    }
    out.into_iter()
        .map(|e| {
            let url = target.url(e.addr);
            e.with_metrics_url(url)
        })
        .collect()
}

/// The config's objectives and model rewrites: the base layer of the policy store, which the cluster's
/// InferenceObjective and InferenceModelRewrite objects are laid over.
fn config_policies(loaded: &LoadedConfig) -> Policies {
    let rewrites = loaded.model_rewrites.iter().map(|r| {
        let targets = r.targets.iter().map(|t| (t.model.clone(), t.weight)).collect();
        (r.match_model.clone(), WeightedRewrite { name: r.name.clone(), targets })
    });
    Policies { objectives: loaded.objectives.clone(), rewrites: rewrites.collect(), fallback: None }
}

/// `--metrics-cert-dir` (and `--metrics-client-ca-file`): the metrics port's TLS. As llm-d refuses it,
/// TLS without anything checking who connects is refused: it would encrypt an open door.
fn metrics_tls(
    cli: &Cli,
    access: &AccessConfig,
    policy: TlsPolicy,
) -> anyhow::Result<Option<Arc<ServerConfig>>> {
    let Some(dir) = &cli.metrics_cert_dir else {
        if cli.metrics_client_ca_file.is_some() {
            anyhow::bail!("--metrics-client-ca-file needs --metrics-cert-dir (mutual TLS is TLS)");
        }
        return Ok(None);
    };
    let checked =
        access.kubernetes.is_some() || access.token_file.is_some() || cli.metrics_client_ca_file.is_some();
    if !checked {
        anyhow::bail!(
            "--metrics-cert-dir enables metrics TLS without authentication; set --metrics-client-ca-file, \
             --metrics-endpoint-auth or --metrics-token-file"
        );
    }
    let tls = ServerTls {
        cert_dir: Some(dir.clone()),
        client_ca: cli.metrics_client_ca_file.clone(),
        policy,
        alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(Some(tls.server_config().context("--metrics-cert-dir")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::Datastore;
    use crate::scheduling::{FactoryContext, PluginMetrics, Registry};
    use clap::Parser;

    fn resolve(args: &[&str], config: &str) -> anyhow::Result<Settings> {
        let ctx = FactoryContext::new(Arc::new(Datastore::new("pool")), PluginMetrics::detached());
        let loaded = config::load(config, &Registry::with_builtins(), &ctx)?;
        let cli = Cli::parse_from([&["epp"], args].concat());
        Settings::resolve(&cli, &loaded)
    }

    const HEADER: &str = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n";

    #[test]
    fn one_staleness_setting_unless_the_config_overrides_it() {
        let flag = ["--secure-serving=false", "--metrics-staleness-threshold", "5s"];
        let settings = resolve(&flag, HEADER).expect("resolves");
        assert_eq!(settings.health.staleness, Duration::from_secs(5));
        assert_eq!(settings.pool_gauges.staleness, Duration::from_secs(5));
        let explicit = format!("{HEADER}endpointHealth:\n  stalenessThreshold: 1s\n");
        let settings = resolve(&flag, &explicit).expect("resolves");
        assert_eq!(settings.health.staleness, Duration::from_secs(1));
        let settings = resolve(&["--secure-serving=false"], HEADER).expect("resolves");
        assert_eq!(settings.health.staleness, crate::health::DEFAULT_STALENESS);
    }

    #[test]
    fn cross_checks_name_the_flag_and_the_field() {
        let statics = format!("{HEADER}endpoints:\n- address: 10.0.0.1:8000\n");
        let args = ["--secure-serving=false", "--endpoints-file", "/nonexistent.yaml"];
        let error = resolve(&args, &statics).err().expect("an endpoints file and static endpoints conflict");
        assert!(error.to_string().contains("--endpoints-file"), "{error}");
        let args =
            ["--secure-serving=false", "--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000"];
        let error = resolve(&args, &statics).err().expect("standalone discovery with static endpoints");
        assert!(error.to_string().contains("static"), "{error}");
    }

    #[test]
    fn static_endpoints_are_scraped_at_the_data_source_url() {
        let config = format!("{HEADER}endpoints:\n- address: 10.0.0.1:8000\n");
        let settings =
            resolve(&["--secure-serving=false", "--endpoints", "10.0.0.2:8000"], &config).expect("resolves");
        let urls: Vec<_> = settings.endpoints.statics.iter().map(|e| e.metrics_url.clone()).collect();
        assert_eq!(urls, ["http://10.0.0.2:8000/metrics", "http://10.0.0.1:8000/metrics"]);
        assert!(settings.endpoints.discovery.is_none() && settings.endpoints.file.is_none());
    }
}
