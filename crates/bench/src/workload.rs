//! What a benchmark run sends: the target, the load shape, request sizes, shared prefixes, conversation
//! turns and the gateway headers (SLOs, objectives, fairness ids).
//!
//! Why one struct for both the YAML workload file and the command line: the binary loads the file (if
//! any), lays the flags over it, then [`Workload::validate`] checks the result once, so every invalid
//! value gets the same error naming the field (and its flag) wherever it came from.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::dist::Distribution;
pub use super::objective::ObjectiveMix;

/// Which OpenAI endpoint requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    #[default]
    Chat,
    Completions,
}

impl Api {
    /// The path appended to a target URL that has none.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
        }
    }
}

impl FromStr for Api {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chat" => Ok(Api::Chat),
            "completions" => Ok(Api::Completions),
            other => Err(format!("unknown api {other:?}: use chat or completions")),
        }
    }
}

/// How requests are released.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadShape {
    /// Open loop, evenly spaced, requests per second.
    Rate(f64),
    /// Open loop, exponential gaps (a Poisson process), requests per second on average.
    Poisson(f64),
    /// Closed loop: this many requests always in flight.
    Concurrency(u32),
}

/// A benchmark workload (the workload file's schema; flags override it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    /// Base URL (`http://host:port`, API path added) or a full endpoint URL.
    pub url: Option<String>,
    pub api: Api,
    pub model: String,
    pub stream: bool,
    /// Sends `ignore_eos: true` (vLLM) so outputs run to `max_tokens`.
    pub ignore_eos: bool,
    pub rate: Option<f64>,
    pub poisson: Option<f64>,
    pub concurrency: Option<u32>,
    /// Stop releasing requests after this long (whichever of duration/requests comes first).
    #[serde(with = "humantime_serde")]
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    /// Tokens of the unique part of each turn's prompt.
    pub prompt_tokens: Distribution,
    /// `max_tokens` of each request.
    pub output_tokens: Distribution,
    /// Distinct shared system prompts; each conversation uses one.
    pub prefix_groups: u32,
    pub prefix_tokens: u64,
    /// Turns per conversation; each turn resends the conversation so far.
    pub turns: u32,
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
    pub objectives: Option<ObjectiveMix>,
    /// `x-gateway-inference-fairness-id` values, round robin.
    pub fairness_ids: Vec<String>,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Response header naming the backend that served a request.
    pub backend_header: String,
    /// Whole-request limit (headers and body); past it the request counts as a timeout.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub seed: u64,
    /// Seed of the shared prefixes' text; `None`: `seed`.
    pub prefix_seed: Option<u64>,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            url: None,
            api: Api::Chat,
            model: "test-model".into(),
            stream: true,
            ignore_eos: false,
            rate: None,
            poisson: None,
            concurrency: None,
            duration: None,
            requests: None,
            prompt_tokens: Distribution::Fixed(512),
            output_tokens: Distribution::Fixed(128),
            prefix_groups: 0,
            prefix_tokens: 0,
            turns: 1,
            slo_ttft_ms: None,
            slo_tpot_ms: None,
            objectives: None,
            fairness_ids: Vec::new(),
            headers: BTreeMap::new(),
            backend_header: "x-backend-id".into(),
            timeout: Duration::from_secs(60),
            seed: 1,
            prefix_seed: None,
        }
    }
}

