//! The defaulting rules of upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/config/loader/defaults.go.

use super::fakes::{ctx, registry};
use super::{load_err, load_ok, producer_names, profile_shape, HEADER};
use crate::config::{load_default, DataSourceConfig, ParserKind, DEFAULT_SCORER_WEIGHT};

#[test]
fn default_config_matches_section_5() {
    let c = load_default(&registry(), &ctx()).unwrap();
    assert_eq!(c.pipeline.profiles.len(), 1);
    let (filters, scorers, picker) = profile_shape(&c, "default");
    assert!(filters.is_empty());
    assert_eq!(
        scorers,
        vec![
            ("queue-scorer".to_string(), 2.0),
            ("kv-cache-utilization-scorer".to_string(), 2.0),
            ("prefix-cache-scorer".to_string(), 3.0)
        ]
    );
    assert_eq!(picker, "max-score-picker");
    assert_eq!(c.pipeline.handler.0.type_name, "single-profile-handler");
    assert_eq!(producer_names(&c), ["approx-prefix-cache-producer"]);
    assert_eq!(c.pipeline.pre_requests.len(), 1, "the prefix producer records prefixes after scheduling");
    assert_eq!(c.data_source, DataSourceConfig::default());
    assert_eq!(c.extractor_params, None);
    assert_eq!(c.parser, ParserKind::OpenAi);
    assert!(c.flow_control.is_none());
    assert_eq!(c.saturation_detector.as_deref(), Some("utilization-detector"));
    assert!(c.endpoints.is_empty() && c.objectives.is_empty() && c.model_rewrites.is_empty());
}

#[test]
fn no_configuration_means_the_default() {
    for text in ["", "   \n", "# just a comment\n", "---\n"] {
        let c = load_ok(text);
        let (_, scorers, _) = profile_shape(&c, "default");
        assert_eq!(scorers.len(), 3, "{text:?}");
        assert_eq!(producer_names(&c), ["approx-prefix-cache-producer"]);
    }
}

#[test]
fn single_profile_gets_single_profile_handler() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: queue-scorer\n"
    ));
    assert_eq!(c.pipeline.handler.0.name, "single-profile-handler");
    assert!(
        c.pipeline.plugin("single-profile-handler").is_some(),
        "auto-created plugins are in the pipeline"
    );
}

#[test]
fn declared_handler_runs_several_profiles() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: pd-profile-handler\n- type: queue-scorer\nschedulingProfiles:\n\
         - name: prefill\n  plugins: [{{pluginRef: queue-scorer}}]\n- name: decode\n  plugins: [{{pluginRef: queue-scorer}}]\n"
    ));
    assert_eq!(c.pipeline.handler.0.name, "pd-profile-handler");
    assert_eq!(c.pipeline.profiles.len(), 2);
    // One max-score-picker is created and shared by both profiles.
    let pickers = c.pipeline.plugins.iter().filter(|p| p.id.type_name == "max-score-picker").count();
    assert_eq!(pickers, 1);
    assert_eq!(profile_shape(&c, "decode").2, "max-score-picker");
}

#[test]
fn profile_without_picker_gets_first_declared_picker() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: queue-scorer\n- {{name: r, type: random-picker}}\n- type: max-score-picker\n\
         schedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: queue-scorer}}]\n"
    ));
    assert_eq!(profile_shape(&c, "p").2, "r");
}

#[test]
fn empty_profiles_default_to_every_filter_scorer_and_picker() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: header-based-testing-filter\n- type: queue-scorer\n- type: pd-profile-handler\n\
         - type: weighted-random-picker\n- type: lora-affinity-scorer\n- type: inert-plugin\nschedulingProfiles: []\n"
    ));
    assert_eq!(c.pipeline.profiles.len(), 1);
    let (filters, scorers, picker) = profile_shape(&c, "default");
    assert_eq!(filters, ["header-based-testing-filter"]);
    assert_eq!(scorers, [("queue-scorer".to_string(), 1.0), ("lora-affinity-scorer".to_string(), 1.0)]);
    assert_eq!(picker, "weighted-random-picker");
    // Without the key at all, the same.
    let c = load_ok(&format!("{HEADER}plugins:\n- type: queue-scorer\n"));
    assert_eq!(profile_shape(&c, "default").1, [("queue-scorer".to_string(), 1.0)]);
    assert_eq!(profile_shape(&c, "default").2, "max-score-picker");
}

