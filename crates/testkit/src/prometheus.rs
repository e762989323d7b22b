//! A real Prometheus server for autoscaling tests: started on a free port with a throw-away config and
//! TSDB directory, scraping the given targets every second, queried through its HTTP API.
//!
//! Why a real one: the KEDA signals are PromQL over epp's metrics *as Prometheus stores them* (target
//! labels such as `namespace` and `service` added at scrape time, scraped labels of the same name renamed
//! to `exported_*`, `rate()` over counters, recording rules). Checking epp's /metrics text alone would not
//! show that the shipped queries select anything. The binary is Debian's `prometheus` (`make prometheus`);
//! without it the tests fail (`EPP_SKIP_MISSING_TOOLS=1` skips them, printing SKIP, outside CI).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{free_port, http_get_blocking, missing_tool, temp_dir, ChildGuard};

/// How long a PromQL expectation may take to hold: a few scrape and rule intervals, generously.
pub const PROMQL_DEADLINE: Duration = Duration::from_secs(60);

/// The Prometheus binary: `$PROMETHEUS_BIN`, else `prometheus` on `PATH`, else `/usr/bin/prometheus`.
pub fn find_prometheus() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PROMETHEUS_BIN") {
        return Some(PathBuf::from(path)).filter(|path| path.is_file());
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join("prometheus")).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path.into_iter().chain([PathBuf::from("/usr/bin/prometheus")]).find(|path| path.is_file())
}

/// The Prometheus binary. A missing Prometheus fails the test, or with the developer's explicit opt-out
/// ([`missing_tool`]) prints a SKIP line and returns `None`.
pub fn prometheus_or_skip(test_name: &str) -> Option<PathBuf> {
    let prometheus = find_prometheus();
    if prometheus.is_none() {
        missing_tool(test_name, "prometheus not installed (run `make prometheus` or set PROMETHEUS_BIN)");
    }
    prometheus
}

/// One scrape target: `127.0.0.1:<port>` under `job`, with extra target labels (e.g. `namespace`,
/// `service`, as Kubernetes service discovery would add them).
#[derive(Debug, Clone)]
pub struct ScrapeTarget {
    pub job: String,
    pub port: u16,
    pub labels: Vec<(String, String)>,
}

/// A running Prometheus.
pub struct Prometheus {
    pub child: ChildGuard,
    pub port: u16,
    client: reqwest::Client,
}

/// The Prometheus config: 1s scrape and rule intervals, one scrape job per distinct `job` (targets of a
/// job listed together, in order), `rule_file` if any.
pub fn prometheus_config(targets: &[ScrapeTarget], rule_file: Option<&str>) -> String {
    let mut config = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
    if let Some(path) = rule_file {
        config.push_str(&format!("rule_files:\n- {path}\n"));
    }
    config.push_str("scrape_configs:\n");
    let mut jobs: Vec<&str> = targets.iter().map(|t| t.job.as_str()).collect();
    jobs.dedup();
    for job in jobs {
        config.push_str(&format!(
            "- job_name: {job}\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  static_configs:\n"
        ));
        for target in targets.iter().filter(|t| t.job == job) {
            config.push_str(&format!("  - targets: ['127.0.0.1:{}']\n", target.port));
            if !target.labels.is_empty() {
                config.push_str("    labels:\n");
                for (name, value) in &target.labels {
                    config.push_str(&format!("      {name}: '{value}'\n"));
                }
            }
        }
    }
    config
}

impl Prometheus {
    /// Starts `binary` scraping `targets` (and evaluating `rules`, a Prometheus rule-file document, if
    /// given) on a free port with a fresh TSDB, and waits until it says it is ready.
    pub fn start(binary: PathBuf, targets: &[ScrapeTarget], rules: Option<&str>) -> Prometheus {
        let dir = temp_dir("prometheus-");
        let rule_path = rules.map(|text| {
            let path = dir.path().join("rules.yml");
            std::fs::write(&path, text).expect("write prometheus rules");
            path.display().to_string()
        });
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, prometheus_config(targets, rule_path.as_deref()))
            .expect("write prometheus config");
        let port = free_port();
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn");
        let mut child = ChildGuard::spawn("prometheus", command, dir);
        child.wait_ready("/-/ready answers 200", || {
            http_get_blocking(port, "/-/ready").is_some_and(|(status, _)| status == 200)
        });
        let client = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
        Prometheus { child, port, client }
    }

    /// The rendered config (for failure messages).
    pub fn config_text(&self) -> String {
        std::fs::read_to_string(self.child.dir().join("prometheus.yml")).unwrap_or_default()
    }

    /// Evaluates `promql` now (`/api/v1/query`). Returns each sample's labels and value; an error string
    /// when Prometheus rejects the query.
    pub async fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, String> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let response = self
            .client
            .post(&url)
            .form(&[("query", promql)])
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        let bytes = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
        let body: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("{url}: body is not JSON: {e}"))?;
        if body["status"] != "success" {
            return Err(format!("query {promql:?} failed: {body}"));
        }
        let data = &body["data"];
        let samples = match data["resultType"].as_str() {
            Some("vector") => data["result"].as_array().cloned().unwrap_or_default(),
            Some("scalar") => vec![serde_json::json!({"metric": {}, "value": data["result"]})],
            other => return Err(format!("query {promql:?}: unexpected result type {other:?}: {body}")),
        };
        Ok(samples
            .iter()
            .filter_map(|s| {
                let value = s["value"][1].as_str()?.parse::<f64>().ok()?;
                Some((s["metric"].clone(), value))
            })
            .collect())
    }

    /// The single value `promql` evaluates to; `None` for an empty result. Panics on a rejected query
    /// or on more than one sample (every KEDA query must aggregate to one series).
    pub async fn value(&self, promql: &str) -> Option<f64> {
        let samples = self.query(promql).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(samples.len() <= 1, "{promql} must yield at most one series, got {samples:?}");
        samples.first().map(|(_, value)| *value)
    }

    /// Polls `promql` until it returns at least one finite sample (within [`PROMQL_DEADLINE`]); whether it
    /// did. Panics on a query Prometheus rejects.
    pub async fn wait_for_data(&self, promql: &str) -> bool {
        let started = std::time::Instant::now();
        loop {
            let samples = self.query(promql).await.unwrap_or_else(|e| panic!("{e}"));
            if samples.iter().any(|(_, v)| v.is_finite()) {
                return true;
            }
            if started.elapsed() > PROMQL_DEADLINE {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls `promql` until its value satisfies `expected` (within [`PROMQL_DEADLINE`]); returns that
    /// value. Panics with the last value, the targets' health and the config otherwise.
    pub async fn wait_for(&self, what: &str, promql: &str, expected: impl Fn(f64) -> bool) -> f64 {
        let started = std::time::Instant::now();
        let mut last;
        let met = loop {
            last = self.query(promql).await.ok().and_then(|s| s.first().map(|(_, v)| *v));
            if last.is_some_and(&expected) {
                break true;
            }
            if started.elapsed() > PROMQL_DEADLINE {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if !met {
            let targets = http_get_blocking(self.port, "/api/v1/targets").map(|(_, body)| body);
            panic!(
                "{what}: {promql} never met the expectation; last value {last:?}\ntargets: {targets:?}\n\
                 config:\n{}",
                self.config_text()
            );
        }
        last.unwrap_or(f64::NAN)
    }
}
