//! gRPC health on the health port: `liveness`, `readiness`, `""` and the ext_proc service name, as the
//! Go EPP serves them (Envoy health-checks the EPP with the ext_proc service name).

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Service names the health server answers for readiness.
/// `inference-extension` is what the Go EPP's Helm chart probes, so epp's image works under that chart too.
pub(crate) const READINESS_SERVICES: &[&str] =
    &["readiness", "", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension"];

/// Sets liveness serving and readiness to `ready`.
pub(crate) async fn set_ready(reporter: &HealthReporter, ready: bool) {
    reporter.set_service_status("liveness", ServingStatus::Serving).await;
    let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
    for name in READINESS_SERVICES {
        reporter.set_service_status(*name, status).await;
    }
}

/// Shutdown has begun: readiness (and the ext_proc service name Envoy health-checks) report NOT_SERVING
/// so no new traffic comes, while liveness stays SERVING so the drain is not cut short by a restart.
pub(crate) async fn set_shutting_down(reporter: &HealthReporter) {
    for name in READINESS_SERVICES {
        reporter.set_service_status(*name, ServingStatus::NotServing).await;
    }
}
