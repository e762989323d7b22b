//! Prefill/decode disaggregation through the director: llm-d's P/D guide configuration routes to a
//! decode pod and names a prefill pod in `x-prefiller-host-port`; client copies of the P/D headers never
//! go upstream; the decision counters count each path; `Prefer: if-available` gets 412 on a cold decode
//! pod; and a broken configuration is a startup error naming what is missing.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::config;
use crate::datastore::Endpoint;
use crate::scheduling::{FactoryContext, PluginMetrics, Registry};

const CHAT: &str = "/v1/chat/completions";
const GUIDE: &str = include_str!("../../config/pd-disaggregation.yaml");

/// A director over pods `10.0.0.<i+1>:8000` labelled with `roles` (`None`: unlabelled).
fn pd_director(yaml: &str, roles: &[Option<&str>]) -> (Director, Arc<MetricsRegistry>) {
    let endpoints = roles
        .iter()
        .enumerate()
        .map(|(i, role)| {
            let labels: BTreeMap<String, String> =
                role.map(|r| ("llm-d.ai/role".to_string(), r.to_string())).into_iter().collect();
            let addr = format!("10.0.0.{}:8000", i + 1).parse().expect("address");
            Endpoint::new(format!("pod-{}", i + 1), addr).with_labels(labels)
        })
        .collect();
    let options = DirectorOptions { parse_bodies: true, ..Default::default() };
    let (director, registry, _) = super::tests::director_over(Some(yaml), endpoints, options);
    (director, registry)
}

fn request(prompt: &str, headers: &[(&str, &str)]) -> IncomingRequest {
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": prompt}]});
    IncomingRequest {
        request_id: "r1".into(),
        headers: headers.iter().copied().collect(),
        path: CHAT.into(),
        body: body.to_string().into_bytes(),
        ..Default::default()
    }
}

/// The value of `name` on the exposition's line whose labels contain `label`.
fn counter(registry: &MetricsRegistry, name: &str, label: &str) -> u64 {
    registry
        .encode()
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn header<'a>(m: &'a RoutingMutation, name: &str) -> Option<&'a str> {
    m.set_headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

const FORGED: [(&str, &str); 4] = [
    ("x-prefiller-host-port", "169.254.169.254:80"),
    ("x-encoder-hosts-ports", "169.254.169.254:80"),
    ("x-kv-cache-source-host-port", "169.254.169.254:80"),
    ("x-data-parallel-host-port", "169.254.169.254:80"),
];

#[tokio::test]
async fn the_guide_config_routes_to_a_decode_pod_and_names_a_prefill_pod() {
    let (d, registry) =
        pd_director(GUIDE, &[Some("prefill"), Some("decode"), Some("prefill"), Some("decode")]);
    let routed = d.route(&request("hello", &FORGED)).await.expect("routed");
    let m = &routed.mutation;
    assert!(["10.0.0.2:8000", "10.0.0.4:8000"].contains(&m.destination.as_str()), "{}", m.destination);
    let prefiller = header(m, "x-prefiller-host-port").expect("prefill pod named");
    assert!(["10.0.0.1:8000", "10.0.0.3:8000"].contains(&prefiller), "{prefiller}");
    // The forged prefiller is overwritten (set replaces every copy); the other three are removed.
    let mut removed = m.remove_headers.clone();
    removed.sort();
    assert_eq!(
        removed,
        ["x-data-parallel-host-port", "x-encoder-hosts-ports", "x-kv-cache-source-host-port"]
    );
    assert_eq!(routed.active.info.prefill_endpoint.as_ref().map(|e| e.host_port.as_str()), Some(prefiller));
    assert_eq!(counter(&registry, "llm_d_epp_pd_decision_total", "decision_type=\"prefill-decode\""), 1);
    assert_eq!(counter(&registry, "llm_d_epp_disagg_decision_total", "decision_type=\"prefill-decode\""), 1);
}

#[tokio::test]
async fn without_prefill_pods_the_decode_pod_prefills_and_forged_headers_still_go() {
    let (d, registry) = pd_director(GUIDE, &[Some("decode"), None]);
    let routed = d.route(&request("hello", &FORGED)).await.expect("routed");
    assert_eq!(header(&routed.mutation, "x-prefiller-host-port"), None);
    assert_eq!(routed.mutation.remove_headers.len(), 4, "{:?}", routed.mutation.remove_headers);
    assert!(routed.active.info.prefill_endpoint.is_none());
    assert_eq!(counter(&registry, "llm_d_epp_pd_decision_total", "decision_type=\"decode-only\""), 1);
}

#[tokio::test]
async fn an_aggregated_config_removes_forged_pd_headers_too() {
    let (d, _) = pd_director(config::DEFAULT_CONFIG_YAML, &[None, None]);
    let routed = d.route(&request("hello", &FORGED)).await.expect("routed");
    assert_eq!(routed.mutation.remove_headers.len(), 4);
    assert!(routed.mutation.set_headers.iter().all(|(k, _)| !k.starts_with("x-prefiller")));
}

