//! The detector flow control uses when the configuration names none with a saturation-detector role.
//!
//! It gates on nothing but observability: an endpoint counts as available once its telemetry has been
//! published at least once. That keeps the scale-from-zero behaviour (requests wait until the first
//! endpoint is up and scraped) without pretending to know how loaded the pool is.

use std::time::Instant;

use super::SaturationDetector;
use crate::scheduling::Candidate;

/// Saturated (1.0) until at least one candidate has published telemetry, then 0.0.
#[derive(Debug, Clone, Copy, Default)]
pub struct ObservedEndpointsDetector;

/// The `detector` label of the stale-endpoints gauge for [`ObservedEndpointsDetector`].
pub const OBSERVED_ENDPOINTS_DETECTOR: &str = "observed-endpoints";

impl SaturationDetector for ObservedEndpointsDetector {
    fn saturation(&self, candidates: &[Candidate], _now: Instant) -> f64 {
        if candidates.iter().any(|c| c.telemetry.update_time.is_some()) {
            0.0
        } else {
            1.0
        }
    }

    fn stale_endpoints(&self, candidates: &[Candidate], _now: Instant) -> usize {
        candidates.iter().filter(|c| c.telemetry.update_time.is_none()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::{Endpoint, EndpointTelemetry};
    use std::sync::Arc;

    #[test]
    fn saturated_until_one_endpoint_is_observed() {
        let a = Arc::new(Endpoint::new("a", "10.0.0.1:8000".parse().unwrap()));
        let b = Arc::new(Endpoint::new("b", "10.0.0.2:8000".parse().unwrap()));
        let now = Instant::now();
        let candidates = |eps: &[&Arc<Endpoint>]| -> Vec<Candidate> {
            eps.iter().map(|e| Candidate::new((*e).clone())).collect()
        };
        let d = ObservedEndpointsDetector;
        assert_eq!(d.saturation(&candidates(&[&a, &b]), now), 1.0);
        assert_eq!(d.saturation(&[], now), 1.0);
        b.update_telemetry(EndpointTelemetry { update_time: Some(now), ..Default::default() });
        assert_eq!(d.saturation(&candidates(&[&a, &b]), now), 0.0);
        assert_eq!(d.stale_endpoints(&candidates(&[&a, &b]), now), 1);
    }
}
