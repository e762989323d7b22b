//! The pod → endpoint rules, one case each.

use super::*;
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn info(name: &str, ip: &str, ready: bool) -> PodInfo {
    PodInfo {
        name: name.into(),
        namespace: "ns".into(),
        ip: ip.parse().ok(),
        ready,
        labels: labels(&[("app", "vllm"), ("llm-d.ai/role", "decode")]),
        active_ports: None,
    }
}

fn pool(ports: &str) -> PoolSpec {
    PoolSpec::standalone("app=vllm", ports).unwrap()
}

fn names_and_addrs(eps: &[DesiredEndpoint]) -> Vec<(String, String)> {
    eps.iter().map(|e| (e.name.clone(), e.addr.to_string())).collect()
}

fn pod(ready: &str, deleting: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            deletion_timestamp: deleting.then(|| Time(Default::default())),
            annotations: Some([(ACTIVE_PORTS_ANNOTATION.to_string(), "8001".to_string())].into()),
            ..Default::default()
        },
        status: Some(PodStatus {
            pod_ip: Some("10.0.0.5".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn readiness_rule() {
    assert!(is_ready(&pod("True", false)));
    assert!(!is_ready(&pod("False", false)));
    assert!(!is_ready(&pod("True", true)), "a pod being deleted is not ready");
    assert!(!is_ready(&Pod::default()), "no conditions: not ready");
    let info = PodInfo::from_pod(&pod("True", false)).unwrap();
    assert_eq!(info.ip, Some("10.0.0.5".parse().unwrap()));
    assert_eq!(info.active_ports.as_deref(), Some("8001"));
    assert_eq!(info.namespace, "ns");
}

#[test]
fn one_endpoint_per_target_port_with_rank_names() {
    let eps = pod_endpoints(&pool("8000,8001"), &info("vllm-0", "10.0.0.1", true), None);
    assert_eq!(
        names_and_addrs(&eps),
        [("vllm-0-rank-0".into(), "10.0.0.1:8000".into()), ("vllm-0-rank-1".into(), "10.0.0.1:8001".into())]
    );
    assert_eq!(eps[0].labels.get("llm-d.ai/role").map(String::as_str), Some("decode"));
    assert_eq!(eps[1].metrics_addr, eps[1].addr, "each rank serves its own /metrics");
}

#[test]
fn unready_unselected_or_ipless_pods_have_no_endpoints() {
    let p = pool("8000");
    assert!(pod_endpoints(&p, &info("a", "10.0.0.1", false), None).is_empty());
    assert!(pod_endpoints(&p, &info("a", "", true), None).is_empty());
    let mut other = info("a", "10.0.0.1", true);
    other.labels = labels(&[("app", "other")]);
    assert!(pod_endpoints(&p, &other, None).is_empty());
}

#[test]
fn active_ports_annotation_keeps_rank_positions() {
    let p = pool("8000,8001,8002");
    assert_eq!(active_ports(&p, Some(" 8002 , 8000,9999,-1,x")), vec![(0, 8000), (2, 8002)]);
    assert_eq!(active_ports(&p, None).len(), 3);
    let mut pod = info("vllm-0", "10.0.0.1", true);
    pod.active_ports = Some("8001".into());
    let eps = pod_endpoints(&p, &pod, None);
    assert_eq!(names_and_addrs(&eps), [("vllm-0-rank-1".into(), "10.0.0.1:8001".into())]);
    pod.active_ports = Some("7000".into());
    assert!(pod_endpoints(&p, &pod, None).is_empty(), "no active port: no endpoint");
}

#[test]
fn metrics_port_override_only_for_single_port_pools() {
    let single = pod_endpoints(&pool("8000"), &info("a", "10.0.0.1", true), Some(9100));
    assert_eq!(single[0].metrics_addr.to_string(), "10.0.0.1:9100");
    assert_eq!(single[0].addr.to_string(), "10.0.0.1:8000");
    let multi = pod_endpoints(&pool("8000,8001"), &info("a", "10.0.0.1", true), Some(9100));
    assert_eq!(multi[1].metrics_addr.to_string(), "10.0.0.1:8001");
}

#[test]
fn ipv6_pods() {
    let eps = pod_endpoints(&pool("8000"), &info("a", "fd00::1", true), None);
    assert_eq!(crate::datastore::format_host_port(eps[0].addr), "[fd00::1]:8000");
}

#[test]
fn pool_endpoints_are_sorted_deduplicated_and_empty_without_a_pool() {
    let pods = [info("b", "10.0.0.2", true), info("a", "10.0.0.1", true), info("c", "10.0.0.1", true)];
    let eps = desired_endpoints(Some(&pool("8000")), &pods, None);
    assert_eq!(
        names_and_addrs(&eps),
        [("a-rank-0".into(), "10.0.0.1:8000".into()), ("b-rank-0".into(), "10.0.0.2:8000".into())]
    );
    assert!(desired_endpoints(None, &pods, None).is_empty());
}
