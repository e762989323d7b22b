//! Every rejection names what is wrong and where.

use super::fakes::ctx;
use super::{assert_mentions, load_err, load_ok, HEADER};
use crate::config::{load, load_file, ConfigError};
use crate::scheduling::Registry;

const PROFILE_Q: &str = "schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: queue-scorer}]\n";

#[test]
fn both_api_versions_are_accepted_and_others_rejected() {
    for api in ["inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1"] {
        load_ok(&format!(
            "apiVersion: {api}\nkind: EndpointPickerConfig\nplugins: [{{type: queue-scorer}}]\n"
        ));
    }
    load_ok("kind: EndpointPickerConfig\nplugins: [{type: queue-scorer}]\n");
    let e = load_err("apiVersion: config.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n");
    assert_mentions(&e, &["apiVersion", "config.x-k8s.io/v1alpha1"]);
    let e = load_err("apiVersion: llm-d.ai/v1alpha1\nkind: InferencePool\n");
    assert_mentions(&e, &["kind", "InferencePool"]);
}

#[test]
fn top_level_is_strict() {
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\ndata:\n  sources: [{{pluginRef: metrics-data-source}}]\n"
    ));
    assert_mentions(&e, &["unknown field `data`", "dataLayer"]);
    let e = load_err(&format!("{HEADER}plugins:\n- type: queue-scorer\n  params: {{}}\n"));
    assert_mentions(&e, &["plugins[0]", "`params`"]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: queue-scorer\n    weigth: 2\n"
    ));
    assert_mentions(&e, &["schedulingProfiles[0].plugins[0]", "unknown field `weigth`"]);
}

#[test]
fn type_errors_carry_the_yaml_path() {
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}, {{type: kv-cache-utilization-scorer}}]\nschedulingProfiles:\n- name: p\n  plugins:\n  \
         - pluginRef: queue-scorer\n  - pluginRef: kv-cache-utilization-scorer\n    weight: heavy\n"
    ));
    assert_mentions(&e, &["config: schedulingProfiles[0].plugins[1].weight: invalid type"]);
    assert_eq!(e.matches("schedulingProfiles[0]").count(), 1, "path printed once: {e}");
}

#[test]
fn feature_gates() {
    let c = load_ok(&format!("{HEADER}featureGates: [dataLayer, enableLegacyMetrics]\n"));
    assert!(
        c.feature_gates.data_layer && c.feature_gates.enable_legacy_metrics && !c.feature_gates.flow_control
    );
    let e = load_err(&format!("{HEADER}featureGates: [flowControl, fastPath]\n"));
    assert_mentions(&e, &["featureGates[1]", "fastPath"]);
}

#[test]
fn duplicate_plugin_names() {
    let e = load_err(&format!(
        "{HEADER}plugins:\n- type: queue-scorer\n- {{name: queue-scorer, type: lora-affinity-scorer}}\n"
    ));
    assert_mentions(&e, &["plugins[1].name", "duplicate", "queue-scorer"]);
}

#[test]
fn unknown_type_names_plugin_type_and_known_types() {
    let text = format!("{HEADER}plugins:\n- type: queue-scorer\n- {{name: mine, type: qeue-scorer}}\n");
    let err = load(&text, &super::fakes::registry(), &ctx()).unwrap_err();
    assert!(super::is_unknown_type(&err));
    assert_mentions(
        &err.to_string(),
        &["plugins[1]", "\"mine\"", "\"qeue-scorer\"", "queue-scorer", "openai-parser"],
    );
}

#[test]
fn strict_plugin_parameters_name_plugin_and_field() {
    let e = load_err(&format!(
        "{HEADER}plugins:\n- {{name: pick, type: max-score-picker, parameters: {{maxNumOfEndpoint: 2}}}}\n"
    ));
    assert_mentions(&e, &["\"pick\"", "max-score-picker", "maxNumOfEndpoint"]);
    let e = load_err(&format!(
        "{HEADER}plugins:\n- type: utilization-detector\n  parameters: {{queueDepthThreshold: five}}\n"
    ));
    assert_mentions(&e, &["utilization-detector", "queueDepthThreshold"]);
}

#[test]
fn profile_reference_errors() {
    let e = load_err(&format!("{HEADER}plugins: [{{type: queue-scorer}}]\nschedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: kv}}]\n"));
    assert_mentions(
        &e,
        &["schedulingProfiles[0].plugins[0].pluginRef", "profile \"p\"", "unknown plugin \"kv\""],
    );
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}, {{type: single-profile-handler}}]\nschedulingProfiles:\n- name: p\n  plugins:\n  \
         - pluginRef: queue-scorer\n  - pluginRef: single-profile-handler\n"
    ));
    assert_mentions(
        &e,
        &["plugins[1].pluginRef", "single-profile-handler", "not a filter, scorer or picker"],
    );
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: metrics-data-source}}]\nschedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: metrics-data-source}}]\n"
    ));
    assert_mentions(&e, &["data source", "not a filter, scorer or picker"]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\n{PROFILE_Q}- name: p\n  plugins: []\n"
    ));
    assert_mentions(&e, &["schedulingProfiles[1].name", "duplicate profile name"]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\nschedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: queue-scorer}}, {{pluginRef: queue-scorer}}]\n"
    ));
    assert_mentions(&e, &["plugins[1].pluginRef", "twice"]);
}

