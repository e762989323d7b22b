//! What a pool is made of: the pod selector and the target ports, read from an InferencePool object
//! (v1, or the older v1alpha2 of `inference.networking.x-k8s.io`) or built from the standalone flags.
//!
//! Plain functions over JSON and strings, so every rule is unit-tested without an API server. Rules from
//! `kubernetes-sigs/gateway-api-inference-extension:api/v1/inferencepool_types.go` (selector
//! `matchLabels`, 1–8 unique target ports), `…:apix/v1alpha2/inferencepool_conversion.go` (a v1alpha2
//! `selector` map and one `targetPortNumber`) and `…:pkg/epp/server/options.go` (standalone flags).

use std::collections::BTreeMap;

use serde_json::Value;

/// The InferencePool API group of GIE v1 (the default `--pool-group`).
pub const GROUP_V1: &str = "inference.networking.k8s.io";
/// The older experimental group; its InferencePool is served as `v1alpha2`.
pub const GROUP_X_K8S: &str = "inference.networking.x-k8s.io";
/// At most this many target ports per pool (the v1 CRD's `MaxItems`).
pub(super) const MAX_TARGET_PORTS: usize = 8;

/// Why a pool (object or flags) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("unknown pool group {0:?} (expected {GROUP_V1} or {GROUP_X_K8S})")]
    UnknownGroup(String),
    #[error("the pool has no spec")]
    MissingSpec,
    #[error("the pool selector is empty or missing: it would select every pod in the namespace")]
    EmptySelector,
    #[error("selector label {key:?} has a non-string value")]
    SelectorValue { key: String },
    #[error("selector entry {0:?} is not key=value")]
    SelectorEntry(String),
    #[error("the pool has no target ports")]
    NoTargetPorts,
    #[error("{0} target ports: at most {MAX_TARGET_PORTS}")]
    TooManyTargetPorts(usize),
    #[error("target port {0:?} is not a port number in 1..=65535")]
    BadPort(String),
    #[error("target port {0} is listed twice")]
    DuplicatePort(u16),
}

/// The API version an InferencePool has in `group`.
pub fn pool_version(group: &str) -> Result<&'static str, SpecError> {
    match group {
        GROUP_V1 => Ok("v1"),
        GROUP_X_K8S => Ok("v1alpha2"),
        other => Err(SpecError::UnknownGroup(other.to_string())),
    }
}

/// A pool's selector and target ports: everything that decides its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Pods carrying all of these labels (same namespace only) are the pool's model servers.
    pub selector: BTreeMap<String, String>,
    /// Each port of each ready pod is one endpoint; the index is the rank in the endpoint's name.
    pub target_ports: Vec<u16>,
}

impl PoolSpec {
    /// Reads the `spec` of an InferencePool object of `group` (the whole object's JSON minus metadata).
    pub fn from_object(group: &str, object: &Value) -> Result<Self, SpecError> {
        let spec = object.get("spec").ok_or(SpecError::MissingSpec)?;
        let (selector, ports) = match pool_version(group)? {
            "v1" => {
                let labels = spec.get("selector").and_then(|s| s.get("matchLabels"));
                let ports = spec.get("targetPorts").and_then(Value::as_array).map(|ports| {
                    ports.iter().map(|p| p.get("number").cloned().unwrap_or(Value::Null)).collect::<Vec<_>>()
                });
                (labels, ports.unwrap_or_default())
            }
            _ => (spec.get("selector"), spec.get("targetPortNumber").cloned().into_iter().collect()),
        };
        let selector = selector_map(selector)?;
        let target_ports = ports.iter().map(port_from_json).collect::<Result<Vec<_>, _>>()?;
        Self::new(selector, target_ports)
    }

