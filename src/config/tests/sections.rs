//! The non-scheduling sections: data layer, parser, flow control and the epp extensions.

use std::time::Duration;

use super::{assert_mentions, load_err, load_ok, HEADER};
use crate::config::{
    DataSourceConfig, FairnessPolicy, MetricsScheme, OrderingPolicy, ParserKind, PriorityBand,
    DEFAULT_BAND_MAX_BYTES,
};

const Q: &str = "- type: queue-scorer\n";

#[test]
fn metrics_data_source_parameters() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n{Q}- type: metrics-data-source\n  parameters: {{scheme: https, path: stats, insecureSkipVerify: false}}\n"
    ));
    let want = DataSourceConfig {
        scheme: MetricsScheme::Https,
        path: "/stats".into(),
        insecure_skip_verify: false,
        name_filter: true,
    };
    assert_eq!(c.data_source, want);
    let c = load_ok(&format!(
        "{HEADER}plugins:\n{Q}- type: metrics-data-source\n  parameters: {{nameFilter: false}}\n"
    ));
    assert!(!c.data_source.name_filter);
    let e = load_err(&format!(
        "{HEADER}plugins:\n- {{type: metrics-data-source, parameters: {{nameFilter: sometimes}}}}\n"
    ));
    assert_mentions(&e, &["metrics-data-source", "sometimes"]);
    let e = load_err(&format!(
        "{HEADER}plugins:\n- {{name: src, type: metrics-data-source, parameters: {{scheme: ftp}}}}\n"
    ));
    assert_mentions(&e, &["\"src\"", "metrics-data-source", "scheme", "ftp"]);
    let e = load_err(&format!(
        "{HEADER}plugins:\n- {{type: metrics-data-source, parameters: {{insecure: true}}}}\n"
    ));
    assert_mentions(&e, &["metrics-data-source", "insecure"]);
}

#[test]
fn data_layer_section_selects_source_and_extractor() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n{Q}- {{name: src, type: metrics-data-source, parameters: {{path: /m}}}}\n\
         - name: ext\n  type: core-metrics-extractor\n  parameters:\n    defaultEngine: sglang\n    engineLabelKey: engine\n\
         dataLayer:\n  sources:\n  - pluginRef: src\n    extractors: [{{pluginRef: ext}}]\n"
    ));
    assert_eq!(c.data_source.path, "/m");
    let params = c.extractor_params.expect("extractor params kept");
    assert_eq!(params["defaultEngine"], "sglang");
    assert_eq!(params["engineLabelKey"], "engine");
    // Without a dataLayer section the declared ones are used.
    let c = load_ok(&format!(
        "{HEADER}plugins:\n{Q}- type: core-metrics-extractor\n  parameters: {{defaultEngine: vllm}}\n"
    ));
    assert_eq!(c.extractor_params.unwrap()["defaultEngine"], "vllm");
}

#[test]
fn data_layer_reference_errors() {
    let e = load_err(&format!(
        "{HEADER}plugins:\n{Q}dataLayer:\n  sources: [{{pluginRef: src, extractors: []}}]\n"
    ));
    assert_mentions(&e, &["dataLayer.sources[0].pluginRef", "unknown plugin \"src\""]);
    let e = load_err(&format!(
        "{HEADER}plugins:\n{Q}- type: metrics-data-source\ndataLayer:\n  sources: [{{pluginRef: metrics-data-source, extractors: [{{pluginRef: queue-scorer}}]}}]\n"
    ));
    assert_mentions(&e, &["extractors[0].pluginRef", "queue-scorer", "not a metrics extractor"]);
    let e = load_err(&format!("{HEADER}plugins:\n- {{type: core-metrics-extractor, parameters: [1]}}\n"));
    assert_mentions(&e, &["core-metrics-extractor", "mapping"]);
    let e = load_err(&format!("{HEADER}plugins:\n- {{name: a, type: metrics-data-source}}\n- {{name: b, type: metrics-data-source}}\n"));
    assert_mentions(&e, &["dataLayer", "several"]);
}

#[test]
fn parser_selection() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n{Q}- type: passthrough-parser\nparser: {{pluginRef: passthrough-parser}}\n"
    ));
    assert_eq!(c.parser, ParserKind::Passthrough);
    let c = load_ok(&format!("{HEADER}plugins:\n{Q}parser: {{pluginRef: openai-parser}}\n"));
    assert_eq!(c.parser, ParserKind::OpenAi, "the default parser need not be declared");
    let e = load_err(&format!("{HEADER}plugins:\n{Q}parser: {{pluginRef: queue-scorer}}\n"));
    assert_mentions(&e, &["parser.pluginRef", "queue-scorer", "not a parser"]);
    let e = load_err(&format!("{HEADER}plugins:\n- {{type: openai-parser, parameters: {{strict: true}}}}\n"));
    assert_mentions(&e, &["openai-parser", "strict"]);
}

const FLOW_CONTROL: &str = "flowControl:
  maxBytes: 10Gi
  maxRequests: 5000
  defaultRequestTTL: 60s
  defaultPriorityBand: {maxBytes: 1G, maxRequests: 500, fairnessPolicyRef: rr}
  priorityBands:
  - {priority: 100, maxBytes: 5Gi, maxRequests: 50, orderingPolicyRef: edf-ordering-policy,
     fairnessPolicyRef: global-strict-fairness-policy}
  - {priority: -1}
  usageLimitPolicyPluginRef: limit
";

const POLICIES: &str = "- {name: rr, type: round-robin-fairness-policy}
- type: edf-ordering-policy
- {name: limit, type: static-usage-limit-policy, parameters: {threshold: 0.9}}
";