/// A workload that cannot run; names the field (and its flag).
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("invalid {field} (--{flag}): {message}", flag = field.replace('_', "-"))]
    Invalid { field: &'static str, message: String },
    #[error("cannot read workload file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("workload file {path}: {message}")]
    Parse { path: String, message: String },
    /// A lab workload key epp-bench cannot send (see [`crate::lab_workload`]).
    #[error("lab workload key {field}: {message}")]
    Unsupported { field: &'static str, message: String },
}

fn invalid(field: &'static str, message: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid { field, message: message.into() }
}

/// Default run length when neither `duration` nor `requests` is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

impl Workload {
    /// Reads a YAML workload file; unknown keys and bad values name their path in the file.
    pub fn from_yaml_file(path: &Path) -> Result<Self, WorkloadError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| WorkloadError::Read { path: shown.clone(), source })?;
        Self::from_yaml(&text).map_err(|message| WorkloadError::Parse { path: shown, message })
    }

    /// Parses YAML text; the error names the offending key.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.into_inner().to_string()
            } else {
                format!("{path}: {}", e.into_inner())
            }
        })
    }

    /// Checks every value; run only validated workloads.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        self.target_url()?;
        let shapes = [self.rate.is_some(), self.poisson.is_some(), self.concurrency.is_some()];
        if shapes.iter().filter(|set| **set).count() > 1 {
            return Err(invalid("rate", "give only one of rate, poisson and concurrency"));
        }
        for (field, value) in [("rate", self.rate), ("poisson", self.poisson)] {
            if let Some(r) = value {
                if !r.is_finite() || r <= 0.0 || r > 1e6 {
                    return Err(invalid(field, format!("must be a request rate in (0, 1000000], got {r}")));
                }
            }
        }
        if self.concurrency == Some(0) {
            return Err(invalid("concurrency", "must be at least 1"));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(invalid("duration", "must be longer than 0s"));
        }
        if self.requests == Some(0) {
            return Err(invalid("requests", "must be at least 1"));
        }
        if self.output_tokens.min() < 1 && !matches!(self.output_tokens, Distribution::LogNormal { .. }) {
            return Err(invalid("output_tokens", "must be at least 1 token"));
        }
        if self.prefix_groups > 0 && self.prefix_tokens == 0 {
            return Err(invalid("prefix_tokens", "prefix_groups needs prefix_tokens above 0"));
        }
        if self.prefix_tokens > 0 && self.prefix_groups == 0 {
            return Err(invalid("prefix_groups", "prefix_tokens needs prefix_groups above 0"));
        }
        if self.turns == 0 || self.turns > 1000 {
            return Err(invalid("turns", "must be in 1..=1000"));
        }
        for (field, slo) in [("slo_ttft_ms", self.slo_ttft_ms), ("slo_tpot_ms", self.slo_tpot_ms)] {
            if slo.is_some_and(|ms| !ms.is_finite() || ms <= 0.0) {
                return Err(invalid(field, "must be a positive number of milliseconds"));
            }
        }
        if let Some(id) =
            self.fairness_ids.iter().find(|id| id.is_empty() || HeaderValue::from_str(id).is_err())
        {
            return Err(invalid("fairness_ids", format!("{id:?} is not a valid header value")));
        }
        for (name, value) in &self.headers {
            if HeaderName::from_bytes(name.as_bytes()).is_err() || HeaderValue::from_str(value).is_err() {
                return Err(invalid("headers", format!("{name}: {value:?} is not a valid header")));
            }
        }
        if HeaderName::from_bytes(self.backend_header.as_bytes()).is_err() {
            return Err(invalid("backend_header", format!("{:?} is not a header name", self.backend_header)));
        }
        if self.timeout.is_zero() {
            return Err(invalid("timeout", "must be longer than 0s"));
        }
        if self.model.is_empty() {
            return Err(invalid("model", "must not be empty"));
        }
        Ok(())
    }

    /// The load shape; closed loop with one request in flight when none is given.
    pub fn load_shape(&self) -> LoadShape {
        match (self.rate, self.poisson, self.concurrency) {
            (Some(r), _, _) => LoadShape::Rate(r),
            (_, Some(r), _) => LoadShape::Poisson(r),
            (_, _, Some(c)) => LoadShape::Concurrency(c),
            _ => LoadShape::Concurrency(1),
        }
    }

    /// The duration limit: the given one, or [`DEFAULT_DURATION`] when no request count is given either.
    pub fn duration_limit(&self) -> Option<Duration> {
        match (self.duration, self.requests) {
            (None, None) => Some(DEFAULT_DURATION),
            (duration, _) => duration,
        }
    }

    /// The endpoint URL: `url` as given when it has a path, else `url` plus the API path.
    pub fn target_url(&self) -> Result<reqwest::Url, WorkloadError> {
        let raw = self.url.as_deref().ok_or_else(|| invalid("url", "no target URL given"))?;
        let mut url = reqwest::Url::parse(raw).map_err(|e| invalid("url", format!("{raw:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(invalid("url", format!("{raw:?} is not an http(s)://host URL")));
        }
        if url.path() == "/" {
            url.set_path(self.api.path());
        }
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Workload {
        Workload { url: Some("http://127.0.0.1:8080".into()), ..Default::default() }
    }

    fn error_of(w: Workload) -> String {
        w.validate().unwrap_err().to_string()
    }

    #[test]
    fn yaml_file_sets_every_kind_of_field() {
        let w = Workload::from_yaml(
            "url: http://gw:80\napi: completions\npoisson: 20\nduration: 30s\nprompt_tokens: uniform:100-2000\n\
             output_tokens: 64\nprefix_groups: 4\nprefix_tokens: 1000\nturns: 3\nslo_ttft_ms: 500\n\
             objectives: {interactive: 0.7, batch: 0.3}\nfairness_ids: [a, b]\nheaders: {x-test: '1'}\n",
        )
        .unwrap();
        assert_eq!(w.api, Api::Completions);
        assert_eq!(w.load_shape(), LoadShape::Poisson(20.0));
        assert_eq!(w.duration, Some(Duration::from_secs(30)));
        assert_eq!(w.prompt_tokens, Distribution::Uniform { min: 100, max: 2000 });
        assert_eq!(w.output_tokens, Distribution::Fixed(64));
        assert_eq!(w.objectives.as_ref().unwrap().0.len(), 2);
        assert_eq!(w.target_url().unwrap().as_str(), "http://gw/v1/completions");
        w.validate().unwrap();
        let text = Workload::from_yaml("objectives: 'interactive:0.7,batch:0.3'").unwrap();
        assert_eq!(text.objectives, w.objectives.map(|m| ObjectiveMix(m.0.into_iter().rev().collect())));
    }

    #[test]
    fn yaml_errors_name_the_key() {
        let unknown = Workload::from_yaml("rate: 5\nconcurrenc: 3\n").unwrap_err();
        assert!(unknown.contains("concurrenc"), "{unknown}");
        let bad = Workload::from_yaml("prompt_tokens: uniform:9-1\n").unwrap_err();
        assert!(bad.contains("prompt_tokens") && bad.contains("above the maximum"), "{bad}");
        let bad = Workload::from_yaml("objectives: 'a:x'\n").unwrap_err();
        assert!(bad.contains("objectives"), "{bad}");
    }

    #[test]
    fn validation_names_the_field_and_flag() {
        let e = error_of(Workload { rate: Some(1.0), concurrency: Some(2), ..valid() });
        assert!(e.contains("only one of"), "{e}");
        assert!(error_of(Workload { rate: Some(-1.0), ..valid() }).contains("invalid rate (--rate)"));
        assert!(error_of(Workload { concurrency: Some(0), ..valid() }).contains("concurrency"));
        assert!(error_of(Workload { prefix_groups: 2, ..valid() }).contains("--prefix-tokens"));
        assert!(error_of(Workload { turns: 0, ..valid() }).contains("turns"));
        assert!(error_of(Workload { slo_ttft_ms: Some(0.0), ..valid() }).contains("slo_ttft_ms"));
        assert!(
            error_of(Workload { output_tokens: Distribution::Fixed(0), ..valid() }).contains("output_tokens")
        );
        assert!(error_of(Workload { fairness_ids: vec!["a\nb".into()], ..valid() }).contains("fairness_ids"));
        assert!(error_of(Workload { url: None, ..valid() }).contains("invalid url"));
        assert!(error_of(Workload { url: Some("ftp://x".into()), ..valid() }).contains("url"));
        assert!(error_of(Workload { duration: Some(Duration::ZERO), ..valid() }).contains("duration"));
    }

    #[test]
    fn defaults_and_url_paths() {
        let w = valid();
        assert_eq!(w.load_shape(), LoadShape::Concurrency(1));
        assert_eq!(w.duration_limit(), Some(DEFAULT_DURATION));
        let by_count = Workload { requests: Some(5), ..valid() };
        assert_eq!(by_count.duration_limit(), None);
        assert_eq!(w.target_url().unwrap().path(), "/v1/chat/completions");
        let explicit = Workload { url: Some("http://h:1/custom/path".into()), ..valid() };
        assert_eq!(explicit.target_url().unwrap().path(), "/custom/path");
    }
}
