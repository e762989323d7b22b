//! The `epp` binary: parse flags, start the server, stop on SIGINT/SIGTERM.

use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_new(&cli.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    cli.log_format.install(filter);
    let server = match Server::start(cli).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("epp: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    std::process::ExitCode::SUCCESS
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
