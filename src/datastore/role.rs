//! The stages of disaggregated serving a pod takes part in, from its `llm-d.ai/role` label
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go).
//!
//! A pod without the label, or with a value epp does not know, serves every stage of a request locally:
//! it is a decode pod (where llm-d's `decode-filter` keeps unlabelled pods) and neither a prefill nor an
//! encode pod. Interleaved roles (`prefill-decode`, `encode-prefill-decode`, …) count for each stage they
//! name. Where llm-d's `decode-filter` leaves out `encode-decode`, epp keeps it: the role names decode.

use super::Endpoint;

/// The pod label naming a pod's stages.
pub const ROLE_LABEL: &str = "llm-d.ai/role";

/// Which stages a pod serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodRole {
    pub encode: bool,
    pub prefill: bool,
    pub decode: bool,
}

impl PodRole {
    /// The stages named by a role label value; `None` for a value that names no known role.
    pub fn parse(value: &str) -> Option<Self> {
        let (encode, prefill, decode) = match value {
            "encode" => (true, false, false),
            "prefill" => (false, true, false),
            "decode" => (false, false, true),
            "encode-prefill" => (true, true, false),
            "encode-decode" => (true, false, true),
            // `both` is llm-d's deprecated spelling of prefill-decode.
            "prefill-decode" | "both" => (false, true, true),
            "encode-prefill-decode" => (true, true, true),
            _ => return None,
        };
        Some(Self { encode, prefill, decode })
    }

    /// A pod's role: from its label, or a plain (aggregated) decode pod when it has none that epp knows.
    pub fn of(endpoint: &Endpoint) -> Self {
        endpoint.labels.get(ROLE_LABEL).and_then(|v| Self::parse(v)).unwrap_or(Self::AGGREGATED)
    }

    /// Whether the pod carries a role label at all (known or not).
    pub fn labelled(endpoint: &Endpoint) -> bool {
        endpoint.labels.contains_key(ROLE_LABEL)
    }

    /// An unlabelled pod: it serves whole requests, so it counts as a decode pod.
    pub const AGGREGATED: Self = Self { encode: false, prefill: false, decode: true };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pod(role: Option<&str>) -> Endpoint {
        let labels: BTreeMap<String, String> =
            role.map(|r| (ROLE_LABEL.to_string(), r.to_string())).into_iter().collect();
        Endpoint::new("p", "10.0.0.1:8000".parse().unwrap()).with_labels(labels)
    }

    #[test]
    fn interleaved_roles_count_for_each_stage() {
        let r = PodRole::of(&pod(Some("prefill-decode")));
        assert!(r.prefill && r.decode && !r.encode);
        assert_eq!(PodRole::of(&pod(Some("both"))), r);
        let r = PodRole::of(&pod(Some("encode-prefill-decode")));
        assert!(r.encode && r.prefill && r.decode);
        assert!(PodRole::of(&pod(Some("encode-decode"))).decode);
    }

    #[test]
    fn unlabelled_and_unknown_pods_are_aggregated() {
        assert_eq!(PodRole::of(&pod(None)), PodRole::AGGREGATED);
        assert_eq!(PodRole::of(&pod(Some("Prefill"))), PodRole::AGGREGATED);
        assert!(!PodRole::labelled(&pod(None)));
        assert!(PodRole::labelled(&pod(Some("x"))));
    }
}
