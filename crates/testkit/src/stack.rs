//! The whole e2e stack in one call: test backends, epp pointed at them, and Envoy pointed at epp.
//!
//! Why: almost every e2e test through epp needs the same three processes wired the same way; keeping the
//! wiring here means a test only states what differs (template, backend flags, epp flags).

use super::{
    envoy_or_skip, start_envoy_on_free_ports, start_epp_for, start_epp_for_with_env, start_test_backends,
};
use super::{Envoy, Epp, TestBackends};

/// A running stack. Fields drop in order: Envoy first (no new traffic), then epp, then the backends.
pub struct Stack {
    pub envoy: Envoy,
    pub epp: Epp,
    pub backends: TestBackends,
}

impl Stack {
    /// `http://127.0.0.1:<envoy listen port><path>`: where clients send requests.
    pub fn url(&self, path: &str) -> String {
        self.envoy.url(path)
    }
}

/// Starts `backend_count` backends (with `backend_args`), epp with `--endpoints` set to them (plus
/// `epp_args`), and Envoy from `template` (`envoy-full-duplex.yaml` or `envoy-buffered.yaml`) with
/// `EXTPROC_PORT` set to epp's gRPC port. Returns `None` (test skipped) when Envoy is not installed and
/// this is not CI.
pub fn start_stack(
    test_name: &str,
    template: &str,
    backend_count: usize,
    backend_args: &[&str],
    epp_args: &[&str],
) -> Option<Stack> {
    start_stack_with_envoy_vars(test_name, template, backend_count, backend_args, epp_args, &[])
}

/// [`start_stack`] with extra template variables for Envoy (e.g. `("HTTP1_TRAILERS", "true")`).
pub fn start_stack_with_envoy_vars(
    test_name: &str,
    template: &str,
    backend_count: usize,
    backend_args: &[&str],
    epp_args: &[&str],
    envoy_vars: &[(&str, &str)],
) -> Option<Stack> {
    start_stack_with(test_name, template, backend_count, backend_args, (epp_args, &[]), envoy_vars)
}

/// [`start_stack`] with environment variables for epp (e.g. `OTEL_*`).
pub fn start_stack_with_epp_env(
    test_name: &str,
    template: &str,
    backend_count: usize,
    epp_args: &[&str],
    epp_env: &[(&str, &str)],
) -> Option<Stack> {
    start_stack_with(test_name, template, backend_count, &[], (epp_args, epp_env), &[])
}

fn start_stack_with(
    test_name: &str,
    template: &str,
    backend_count: usize,
    backend_args: &[&str],
    (epp_args, epp_env): (&[&str], &[(&str, &str)]),
    envoy_vars: &[(&str, &str)],
) -> Option<Stack> {
    envoy_or_skip(test_name)?;
    let backends = start_test_backends(backend_count, backend_args);
    let epp = start_epp_for_with_env(&backends.endpoints(), epp_args, epp_env);
    let mut vars =
        vec![("EXTPROC_PORT", epp.grpc_port.to_string()), ("HEALTH_PORT", epp.health_port.to_string())];
    vars.extend(envoy_vars.iter().map(|(name, value)| (*name, value.to_string())));
    let envoy = start_envoy_on_free_ports(template, &vars);
    Some(Stack { envoy, epp, backends })
}

/// epp and Envoy in front of it, for backends the test runs itself (e.g. [`super::held_backend`]).
/// Fields drop in order: Envoy first, then epp.
pub struct EppBehindEnvoy {
    pub envoy: Envoy,
    pub epp: Epp,
}

impl EppBehindEnvoy {
    /// `http://127.0.0.1:<envoy listen port><path>`.
    pub fn url(&self, path: &str) -> String {
        self.envoy.url(path)
    }
}

/// Starts epp for `endpoints` (`ip:port,…`, plus `epp_args`) and Envoy from `template` pointed at it
/// (plus `envoy_vars`). Returns `None` (test skipped) when Envoy is not installed and this is not CI.
pub fn start_epp_behind_envoy(
    test_name: &str,
    template: &str,
    endpoints: &str,
    epp_args: &[&str],
    envoy_vars: &[(&str, &str)],
) -> Option<EppBehindEnvoy> {
    envoy_or_skip(test_name)?;
    let epp = start_epp_for(endpoints, epp_args);
    let mut vars =
        vec![("EXTPROC_PORT", epp.grpc_port.to_string()), ("HEALTH_PORT", epp.health_port.to_string())];
    vars.extend(envoy_vars.iter().map(|(name, value)| (*name, value.to_string())));
    let envoy = start_envoy_on_free_ports(template, &vars);
    Some(EppBehindEnvoy { envoy, epp })
}
