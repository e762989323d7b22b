//! `saturationDetector` (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/config/loader/defaults.go): reference checks and
//! the default detector.

use std::time::Instant;

use super::fakes::ctx;
use super::{assert_mentions, load_err, load_ok, profile_shape, HEADER};
use crate::config::{load, LoadedConfig};
use crate::flowcontrol::SaturationDetector;
use crate::scheduling::{Candidate, Registry};

const PROFILE_Q: &str = "schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: queue-scorer}]\n";

fn detector_of(c: &LoadedConfig) -> std::sync::Arc<dyn SaturationDetector> {
    let name = c.saturation_detector.as_deref().expect("a detector is always configured");
    c.pipeline.plugin(name).and_then(|p| p.saturation_detector.clone()).expect("it has the role")
}

#[test]
fn a_default_utilization_detector_is_added_in_no_profile() {
    let c = load_ok(&format!("{HEADER}plugins: [{{type: queue-scorer}}]\n{PROFILE_Q}"));
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector"));
    let plugin = c.pipeline.plugin("utilization-detector").unwrap();
    assert_eq!(plugin.id.type_name, "utilization-detector");
    assert!(plugin.saturation_detector.is_some());
    assert!(profile_shape(&c, "p").0.is_empty(), "the added detector filters nothing");
    // Nor in the profile rule 4 builds from the declared plugins.
    let c = load_ok(&format!("{HEADER}plugins: [{{type: queue-scorer}}]\n"));
    assert!(profile_shape(&c, "default").0.is_empty());
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector"));
}

#[test]
fn the_default_detector_avoids_taken_names() {
    let c = load_ok(&format!(
        "{HEADER}plugins: [{{name: utilization-detector, type: queue-scorer}}]\n\
         schedulingProfiles: [{{name: p, plugins: [{{pluginRef: utilization-detector}}]}}]\n"
    ));
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector-default"));
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- {{name: utilization-detector, type: queue-scorer}}\n\
         - {{name: utilization-detector-default, type: openai-parser}}\n\
         schedulingProfiles: [{{name: p, plugins: [{{pluginRef: utilization-detector}}]}}]\n"
    ));
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector-default-2"));
}

#[test]
fn a_declared_but_unreferenced_detector_is_not_the_gate() {
    // The declared one filters in the profile; the gate is a separate default (a warning is logged).
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: queue-scorer\n- type: utilization-detector\n  parameters: {{queueDepthThreshold: 1}}\n\
         schedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: queue-scorer}}, {{pluginRef: utilization-detector}}]\n"
    ));
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector-default"));
    assert_eq!(profile_shape(&c, "p").0, ["utilization-detector"]);
}

#[test]
fn plugin_ref_names_a_declared_detector() {
    let c = load_ok(&format!(
        "{HEADER}plugins: [{{name: gate, type: concurrency-detector, parameters: {{maxConcurrency: 8}}}}, {{type: queue-scorer}}]\n\
         {PROFILE_Q}saturationDetector: {{pluginRef: gate}}\n"
    ));
    assert_eq!(c.saturation_detector.as_deref(), Some("gate"));
    assert!(c.pipeline.plugin("utilization-detector").is_none(), "no default when one is configured");
    // Named only as the gate, its accounting hooks still run (they are collected from every plugin).
    let hooks: Vec<&str> = c.pipeline.pre_requests.iter().map(|(id, _)| id.name.as_str()).collect();
    assert_eq!(hooks, ["gate"]);
    assert_eq!(c.pipeline.response_hooks.len(), 1);
    assert_eq!(c.pipeline.endpoint_listeners.len(), 1);
    assert!(profile_shape(&c, "p").0.is_empty(), "pitfall 9: not in a profile, so it filters nothing");
}

#[test]
fn plugin_ref_to_a_plugin_without_the_role_is_an_error() {
    let e = load_err(&format!(
        "{HEADER}plugins: [{{name: qs, type: queue-scorer}}]\n\
         schedulingProfiles: [{{name: p, plugins: [{{pluginRef: qs}}]}}]\nsaturationDetector: {{pluginRef: qs}}\n"
    ));
    assert_mentions(
        &e,
        &["saturationDetector.pluginRef", "\"qs\"", "queue-scorer", "not a saturation detector"],
    );
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}, {{type: fcfs-ordering-policy}}]\n{PROFILE_Q}\
         saturationDetector: {{pluginRef: fcfs-ordering-policy}}\n"
    ));
    assert_mentions(&e, &["saturationDetector.pluginRef", "\"fcfs-ordering-policy\"", "ordering policy"]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\n{PROFILE_Q}saturationDetector: {{pluginRef: gate}}\n"
    ));
    assert_mentions(&e, &["saturationDetector.pluginRef", "unknown plugin \"gate\""]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\n{PROFILE_Q}saturationDetector: {{}}\n"
    ));
    assert_mentions(&e, &["pluginRef"]);
}

