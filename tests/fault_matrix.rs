//! The fault matrix: each fault a production EPP meets, injected under load through a real Envoy, with
//! the bound on errors, where the traffic went after the fault, and every in-flight gauge back to 0.
//!
//! Client → Envoy (ext_proc, full duplex) → epp → Envoy's ORIGINAL_DST cluster → three epp-test-backend
//! processes (one per replica, so one can be SIGKILLed). Faults come from the backends' `/admin/faults`
//! (hung, garbage or slow `/metrics`; every Nth request failing) or from killing and restarting a process.
//! The load is closed-loop ([`load::ClosedLoop`]). Figures (errors, time to the last error) are printed
//! for RELIABILITY.md; assertions are on counts and on where requests went, never on timing.
//!
//! Layout: this file holds the fleet fixture and the gauge check; `fault_matrix/load.rs` the load driver;
//! `fault_matrix/replicas.rs` killed and failing replicas; `fault_matrix/telemetry.rs` broken `/metrics`;
//! `fault_matrix/lifecycle.rs` streams cut, cancel storms, epp and Envoy restarts; `fault_matrix/soak.rs`
//! the 30-minute soak (ignored; `make soak`). Without Envoy the tests fail (`EPP_SKIP_MISSING_TOOLS=1` skips
//! them, printing SKIP, outside CI).

#[path = "fault_matrix/lifecycle.rs"]
mod lifecycle;
#[path = "fault_matrix/load.rs"]
mod load;
#[path = "fault_matrix/replicas.rs"]
mod replicas;
#[path = "fault_matrix/soak.rs"]
mod soak;
#[path = "fault_matrix/telemetry.rs"]
mod telemetry;

use std::time::Duration;

use epp_testkit::*;
use serde_json::Value;

pub const MODEL: &str = "food-review";

/// Every gauge that counts requests in flight, summed over its series.
const IN_FLIGHT_GAUGES: [&str; 5] = [
    "inference_objective_running_requests",
    "llm_d_epp_request_running",
    "llm_d_epp_inflight_requests",
    "llm_d_epp_inflight_tokens",
    "llm_d_epp_flow_control_queue_size",
];

/// Three replicas, each its own process, behind epp and Envoy.
pub struct Fleet {
    pub stack: EppBehindEnvoy,
    pub ports: Vec<u16>,
    pub replicas: Vec<Option<ChildGuard>>,
    backend_args: Vec<String>,
    /// Started with FAULT_MATRIX_EPP_ARGS: health states may not be published, so waits for one are a
    /// fixed pause instead (for "before" figures only; assertions then fail as they should).
    extra_args: bool,
}

impl Fleet {
    /// Starts `count` replicas (with `backend_args`), epp (with `epp_args`) and Envoy; waits until epp has
    /// scraped every replica. `None` when Envoy is missing (test skipped).
    pub async fn start(
        test_name: &str,
        count: usize,
        backend_args: &[&str],
        epp_args: &[&str],
    ) -> Option<Self> {
        envoy_or_skip(test_name)?;
        let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
        let replicas = ports.iter().map(|&p| Some(start_test_backend_with(&[p], backend_args))).collect();
        let endpoints = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        // FAULT_MATRIX_EPP_ARGS adds epp flags, e.g. `--config-text=endpointHealth: {enabled: false}` to
        // measure the same faults without endpoint health (RELIABILITY.md's "before" figures).
        let extra = std::env::var("FAULT_MATRIX_EPP_ARGS").unwrap_or_default();
        let mut args = vec![FAST_POOL_GAUGES];
        args.extend_from_slice(epp_args);
        if !extra.is_empty() {
            args.push(&extra);
        }
        let stack = start_epp_behind_envoy(test_name, "envoy-full-duplex.yaml", &endpoints, &args, &[])?;
        let fleet = Self {
            stack,
            ports,
            replicas,
            backend_args: backend_args.iter().map(std::string::ToString::to_string).collect(),
            extra_args: !extra.is_empty(),
        };
        for index in 0..count {
            fleet.wait_for_state(index, "healthy").await;
        }
        Some(fleet)
    }

    /// `x-backend-id` of replica `index`.
    pub fn id(&self, index: usize) -> String {
        format!("backend-{}", self.ports[index])
    }

    pub fn metrics_text(&self) -> String {
        self.stack.epp.metrics_text()
    }

    /// SIGKILLs replica `index`.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.replicas[index].take() {
            child.kill();
        }
    }

    /// Starts replica `index` again on its port.
    pub fn restart(&mut self, index: usize) {
        let args: Vec<&str> = self.backend_args.iter().map(String::as_str).collect();
        self.replicas[index] = Some(start_test_backend_with(&[self.ports[index]], &args));
    }

    /// Sets replica `index`'s injected faults (`POST /admin/faults`).
    pub async fn set_faults(&self, index: usize, faults: &Value) {
        let url = format!("http://127.0.0.1:{}/admin/faults", self.ports[index]);
        let response = post_json(&http_client(), &url, faults).await;
        assert_eq!(response.status().as_u16(), 200, "setting faults {faults}");
    }

    /// epp's health state for replica `index` (`epp_endpoint_health_state`), once it reads `state`.
    pub async fn wait_for_state(&self, index: usize, state: &str) {
        if self.extra_args {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return;
        }
        let endpoint = format!("127.0.0.1:{}", self.ports[index]);
        let labels = [("model_server_endpoint", endpoint.as_str()), ("state", state)];
        let reached = wait_until_async(PROPAGATION_DEADLINE, || {
            let ok = metric_sample(&self.metrics_text(), "epp_endpoint_health_state", &labels) == Some(1.0);
            async move { ok }
        })
        .await;
        assert!(reached, "replica {index} never became {state}:\n{}", self.metrics_text());
    }

    /// Waits until every in-flight gauge sums to 0; panics with the page if one never does.
    pub async fn assert_gauges_settle(&self, context: &str) {
        let settled = wait_for_gauges_zero(|| self.metrics_text(), &IN_FLIGHT_GAUGES).await;
        assert!(settled.is_ok(), "{context}: in-flight gauges never returned to 0: {settled:?}");
    }
}

/// How long a fault is left to act before its effect is measured; the tests assert on what happened
/// within it, not on how fast.
pub const FAULT_WINDOW: Duration = Duration::from_secs(6);
