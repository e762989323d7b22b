//! The metrics port over TLS (`--metrics-cert-dir`) in static mode, where a static token file
//! (`--metrics-token-file`) is what checks who scrapes; and the start-up refusals that keep TLS from
//! being an encrypted open door.

use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;

fn args(extra: &[String]) -> Vec<String> {
    epp_testkit::loopback_epp_args()
        .into_iter()
        .chain(["--endpoints=127.0.0.1:9".to_string()])
        .chain(extra.iter().cloned())
        .collect()
}

/// A self-signed `localhost` pair in `dir` (tls.crt, tls.key).
fn write_pair(dir: &std::path::Path) {
    let (cert, key) = epp::tls::pem_pair(None).expect("self-signed pair");
    std::fs::write(dir.join("tls.crt"), cert).expect("write");
    std::fs::write(dir.join("tls.key"), key).expect("write");
}

#[tokio::test]
async fn the_metrics_port_serves_tls_to_scrapers_with_a_token() {
    let dir = tempfile::tempdir().expect("dir");
    write_pair(dir.path());
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "scrape-me\n").expect("write");
    let extra = [
        format!("--metrics-cert-dir={}", dir.path().display()),
        format!("--metrics-token-file={}", tokens.display()),
    ];
    let epp = Server::start(Cli::parse_from(args(&extra))).await.expect("epp starts");
    let port = epp.metrics_addr.port();
    let client = reqwest::Client::builder().danger_accept_invalid_certs(true).build().expect("client");
    let url = format!("https://localhost:{port}/metrics");
    let scraped = client.get(&url).bearer_auth("scrape-me").send().await.expect("an https answer");
    assert_eq!(scraped.status(), 200);
    assert!(scraped.text().await.unwrap_or_default().contains("inference_pool_ready_pods"));
    assert_eq!(client.get(&url).send().await.expect("an https answer").status(), 401, "no token");
    let plain = reqwest::Client::new().get(format!("http://127.0.0.1:{port}/metrics")).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status() != 200), "no plaintext metrics on a TLS port");
    epp.shutdown().await;
}

#[tokio::test]
async fn tls_flags_that_cannot_be_honoured_stop_epp_naming_them() {
    let dir = tempfile::tempdir().expect("dir");
    write_pair(dir.path());
    let cert_dir = format!("--metrics-cert-dir={}", dir.path().display());
    let cases: [(Vec<String>, &str); 5] = [
        (vec![cert_dir.clone()], "--metrics-cert-dir enables metrics TLS without authentication"),
        (
            vec!["--metrics-client-ca-file=/ca.pem".into()],
            "--metrics-client-ca-file needs --metrics-cert-dir",
        ),
        (vec!["--grpc-client-ca-file=/ca.pem".into()], "--grpc-client-ca-file needs --secure-serving"),
        (vec!["--tls-min-version=VersionTLS11".into()], "--tls-min-version \"VersionTLS11\""),
        (
            vec!["--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA".into()],
            "--tls-cipher-suites \"TLS_RSA_WITH_RC4_128_SHA\"",
        ),
    ];
    for (extra, expected) in cases {
        let err = Server::start(Cli::parse_from(args(&extra))).await.expect_err("refused");
        assert!(format!("{err:#}").contains(expected), "{extra:?}: {err:#}");
    }
}