#[test]
fn naming_the_default_detector_without_declaring_it_gets_the_default() {
    let c = load_ok(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\n{PROFILE_Q}saturationDetector: {{pluginRef: utilization-detector}}\n"
    ));
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector"));
    assert!(c.pipeline.plugin("utilization-detector").is_some());
}

#[test]
fn a_registry_without_the_default_detector_is_an_error() {
    let mut registry = Registry::new();
    for t in ["queue-scorer", "max-score-picker", "single-profile-handler"] {
        registry.register(t, super::fakes::registry().get(t).unwrap());
    }
    let e = load(&format!("{HEADER}plugins: [{{type: queue-scorer}}]\n"), &registry, &ctx())
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["saturationDetector", "utilization-detector", "not registered"]);
}

/// The real detectors, built through the loader.
mod builtins {
    use super::*;
    use crate::scheduling::plugins::testing::{candidate, endpoint};

    fn load_builtin(text: &str) -> LoadedConfig {
        load(text, &Registry::with_builtins(), &ctx()).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn the_default_detector_is_a_real_utilization_detector() {
        let c = load_builtin("");
        let d = detector_of(&c);
        let now = Instant::now();
        assert_eq!(d.saturation(&[], now), 1.0, "no candidates: fail closed");
        let fresh = crate::datastore::EndpointTelemetry {
            waiting_queue_size: 5,
            update_time: Some(now),
            ..Default::default()
        };
        // Default threshold 5: a queue of 5 is exactly saturated; an unscraped endpoint counts as 1.0.
        assert_eq!(d.saturation(&[candidate(1, fresh)], now), 1.0);
        let idle = crate::datastore::EndpointTelemetry { update_time: Some(now), ..Default::default() };
        assert_eq!(d.saturation(&[candidate(1, idle.clone()), candidate(2, idle)], now), 0.0);
        assert_eq!(d.stale_endpoints(&[candidate(3, Default::default())], now), 1);
    }

    #[test]
    fn a_configured_concurrency_detector_with_per_endpoint_capacities() {
        let c = load_builtin(&format!(
            "{HEADER}plugins:\n- type: queue-scorer\n- name: gate\n  type: concurrency-detector\n  parameters:\n    \
             maxConcurrency: 10\n    endpointCapacities:\n    - address: 10.0.0.1:8000\n      maxConcurrency: 30\n\
             schedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: queue-scorer}}, {{pluginRef: gate}}]\n\
             saturationDetector: {{pluginRef: gate}}\n"
        ));
        assert_eq!(profile_shape(&c, "p").0, ["gate"]);
        let d = detector_of(&c);
        let pending = crate::flowcontrol::PendingLoad { requests: 20, tokens: 0 };
        let cands = vec![Candidate::new(endpoint(1)), Candidate::new(endpoint(2))];
        // 20 pending over 30 + 10.
        assert_eq!(d.saturation_with_pending(&cands, Instant::now(), pending), 0.5);
    }

    #[test]
    fn detector_parameter_errors_name_the_plugin_and_field() {
        let text = format!(
            "{HEADER}plugins: [{{name: gate, type: concurrency-detector, parameters: {{concurrencyMode: hybrid}}}}]\n"
        );
        let e = load(&text, &Registry::with_builtins(), &ctx()).unwrap_err().to_string();
        assert_mentions(&e, &["\"gate\"", "concurrencyMode", "\"requests\" or \"tokens\""]);
        let text = format!(
            "{HEADER}plugins: [{{type: utilization-detector, parameters: {{kvCacheUtilThreshold: 0}}}}]\n"
        );
        let e = load(&text, &Registry::with_builtins(), &ctx()).unwrap_err().to_string();
        assert_mentions(&e, &["utilization-detector", "kvCacheUtilThreshold", "(0, 1]"]);
    }
}