#[test]
fn weight_errors() {
    let base = format!("{HEADER}plugins: [{{type: queue-scorer}}, {{type: header-based-testing-filter}}]\nschedulingProfiles:\n- name: p\n  plugins:\n");
    let e = load_err(&format!("{base}  - {{pluginRef: header-based-testing-filter, weight: 2}}\n"));
    assert_mentions(&e, &["plugins[0].weight", "header-based-testing-filter", "not a scorer"]);
    for bad in ["-1", ".nan", ".inf"] {
        let e = load_err(&format!("{base}  - {{pluginRef: queue-scorer, weight: {bad}}}\n"));
        assert_mentions(&e, &["plugins[0].weight", "queue-scorer", "finite number"]);
    }
    load_ok(&format!("{base}  - {{pluginRef: queue-scorer, weight: 0}}\n"));
}

#[test]
fn two_pickers_in_a_profile() {
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: random-picker}}, {{type: max-score-picker}}]\nschedulingProfiles:\n- name: p\n  plugins:\n  \
         - pluginRef: random-picker\n  - pluginRef: max-score-picker\n"
    ));
    assert_mentions(&e, &["profile \"p\"", "two pickers", "random-picker", "max-score-picker"]);
}

#[test]
fn profile_handler_errors() {
    let two_profiles = "schedulingProfiles:\n- name: a\n  plugins: []\n- name: b\n  plugins: []\n";
    let e = load_err(&format!("{HEADER}plugins: [{{type: queue-scorer}}]\n{two_profiles}"));
    assert_mentions(&e, &["2 scheduling profiles need a profile handler"]);
    let e = load_err(&format!("{HEADER}plugins: [{{type: single-profile-handler}}]\n{two_profiles}"));
    assert_mentions(&e, &["single-profile-handler", "2 are configured"]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: single-profile-handler}}, {{type: pd-profile-handler}}]\n{two_profiles}"
    ));
    assert_mentions(&e, &["only one profile handler", "single-profile-handler, pd-profile-handler"]);
}

#[test]
fn auto_created_plugin_name_collision() {
    let e = load_err(&format!("{HEADER}plugins: [{{name: max-score-picker, type: queue-scorer}}]\n"));
    assert_mentions(&e, &["no picker", "\"max-score-picker\"", "taken by a queue-scorer"]);
}

#[test]
fn default_producer_missing_from_registry() {
    let mut registry = Registry::new();
    for t in ["prefix-cache-scorer", "max-score-picker", "single-profile-handler"] {
        registry.register(t, super::fakes::registry().get(t).unwrap());
    }
    let text = format!("{HEADER}plugins: [{{type: prefix-cache-scorer}}]\n");
    let e = load(&text, &registry, &ctx()).unwrap_err().to_string();
    assert_mentions(
        &e,
        &["prefix-cache-scorer", "PrefixCacheMatch", "approx-prefix-cache-producer", "not registered"],
    );
}

#[test]
fn saturation_detector_reference() {
    let c = load_ok(&format!(
        "{HEADER}plugins: [{{name: det, type: utilization-detector}}, {{type: queue-scorer}}]\n{PROFILE_Q}saturationDetector: {{pluginRef: det}}\n"
    ));
    assert_eq!(c.saturation_detector.as_deref(), Some("det"));
    assert!(c.pipeline.plugin("det").is_some());
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: queue-scorer}}]\nsaturationDetector: {{pluginRef: det}}\n"
    ));
    assert_mentions(&e, &["saturationDetector.pluginRef", "unknown plugin \"det\""]);
    let e = load_err(&format!(
        "{HEADER}plugins: [{{type: openai-parser}}]\nsaturationDetector: {{pluginRef: openai-parser}}\n"
    ));
    assert_mentions(&e, &["saturationDetector.pluginRef", "parser", "not a saturation detector"]);
}

#[test]
fn unsupported_upstream_types() {
    let e = load_err(&format!("{HEADER}plugins: [{{type: vllmgrpc-parser}}]\n"));
    assert_mentions(&e, &["plugins[0].type", "vllmgrpc-parser", "not supported"]);
}

#[test]
fn load_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("epp.yaml");
    std::fs::write(&path, format!("{HEADER}plugins: [{{type: nope}}]\n")).unwrap();
    let e = load_file(&path, &super::fakes::registry(), &ctx()).unwrap_err();
    assert!(matches!(e, ConfigError::InFile { .. }));
    assert_mentions(&e.to_string(), &["epp.yaml", "nope"]);
    let e = load_file(dir.path().join("missing.yaml"), &super::fakes::registry(), &ctx()).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert_mentions(&e.to_string(), &["missing.yaml"]);
}
