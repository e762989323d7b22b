//! Builders shared by the plugin tests: endpoints, candidates, requests, dispatch records.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::datastore::{Datastore, Endpoint, EndpointTelemetry};
use crate::request::{ApiKind, Headers, ParsedRequest};
use crate::scheduling::PluginMetrics;
use crate::scheduling::{
    BuiltPlugin, Candidate, DispatchInfo, FactoryContext, PluginError, ProfileRunResult, SchedulingRequest,
    SchedulingResult,
};

/// An endpoint at `10.0.0.<n>:8000` named `pod-<n>`.
pub(crate) fn endpoint(n: u8) -> Arc<Endpoint> {
    endpoint_at(&format!("pod-{n}"), &format!("10.0.0.{n}:8000"))
}

pub(crate) fn endpoint_at(name: &str, addr: &str) -> Arc<Endpoint> {
    let addr: SocketAddr = addr.parse().expect("test address");
    Arc::new(Endpoint::new(name, addr))
}

/// Endpoint `n` with the given pod labels (a `None` value leaves that label off).
pub(crate) fn labelled_endpoint(n: u8, labels: &[(&str, Option<&str>)]) -> Arc<Endpoint> {
    let labels = labels.iter().filter_map(|(k, v)| v.map(|v| (k.to_string(), v.to_string()))).collect();
    let addr: SocketAddr = format!("10.0.0.{n}:8000").parse().expect("test address");
    Arc::new(Endpoint::new(format!("pod-{n}"), addr).with_labels(labels))
}

/// A candidate for endpoint `n` with the given telemetry.
pub(crate) fn candidate(n: u8, metrics: EndpointTelemetry) -> Candidate {
    let ep = endpoint(n);
    ep.update_telemetry(metrics);
    Candidate::new(ep)
}

/// Candidates whose only telemetry is what `f` sets, for each value of `values`.
pub(crate) fn candidates_with<T: Copy>(
    values: &[T],
    f: impl Fn(&mut EndpointTelemetry, T),
) -> Vec<Candidate> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let mut m = EndpointTelemetry::default();
            f(&mut m, v);
            candidate(i as u8 + 1, m)
        })
        .collect()
}

pub(crate) fn ctx() -> FactoryContext {
    FactoryContext::new(Arc::new(Datastore::new("pool")), PluginMetrics::detached())
}

pub(crate) fn rng() -> SmallRng {
    SmallRng::seed_from_u64(42)
}

/// Owns what a [`SchedulingRequest`] borrows.
pub(crate) struct RequestFixture {
    pub model: String,
    pub headers: Headers,
    pub body: Vec<u8>,
    pub parsed: ParsedRequest,
    pub estimated_tokens: u64,
}

impl RequestFixture {
    /// A completions request whose prefix bytes are exactly `prompt`.
    pub(crate) fn with_prompt(model: &str, prompt: &str) -> Self {
        let head = format!(r#"{{"model":"{model}","prompt":"#);
        let mut body = head.clone().into_bytes();
        body.extend_from_slice(prompt.as_bytes());
        body.push(b'}');
        let model_start = head.find(model).unwrap_or(0) - 1;
        let parsed = ParsedRequest {
            api: ApiKind::Completions,
            model: model.to_string(),
            model_span: model_start..model_start + model.len() + 2,
            stream: false,
            max_tokens: None,
            prefix_span: head.len()..head.len() + prompt.len(),
            prompt_token_ids: None,
            cache_salt: None,
        };
        Self { model: model.to_string(), headers: Headers::new(), body, parsed, estimated_tokens: 100 }
    }

    pub(crate) fn empty() -> Self {
        Self::with_prompt("m", "")
    }

    pub(crate) fn request(&self) -> SchedulingRequest<'_> {
        SchedulingRequest {
            request_id: "req-1",
            target_model: &self.model,
            headers: &self.headers,
            body: &self.body,
            parsed: Some(&self.parsed),
            priority: 0,
            fairness_id: "",
            token_ids: None,
            input_tokens: self.estimated_tokens / 2,
            estimated_tokens: self.estimated_tokens,
            slo: Default::default(),
            now: Instant::now(),
            dry_run: false,
        }
    }
}

/// What the director hands the lifecycle hooks for a request sent to `endpoint`.
pub(crate) fn dispatch(endpoint: &Arc<Endpoint>, input_tokens: u64, estimated_tokens: u64) -> DispatchInfo {
    DispatchInfo {
        dispatch_id: 1,
        request_id: "req-1".into(),
        target_model: "m".into(),
        fairness_id: String::new(),
        priority: 0,
        endpoint: endpoint.clone(),
        prefill_endpoint: None,
        input_tokens,
        estimated_tokens,
        dispatched_at: Instant::now(),
        attrs: Default::default(),
    }
}

/// A single-profile result ("default") targeting `targets`.
pub(crate) fn result_for(targets: &[Arc<Endpoint>]) -> SchedulingResult {
    SchedulingResult {
        profile_results: vec![(
            "default".into(),
            ProfileRunResult { targets: targets.to_vec(), scores: Vec::new() },
        )],
        primary_profile: "default".into(),
        extras: Default::default(),
    }
}

pub(crate) type FactoryFn =
    fn(&str, Option<&serde_json::Value>, &FactoryContext) -> Result<BuiltPlugin, PluginError>;

pub(crate) fn build(factory: FactoryFn, params: serde_json::Value) -> Result<BuiltPlugin, PluginError> {
    factory("p", Some(&params), &ctx())
}

/// Asserts that building with `params` fails with a message naming `field` and the plugin.
pub(crate) fn assert_rejects(factory: FactoryFn, params: serde_json::Value, field: &str) {
    match build(factory, params.clone()) {
        Ok(_) => panic!("parameters {params} were accepted"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains(field), "error for {params} does not name {field}: {text}");
            assert!(text.contains("\"p\""), "error does not name the plugin: {text}");
        }
    }
}