    /// The standalone pool of `--endpoint-selector k=v,…` and `--endpoint-target-ports 8000,…`.
    pub fn standalone(selector: &str, target_ports: &str) -> Result<Self, SpecError> {
        let mut labels = BTreeMap::new();
        for entry in selector.split(',').filter(|e| !e.is_empty()) {
            match entry.split_once('=') {
                Some((k, v)) if !k.is_empty() && !entry.contains(char::is_whitespace) => {
                    labels.insert(k.to_string(), v.to_string());
                }
                _ => return Err(SpecError::SelectorEntry(entry.to_string())),
            }
        }
        let ports = target_ports
            .split(',')
            .map(|p| {
                p.trim().parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| SpecError::BadPort(p.into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(labels, ports)
    }

    fn new(selector: BTreeMap<String, String>, target_ports: Vec<u16>) -> Result<Self, SpecError> {
        if selector.is_empty() {
            return Err(SpecError::EmptySelector);
        }
        if target_ports.is_empty() {
            return Err(SpecError::NoTargetPorts);
        }
        if target_ports.len() > MAX_TARGET_PORTS {
            return Err(SpecError::TooManyTargetPorts(target_ports.len()));
        }
        for (i, port) in target_ports.iter().enumerate() {
            if target_ports[..i].contains(port) {
                return Err(SpecError::DuplicatePort(*port));
            }
        }
        Ok(Self { selector, target_ports })
    }

    /// The selector as a `labelSelector` query value: `k=v,k2=v2` (sorted, so it is stable).
    pub fn label_selector(&self) -> String {
        self.selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// True when `labels` carry every selector label.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

fn selector_map(value: Option<&Value>) -> Result<BTreeMap<String, String>, SpecError> {
    let Some(Value::Object(map)) = value else { return Ok(BTreeMap::new()) };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(SpecError::SelectorValue { key: k.clone() }),
        })
        .collect()
}

fn port_from_json(value: &Value) -> Result<u16, SpecError> {
    value
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| SpecError::BadPort(value.to_string()))
}

/// The standalone pool's name, derived from `POD_NAME` as upstream does (the Deployment's name: the pod
/// name less its ReplicaSet hash and pod suffix, `^(.+)-[a-z0-9]+-[a-z0-9]+$`,
/// `kubernetes-sigs/gateway-api-inference-extension:cmd/epp/runner/runner.go`). `None` when it does
/// not have that shape.
pub fn standalone_pool_name(pod_name: &str) -> Option<String> {
    let mut parts = pod_name.rsplitn(3, '-');
    let (suffix, hash, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (token(suffix) && token(hash) && !rest.is_empty()).then(|| rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn v1_pool() {
        let pool = json!({"spec": {"selector": {"matchLabels": {"app": "vllm", "tier": "gpu"}},
            "targetPorts": [{"number": 8000}, {"number": 8001}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}});
        let spec = PoolSpec::from_object(GROUP_V1, &pool).unwrap();
        assert_eq!(spec.selector, labels(&[("app", "vllm"), ("tier", "gpu")]));
        assert_eq!(spec.target_ports, vec![8000, 8001]);
        assert_eq!(spec.label_selector(), "app=vllm,tier=gpu");
    }

    #[test]
    fn v1alpha2_pool() {
        let pool = json!({"spec": {"selector": {"app": "vllm"}, "targetPortNumber": 8000,
            "extensionRef": {"name": "epp"}}});
        let spec = PoolSpec::from_object(GROUP_X_K8S, &pool).unwrap();
        assert_eq!((spec.selector, spec.target_ports), (labels(&[("app", "vllm")]), vec![8000]));
    }

    #[test]
    fn invalid_pools_are_named() {
        let cases = [
            (json!({}), SpecError::MissingSpec),
            (json!({"spec": {"targetPorts": [{"number": 1}]}}), SpecError::EmptySelector),
            (json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}}), SpecError::NoTargetPorts),
            (
                json!({"spec": {"selector": {"matchLabels": {"a": 1}}, "targetPorts": [{"number": 1}]}}),
                SpecError::SelectorValue { key: "a".into() },
            ),
            (
                json!({"spec": {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [{"number": 70000}]}}),
                SpecError::BadPort("70000".into()),
            ),
            (
                json!({"spec": {"selector": {"matchLabels": {"a": "b"}},
                    "targetPorts": [{"number": 80}, {"number": 80}]}}),
                SpecError::DuplicatePort(80),
            ),
        ];
        for (object, want) in cases {
            assert_eq!(PoolSpec::from_object(GROUP_V1, &object).unwrap_err(), want, "{object}");
        }
        let nine: Vec<_> = (1..=9).map(|n| json!({"number": n})).collect();
        let object = json!({"spec": {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": nine}});
        assert_eq!(PoolSpec::from_object(GROUP_V1, &object).unwrap_err(), SpecError::TooManyTargetPorts(9));
        assert!(matches!(pool_version("example.com"), Err(SpecError::UnknownGroup(_))));
    }

    #[test]
    fn standalone_flags() {
        let spec = PoolSpec::standalone("app=vllm,model=llama", "8000,8001").unwrap();
        assert_eq!(spec.selector, labels(&[("app", "vllm"), ("model", "llama")]));
        assert_eq!(spec.target_ports, vec![8000, 8001]);
        assert_eq!(PoolSpec::standalone("app", "8000").unwrap_err(), SpecError::SelectorEntry("app".into()));
        assert_eq!(
            PoolSpec::standalone("app= vllm", "8000").unwrap_err(),
            SpecError::SelectorEntry("app= vllm".into())
        );
        assert_eq!(PoolSpec::standalone("", "8000").unwrap_err(), SpecError::EmptySelector);
        assert_eq!(PoolSpec::standalone("a=b", "0").unwrap_err(), SpecError::BadPort("0".into()));
        assert_eq!(PoolSpec::standalone("a=b", "x").unwrap_err(), SpecError::BadPort("x".into()));
    }

    #[test]
    fn selects_needs_every_label() {
        let spec = PoolSpec::standalone("app=vllm,tier=gpu", "8000").unwrap();
        assert!(spec.selects(&labels(&[("app", "vllm"), ("tier", "gpu"), ("extra", "x")])));
        assert!(!spec.selects(&labels(&[("app", "vllm")])));
        assert!(!spec.selects(&labels(&[("app", "vllm"), ("tier", "cpu")])));
    }

    #[test]
    fn pool_name_from_pod_name() {
        assert_eq!(standalone_pool_name("vllm-epp-7d9f8c6b5-x2k4q").as_deref(), Some("vllm-epp"));
        assert_eq!(standalone_pool_name("epp-abc-def").as_deref(), Some("epp"));
        assert_eq!(standalone_pool_name("epp-0"), None);
        assert_eq!(standalone_pool_name("epp-ABC-def"), None);
        assert_eq!(standalone_pool_name("-abc-def"), None);
    }
}
