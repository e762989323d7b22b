//! `epp-pd-sidecar`: see the library docs and docs/pd-disaggregation.md.

use std::process::ExitCode;

use clap::Parser;
use epp::tls::{ServerTls, TlsIncoming};
use epp_pd_sidecar::cli::{watch_endpoints_file, Cli};
use epp_pd_sidecar::proxy::Sidecar;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    cli.log_format.install(filter);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("epp-pd-sidecar: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let (allow, pool) = cli.allow_list()?;
    if let Some(pool) = &pool {
        // Until the pool was read once, no prefiller is allowed: wait for it rather than refuse P/D.
        if !pool.synced_within(std::time::Duration::from_secs(30)).await {
            tracing::warn!("the InferencePool is not read yet; disaggregated requests get 502 until it is");
        }
    }
    if let Some(path) = cli.endpoints_file.clone() {
        let (period, fixed, allow) = (cli.endpoints_file_poll, cli.allowed_prefillers.clone(), allow.clone());
        tokio::spawn(watch_endpoints_file(path, period, fixed, allow));
    }
    let sidecar = Sidecar::new(cli.settings(allow))?;
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", cli.port)).await?;
    tracing::info!(port = cli.port, engine_port = cli.model_server_port, tls = cli.secure_proxy, "listening");
    let app = sidecar.router();
    // Kubernetes stops a pod with SIGTERM: finish the requests in flight, take no new ones.
    let shutdown = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    if cli.secure_proxy {
        // tls.crt/tls.key from --cert-path (reloaded when they rotate), or self-signed, as llm-d's sidecar.
        let tls = ServerTls {
            cert_dir: cli.cert_path.clone(),
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            ..ServerTls::default()
        };
        let config = tls.server_config().map_err(|e| format!("--cert-path: {e}"))?;
        axum::serve(TlsIncoming::new(listener, config)?, app).with_graceful_shutdown(shutdown).await?;
    } else {
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await?;
    }
    Ok(())
}