#[test]
fn empty_profiles_with_two_pickers_is_an_error() {
    let e = load_err(&format!("{HEADER}plugins:\n- type: random-picker\n- type: max-score-picker\n"));
    super::assert_mentions(&e, &["two pickers", "random-picker", "max-score-picker"]);
}

#[test]
fn scorer_without_weight_gets_one_and_multi_role_plugins_fill_each_slot() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: queue-scorer\n- type: filter-scorer\nschedulingProfiles:\n- name: p\n  plugins:\n  \
         - pluginRef: queue-scorer\n  - pluginRef: filter-scorer\n    weight: 0.5\n"
    ));
    let (filters, scorers, _) = profile_shape(&c, "p");
    assert_eq!(filters, ["filter-scorer"]);
    assert_eq!(
        scorers,
        [("queue-scorer".to_string(), DEFAULT_SCORER_WEIGHT), ("filter-scorer".to_string(), 0.5)]
    );
}

#[test]
fn consumed_data_gets_default_producers() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: token-load-scorer\n- type: prefix-cache-scorer\nschedulingProfiles:\n- name: p\n  plugins:\n  \
         - pluginRef: token-load-scorer\n  - pluginRef: prefix-cache-scorer\n"
    ));
    assert_eq!(producer_names(&c), ["inflight-load-producer", "approx-prefix-cache-producer"]);
    assert_eq!(c.pipeline.response_hooks.len(), 1);
    assert_eq!(c.pipeline.endpoint_listeners.len(), 1);
    assert_eq!(c.pipeline.pre_requests.len(), 2);
}

#[test]
fn declared_producer_is_used_with_its_parameters() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: prefix-cache-scorer\n- name: prefix\n  type: approx-prefix-cache-producer\n  parameters:\n    \
         maxPrefixTokensToMatch: 40960\nschedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: prefix-cache-scorer}}]\n"
    ));
    assert_eq!(producer_names(&c), ["prefix"]);
}

#[test]
fn unreferenced_producers_and_hooks_still_run() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: inflight-load-producer\n- type: test-admitter\n- type: destination-endpoint-served-verifier\n\
         - type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: queue-scorer}}]\n"
    ));
    assert_eq!(producer_names(&c), ["inflight-load-producer"]);
    assert_eq!(c.pipeline.admitters.len(), 1);
    let hooks: Vec<&str> = c.pipeline.response_hooks.iter().map(|(id, _)| id.name.as_str()).collect();
    assert_eq!(hooks, ["inflight-load-producer", "destination-endpoint-served-verifier"]);
}

#[test]
fn producers_run_after_the_producers_of_what_they_consume() {
    // derived-producer consumes PrefixCacheMatch, so the auto-created prefix producer runs first.
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: derived-producer\n- type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: queue-scorer}}]\n"
    ));
    assert_eq!(producer_names(&c), ["approx-prefix-cache-producer", "derived-producer"]);
    let c = load_ok(&format!(
        "{HEADER}plugins:\n- type: derived-producer\n- type: approx-prefix-cache-producer\n- type: token-load-scorer\n\
         schedulingProfiles:\n- name: p\n  plugins: [{{pluginRef: token-load-scorer}}]\n"
    ));
    assert_eq!(producer_names(&c), ["approx-prefix-cache-producer", "derived-producer"]);
}

#[test]
fn producer_cycle_is_an_error() {
    let e = load_err(&format!(
        "{HEADER}plugins:\n- type: derived-producer\n- type: cyclic-producer\n- type: queue-scorer\n"
    ));
    super::assert_mentions(&e, &["cycle", "derived-producer", "cyclic-producer"]);
}

#[test]
fn empty_keys_mean_their_defaults() {
    // `key:` with no value is YAML null, which the Go decoder treats as absent.
    let c = load_ok(&format!(
        "{HEADER}featureGates:\nplugins:\n- type: queue-scorer\n  parameters:\nschedulingProfiles:\n"
    ));
    assert_eq!(profile_shape(&c, "default").1, [("queue-scorer".to_string(), 1.0)]);
}
