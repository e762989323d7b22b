use super::*;
use crate::datastore::EndpointTelemetry;

fn endpoint(name: &str, port: u16) -> Arc<Endpoint> {
    Arc::new(Endpoint::new(name, std::net::SocketAddr::from(([10, 0, 0, 1], port))))
}

fn scraped(endpoint: &Endpoint, at: Instant) {
    endpoint.update_telemetry(EndpointTelemetry { update_time: Some(at), ..Default::default() });
}

fn monitor(settings: HealthSettings) -> (Arc<HealthMonitor>, Arc<MetricsRegistry>) {
    let registry = MetricsRegistry::new("pool");
    (HealthMonitor::new(settings, &registry), registry)
}

fn settings() -> HealthSettings {
    HealthSettings {
        enabled: true,
        staleness: Duration::from_secs(2),
        breaker: BreakerPolicy {
            consecutive_failures: 2,
            base_ejection: Duration::from_secs(1),
            ..Default::default()
        },
    }
}

fn names(v: &[Arc<Endpoint>]) -> Vec<&str> {
    v.iter().map(|e| e.name.as_str()).collect()
}

#[test]
fn stale_and_ejected_endpoints_leave_the_candidates() {
    let (m, _) = monitor(settings());
    let (a, b, c) = (endpoint("a", 1), endpoint("b", 2), endpoint("c", 3));
    let now = a.joined_at + Duration::from_secs(10);
    scraped(&a, now);
    scraped(&b, now.checked_sub(Duration::from_secs(3)).expect("3 s after boot")); // stale
    scraped(&c, now);
    m.on_status(&c, 503, false, now);
    m.on_status(&c, 502, false, now); // ejected
    let mut candidates = vec![a.clone(), b.clone(), c.clone()];
    m.retain_admitted(&mut candidates, now);
    assert_eq!(names(&candidates), ["a"]);
    assert_eq!(m.state(&a, now), HealthState::Healthy);
    assert_eq!(m.state(&b, now), HealthState::Stale);
    assert_eq!(m.state(&c, now), HealthState::Ejected);
}

#[test]
fn an_endpoint_never_scraped_has_the_threshold_from_joining() {
    let (m, _) = monitor(settings());
    let a = endpoint("a", 1);
    assert!(m.admits(&a, a.joined_at + Duration::from_secs(1)));
    assert!(!m.admits(&a, a.joined_at + Duration::from_secs(3)));
}

#[test]
fn every_candidate_out_fails_open_and_is_counted() {
    let (m, registry) = monitor(settings());
    let (a, b) = (endpoint("a", 1), endpoint("b", 2));
    let now = a.joined_at + Duration::from_secs(10);
    let mut candidates = vec![a, b];
    m.retain_admitted(&mut candidates, now);
    assert_eq!(candidates.len(), 2, "all stale: all kept");
    assert!(registry.encode().contains("epp_endpoint_health_fail_open_total{name=\"pool\"} 1"));
}

#[test]
fn statuses_below_500_are_successes() {
    let (m, _) = monitor(settings());
    let a = endpoint("a", 1);
    let now = a.joined_at;
    for status in [200, 400, 404, 429, 499] {
        m.on_status(&a, status, false, now);
        m.on_status(&a, status, false, now);
    }
    assert_eq!(m.state(&a, now), HealthState::Healthy);
}

#[test]
fn a_recovered_endpoint_is_probed_then_restored() {
    let (m, _) = monitor(settings());
    let a = endpoint("a", 1);
    let t0 = a.joined_at;
    scraped(&a, t0);
    m.on_status(&a, 503, false, t0);
    m.on_status(&a, 503, false, t0);
    let t1 = t0 + Duration::from_millis(1500);
    scraped(&a, t1);
    assert_eq!(m.state(&a, t1), HealthState::Probing);
    assert!(m.admits(&a, t1));
    let probe = m.on_dispatch(&a, t1);
    assert!(probe);
    assert!(!m.admits(&a, t1), "one probe at a time");
    m.on_probe_abandoned(&a);
    assert!(m.admits(&a, t1), "an abandoned probe frees the slot");
    for _ in 0..2 {
        let probe = m.on_dispatch(&a, t1);
        m.on_status(&a, 200, probe, t1);
    }
    assert_eq!(m.state(&a, t1), HealthState::Healthy);
}

#[test]
fn an_expired_ejection_of_a_stale_endpoint_stays_out() {
    let (m, _) = monitor(settings());
    let a = endpoint("a", 1);
    let t0 = a.joined_at;
    m.on_status(&a, 503, false, t0);
    m.on_status(&a, 503, false, t0);
    let t1 = t0 + Duration::from_secs(5);
    assert_eq!(m.state(&a, t1), HealthState::Stale);
    assert!(!m.admits(&a, t1));
}

#[test]
fn disabled_admits_everything() {
    let (m, _) = monitor(HealthSettings { enabled: false, ..settings() });
    let a = endpoint("a", 1);
    let now = a.joined_at + Duration::from_secs(60);
    m.on_status(&a, 503, false, now);
    m.on_status(&a, 503, false, now);
    assert!(m.admits(&a, now));
    assert_eq!(m.state(&a, now), HealthState::Healthy);
}

#[test]
fn refresh_publishes_states_and_ejections_are_counted() {
    let (m, registry) = monitor(settings());
    let (a, b) = (endpoint("a", 1), endpoint("b", 2));
    let now = a.joined_at + Duration::from_millis(100);
    m.on_status(&b, 500, false, now);
    m.on_status(&b, 500, false, now);
    m.refresh(&[a.clone(), b.clone()], now);
    let page = registry.encode();
    let has = |s: &str| page.contains(s);
    assert!(
        has("epp_endpoint_health_state{name=\"pool\",model_server_endpoint=\"a\",state=\"healthy\"} 1"),
        "{page}"
    );
    assert!(has("epp_endpoint_health_state{name=\"pool\",model_server_endpoint=\"b\",state=\"ejected\"} 1"));
    assert!(has("epp_endpoint_health_state{name=\"pool\",model_server_endpoint=\"b\",state=\"healthy\"} 0"));
    assert!(has(
        "epp_endpoint_ejections_total{name=\"pool\",model_server_endpoint=\"b\",reason=\"consecutive_failures\"} 1"
    ));
}

#[test]
fn a_request_served_by_a_fallback_is_a_failure_of_the_primary() {
    let (m, _) = monitor(settings());
    let a = endpoint("a", 1);
    let now = a.joined_at;
    m.on_response(&a, 200, Some("10.0.0.1:1"), false, now);
    m.on_response(&a, 200, Some("10.0.0.1:2"), false, now);
    assert_eq!(m.state(&a, now), HealthState::Healthy, "one failure of two");
    m.on_response(&a, 200, Some("10.0.0.1:2"), false, now);
    assert_eq!(m.state(&a, now), HealthState::Ejected);
}