fn prefix_decider_config(non_cached_tokens: u64) -> String {
    GUIDE
        .replace(
            "- type: always-disagg-pd-decider",
            &format!(
                "- type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: {non_cached_tokens}"
            ),
        )
        .replace("prefill: always-disagg-pd-decider", "prefill: prefix-based-pd-decider")
}

#[tokio::test]
async fn the_prefix_based_decider_keeps_short_prompts_local() {
    let (d, registry) = pd_director(&prefix_decider_config(256), &[Some("prefill"), Some("decode")]);
    let short = d.route(&request("hi", &[])).await.expect("routed");
    assert_eq!(header(&short.mutation, "x-prefiller-host-port"), None);
    let long = d.route(&request(&"a long prompt ".repeat(400), &[])).await.expect("routed");
    assert_eq!(header(&long.mutation, "x-prefiller-host-port"), Some("10.0.0.1:8000"));
    assert_eq!(long.mutation.destination, "10.0.0.2:8000");
    assert_eq!(counter(&registry, "llm_d_epp_pd_decision_total", "decode-only"), 1);
    assert_eq!(counter(&registry, "llm_d_epp_pd_decision_total", "prefill-decode"), 1);
}

#[tokio::test]
async fn prefer_if_available_needs_the_prompt_cached_on_the_decode_pod() {
    let (d, _) = pd_director(GUIDE, &[Some("prefill"), Some("decode")]);
    let prompt = "the same long system prompt ".repeat(50);
    let prefer = [("prefer", "respond-async, If-Available;x=1")];
    let (err, _) = d.route(&request(&prompt, &prefer)).await.expect_err("cold decode pod");
    assert_eq!(
        (err.code.http_status(), err.message.as_str()),
        (412, "no decode worker has the requested KV cache")
    );
    // Served once without the preference, the decode pod holds the prompt.
    drop(d.route(&request(&prompt, &[])).await.expect("routed"));
    let warm = d.route(&request(&prompt, &prefer)).await.expect("warm decode pod");
    assert_eq!(warm.mutation.destination, "10.0.0.2:8000");
}

#[tokio::test]
async fn an_interleaved_pod_picked_for_both_stages_gets_no_prefiller_header() {
    let (d, registry) = pd_director(GUIDE, &[Some("prefill-decode")]);
    let routed = d.route(&request("hello", &[])).await.expect("routed");
    assert_eq!(routed.mutation.destination, "10.0.0.1:8000");
    assert_eq!(header(&routed.mutation, "x-prefiller-host-port"), None);
    assert_eq!(counter(&registry, "llm_d_epp_pd_decision_total", "decode-only"), 1);
}

#[tokio::test]
async fn prefill_first_runs_the_prefill_profile_without_a_decider() {
    let yaml = GUIDE
        .replace("    deciders:\n      prefill: always-disagg-pd-decider", "    stageOrder: prefill-first");
    let (d, _) = pd_director(&yaml, &[Some("prefill"), Some("decode")]);
    let routed = d.route(&request("hello", &[])).await.expect("routed");
    assert_eq!(routed.mutation.destination, "10.0.0.2:8000");
    assert_eq!(header(&routed.mutation, "x-prefiller-host-port"), Some("10.0.0.1:8000"));
}

#[test]
fn a_broken_pd_config_is_a_startup_error_naming_what_is_missing() {
    let load = |yaml: &str| {
        let ctx = FactoryContext::new(Arc::new(Datastore::new("t")), PluginMetrics::detached());
        config::load(yaml, &Registry::with_builtins(), &ctx).expect_err("rejected").to_string()
    };
    let e = load(&GUIDE.replace("prefill: always-disagg-pd-decider", "prefill: no-such-decider"));
    assert!(e.contains("deciders.prefill") && e.contains("no-such-decider"), "{e}");
    let e = load(&GUIDE.replace("prefill: always-disagg-pd-decider", "prefill: decode-filter"));
    assert!(e.contains("is not a decider"), "{e}");
    let e = load(&GUIDE.replace("- name: decode\n", "- name: decoding\n"));
    assert!(e.contains("decode profile \"decode\""), "{e}");
    let e = load(&GUIDE.replace("- name: prefill\n", "- name: prefilling\n"));
    assert!(e.contains("no scheduling profile is named \"prefill\""), "{e}");
}

#[tokio::test]
async fn the_deprecated_pd_profile_handler_and_header_handler_still_route_pd() {
    let yaml = GUIDE
        .replace(
            "- type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: always-disagg-pd-decider",
            "- type: pd-profile-handler\n  parameters:\n    deciderPluginName: always-disagg-pd-decider\n- type: prefill-header-handler",
        );
    assert!(yaml.contains("pd-profile-handler"), "the substitution applied");
    let (d, registry) = pd_director(&yaml, &[Some("prefill"), Some("decode")]);
    let routed = d.route(&request("hello", &[])).await.expect("routed");
    assert_eq!(header(&routed.mutation, "x-prefiller-host-port"), Some("10.0.0.1:8000"));
    let label = "plugin_type=\"pd-profile-handler\"";
    assert_eq!(counter(&registry, "llm_d_epp_pd_decision_total", label), 1);
}
