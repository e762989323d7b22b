//! The command line, llm-d's `pd-sidecar` flags where they overlap (`--port`, `--model-server-port` and
//! its deprecated alias `--vllm-port`, `--secure-proxy`, `--cert-path`, `--prefill-max-retries`,
//! `--prefill-retry-backoff`), and the allow-list that llm-d lacks by default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::pool::PoolWatch;
use crate::prefiller::AllowList;
use crate::proxy::Settings;

#[derive(Debug, Parser)]
#[command(name = "epp-pd-sidecar", version, about = "The decode pod's P/D sidecar")]
pub struct Cli {
    /// Port to listen on (the InferencePool's target port).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Port of the decode engine on this pod.
    #[arg(long, default_value_t = 8200, alias = "vllm-port")]
    pub model_server_port: u16,
    /// Host of the decode engine.
    #[arg(long, default_value = "127.0.0.1")]
    pub model_server_host: String,
    /// Serve TLS (llm-d's default): `tls.crt` and `tls.key` from --cert-path, else self-signed.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub secure_proxy: bool,
    #[arg(long)]
    pub cert_path: Option<PathBuf>,
    /// The prefill pods that may be named, as ip:port, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub allowed_prefillers: Vec<SocketAddr>,
    /// An endpoints file in llm-d's file-discovery format (the one epp's --endpoints-file reads): its
    /// addresses may be named as prefillers; re-read every --endpoints-file-poll.
    #[arg(long)]
    pub endpoints_file: Option<PathBuf>,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub endpoints_file_poll: Duration,
    /// The InferencePool whose endpoints may be named as prefillers, `namespace/name` or `name` (in
    /// `default`), watched with epp's discovery (llm-d's flag and `INFERENCE_POOL`).
    #[arg(long, env = "INFERENCE_POOL", conflicts_with_all = ["allowed_prefillers", "endpoints_file"])]
    pub inference_pool: Option<String>,
    /// The InferencePool's API group.
    #[arg(long, default_value = epp::discovery::GROUP_V1)]
    pub pool_group: String,
    /// Kubeconfig for --inference-pool (default: in-cluster, or KUBECONFIG).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// llm-d's switch for the allow-list, off by default there; on by default here. `false` is
    /// --allow-any-prefiller.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_ssrf_protection: bool,
    /// Let any host be named as a prefiller (llm-d's default; only where nothing but epp can reach the
    /// sidecar).
    #[arg(long)]
    pub allow_any_prefiller: bool,
    /// Time to connect to either engine.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
    /// Time for the whole prefill leg.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub prefill_timeout: Duration,
    /// Time to the decode engine's response headers, and between two chunks of its body.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    pub decode_timeout: Duration,
    /// Retries of a prefill leg answered 502/503/504 or not reached.
    #[arg(long, default_value_t = 0)]
    pub prefill_max_retries: u32,
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    pub prefill_retry_backoff: Duration,
    /// Log lines as human text, or one JSON object per line (as epp's `--log-format`).
    #[arg(long, env = "EPP_LOG_FORMAT", value_enum, default_value_t = epp::cli::LogFormat::Text)]
    pub log_format: epp::cli::LogFormat,
    /// Largest request body accepted (413 above).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
}

/// Why the command line cannot run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "no prefill allow-list: give --inference-pool, --endpoints-file or --allowed-prefillers (the pool's \
         members), or --allow-any-prefiller to let any host be named"
    )]
    NoAllowList,
    #[error("{0}")]
    Pool(String),
    #[error("{0}")]
    EndpointsFile(String),
}

impl Cli {
    /// The allow-list the flags describe, and the pool watch feeding it (`--inference-pool`, which needs a
    /// Tokio runtime); the endpoints file must load now.
    pub fn allow_list(&self) -> Result<(AllowList, Option<PoolWatch>), CliError> {
        if self.allow_any_prefiller || !self.enable_ssrf_protection {
            return Ok((AllowList::Anyone, None));
        }
        if let Some(pool) = &self.inference_pool {
            let watch =
                PoolWatch::start(pool, &self.pool_group, self.kubeconfig.clone()).map_err(CliError::Pool)?;
            return Ok((AllowList::Pool(watch.datastore.clone()), Some(watch)));
        }
        let mut members = self.allowed_prefillers.clone();
        if let Some(path) = &self.endpoints_file {
            let (addrs, invalid) =
                epp::discovery::endpoint_addresses(path).map_err(CliError::EndpointsFile)?;
            if !invalid.is_empty() {
                return Err(CliError::EndpointsFile(format!("{}: {}", path.display(), invalid.join("; "))));
            }
            members.extend(addrs);
        } else if members.is_empty() {
            return Err(CliError::NoAllowList);
        }
        Ok((AllowList::members(members), None))
    }

    pub fn settings(&self, allow: AllowList) -> Settings {
        Settings {
            engine_url: format!("http://{}:{}", self.model_server_host, self.model_server_port),
            allow,
            connect_timeout: self.connect_timeout,
            prefill_timeout: self.prefill_timeout,
            decode_timeout: self.decode_timeout,
            prefill_max_retries: self.prefill_max_retries,
            prefill_retry_backoff: self.prefill_retry_backoff,
            max_body_bytes: self.max_body_bytes,
        }
    }
}

/// Re-reads the endpoints file every `period`, replacing the allow-list's members (the static ones
/// stay); a file that cannot be read keeps the last list.
pub async fn watch_endpoints_file(path: PathBuf, period: Duration, fixed: Vec<SocketAddr>, allow: AllowList) {
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        match epp::discovery::endpoint_addresses(&path) {
            Ok((addrs, invalid)) => {
                for entry in invalid {
                    tracing::warn!(path = %path.display(), %entry, "endpoints file: entry skipped");
                }
                allow.replace(fixed.iter().copied().chain(addrs));
            }
            Err(e) => {
                tracing::warn!(error = %e, "endpoints file: reload failed; keeping the last allow-list");
            }
        }
    }
}