#[test]
fn flow_control_block_is_typed_and_resolved() {
    let c = load_ok(&format!("{HEADER}featureGates: [flowControl]\nplugins:\n{Q}{POLICIES}{FLOW_CONTROL}"));
    let fc = c.flow_control.expect("gate on");
    assert_eq!(fc.max_bytes, 10 << 30);
    assert_eq!(fc.max_requests, 5000);
    assert_eq!(fc.default_request_ttl, Some(Duration::from_secs(60)));
    assert_eq!(
        fc.default_priority_band,
        PriorityBand {
            max_bytes: 1_000_000_000,
            max_requests: 500,
            ordering: OrderingPolicy::Fcfs,
            fairness: FairnessPolicy::RoundRobin
        }
    );
    assert_eq!(
        fc.priority_bands[&100],
        PriorityBand {
            max_bytes: 5 << 30,
            max_requests: 50,
            ordering: OrderingPolicy::Edf,
            fairness: FairnessPolicy::GlobalStrict
        }
    );
    assert_eq!(fc.priority_bands[&-1], PriorityBand::default());
    assert_eq!(fc.priority_bands[&-1].max_bytes, DEFAULT_BAND_MAX_BYTES);
    assert_eq!(fc.usage_limit.threshold, 0.9);
    assert!(c.pipeline.plugin("rr").is_none(), "policies are not scheduling plugins");
}

#[test]
fn flow_control_gate_and_block() {
    // The gate alone: all defaults.
    let c = load_ok(&format!("{HEADER}featureGates: [flowControl]\nplugins:\n{Q}"));
    let fc = c.flow_control.unwrap();
    assert_eq!((fc.max_bytes, fc.max_requests, fc.default_request_ttl), (0, 0, None));
    assert_eq!(fc.usage_limit.threshold, 1.0);
    // The block without the gate is validated but not enabled.
    let c = load_ok(&format!("{HEADER}plugins:\n{Q}{POLICIES}{FLOW_CONTROL}"));
    assert!(c.flow_control.is_none());
    let e = load_err(&format!("{HEADER}plugins:\n{Q}flowControl: {{maxBytes: 10GB}}\n"));
    assert_mentions(&e, &["flowControl.maxBytes", "10GB"]);
    // Durations and zero TTL.
    let c =
        load_ok(&format!("{HEADER}featureGates: [flowControl]\nflowControl: {{defaultRequestTTL: 200ms}}\n"));
    assert_eq!(c.flow_control.unwrap().default_request_ttl, Some(Duration::from_millis(200)));
    let c = load_ok(&format!(
        "{HEADER}featureGates: [flowControl]\nflowControl: {{defaultRequestTTL: 0s, maxBytes: 0}}\n"
    ));
    assert_eq!(c.flow_control.unwrap().default_request_ttl, None);
}

#[test]
fn flow_control_errors() {
    let gate = format!("{HEADER}featureGates: [flowControl]\nplugins:\n{Q}");
    for (block, parts) in [
        ("flowControl: {maxRequest: 5}", &["flowControl.maxRequest", "unknown field"][..]),
        ("flowControl: {defaultRequestTTL: 60}", &["flowControl.defaultRequestTTL", "no unit"]),
        ("flowControl: {defaultRequestTTL: soon}", &["flowControl.defaultRequestTTL", "soon"]),
        ("flowControl: {priorityBands: [{maxBytes: 1Gi}]}", &["priorityBands[0].priority", "required"]),
        (
            "flowControl: {priorityBands: [{priority: 1}, {priority: 1}]}",
            &["priorityBands[1].priority", "twice"],
        ),
        (
            "flowControl: {priorityBands: [{priority: 1, fairnessPolicyRef: round-robin-fairness-policy}]}",
            &["priorityBands[0].fairnessPolicyRef", "unknown plugin \"round-robin-fairness-policy\""],
        ),
        (
            "flowControl: {defaultPriorityBand: {orderingPolicyRef: queue-scorer}}",
            &["defaultPriorityBand.orderingPolicyRef", "not an ordering policy"],
        ),
        ("flowControl: {usageLimitPolicyPluginRef: nope}", &["usageLimitPolicyPluginRef", "nope"]),
    ] {
        let e = load_err(&format!("{gate}{block}\n"));
        assert_mentions(&e, parts);
    }
    let e =
        load_err(&format!("{gate}- {{type: static-usage-limit-policy, parameters: {{threshold: -1}}}}\n"));
    assert_mentions(&e, &["static-usage-limit-policy", "threshold"]);
}

#[test]
fn epp_extensions_are_loaded() {
    let c = load_ok(&format!(
        "{HEADER}plugins:\n{Q}endpoints:\n- {{address: 10.0.0.1:8000, labels: {{pool: a}}}}\n- {{address: 10.0.0.2:8000, name: b}}\n\
         objectives:\n- {{name: critical, priority: 10}}\nmodelRewrites:\n- name: r\n  matchModel: llama\n  targets:\n  \
         - {{model: llama-a, weight: 3}}\n  - {{model: llama-b, weight: 1}}\ntokenEstimator: {{charactersPerToken: 3.0, outputRatio: 2.0}}\n"
    ));
    assert_eq!(c.endpoints.len(), 2);
    assert_eq!(c.endpoints[1].name, "b");
    assert_eq!(c.objectives["critical"], 10);
    assert_eq!(c.model_rewrites[0].targets[0].weight, 3.0);
    assert_eq!((c.token_estimator.characters_per_token, c.token_estimator.output_ratio), (3.0, 2.0));
    let e = load_err(&format!("{HEADER}endpoints:\n- {{address: 10.0.0.1:8000, port: 1}}\n"));
    assert_mentions(&e, &["endpoints[0]", "port"]);
}
