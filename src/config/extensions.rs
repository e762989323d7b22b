//! epp's own config sections, for running without Kubernetes CRDs: static endpoints, InferenceObjective
//! priorities, weighted model rewrites and the token estimator's constants. The Go EPP has no such keys
//! (it reads these from the API server), so a config using them is epp-only.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use super::schema::{RawEndpoint, RawModelRewrite, RawObjective, RawTokenEstimator};
use super::ConfigError;

/// A model server given in the config instead of discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticEndpoint {
    /// Defaults to the address text.
    pub name: String,
    pub address: SocketAddr,
    pub labels: BTreeMap<String, String>,
}

/// One weighted rewrite target.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteTarget {
    pub model: String,
    /// Relative weight, ≥ 0. When every target of a rule has weight 0 they are all set to 1 (uniform).
    pub weight: f64,
}

/// Requests for `match_model` are sent to one of `targets`, chosen by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRewrite {
    pub name: String,
    pub match_model: String,
    pub targets: Vec<RewriteTarget>,
}

/// The constants of the simple token estimator
/// (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/token_estimator.go).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenEstimatorConfig {
    pub characters_per_token: f64,
    pub output_ratio: f64,
}

impl Default for TokenEstimatorConfig {
    fn default() -> Self {
        Self { characters_per_token: 4.0, output_ratio: 1.5 }
    }
}

pub(crate) fn build_endpoints(raw: &[RawEndpoint]) -> Result<Vec<StaticEndpoint>, ConfigError> {
    let mut addresses = HashSet::new();
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, e) in raw.iter().enumerate() {
        let address: SocketAddr = e.address.trim().parse().map_err(|_| {
            ConfigError::invalid(
                format!("endpoints[{i}].address"),
                format!("{:?} is not an ip:port address (e.g. 10.0.0.5:8000 or [::1]:8000)", e.address),
            )
        })?;
        if address.port() == 0 {
            return Err(ConfigError::invalid(format!("endpoints[{i}].address"), "port must not be 0"));
        }
        if !addresses.insert(address) {
            return Err(ConfigError::invalid(
                format!("endpoints[{i}].address"),
                format!("duplicate endpoint address {address}"),
            ));
        }
        let name = match &e.name {
            Some(n) if n.trim().is_empty() => {
                return Err(ConfigError::invalid(format!("endpoints[{i}].name"), "must not be empty"))
            }
            Some(n) => n.clone(),
            None => e.address.trim().to_string(),
        };
        if !names.insert(name.clone()) {
            return Err(ConfigError::invalid(
                format!("endpoints[{i}].name"),
                format!("duplicate endpoint name {name:?}"),
            ));
        }
        out.push(StaticEndpoint { name, address, labels: e.labels.clone() });
    }
    Ok(out)
}

pub(crate) fn build_objectives(raw: &[RawObjective]) -> Result<HashMap<String, i32>, ConfigError> {
    let mut out = HashMap::with_capacity(raw.len());
    for (i, o) in raw.iter().enumerate() {
        if o.name.trim().is_empty() {
            return Err(ConfigError::invalid(format!("objectives[{i}].name"), "must not be empty"));
        }
        if out.insert(o.name.clone(), o.priority).is_some() {
            return Err(ConfigError::invalid(
                format!("objectives[{i}].name"),
                format!("duplicate objective {:?}", o.name),
            ));
        }
    }
    Ok(out)
}

pub(crate) fn build_model_rewrites(raw: &[RawModelRewrite]) -> Result<Vec<ModelRewrite>, ConfigError> {
    let mut names = HashSet::new();
    let mut matched = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let at = |field: &str| format!("modelRewrites[{i}].{field}");
        if r.name.trim().is_empty() {
            return Err(ConfigError::invalid(at("name"), "must not be empty"));
        }
        if !names.insert(r.name.as_str()) {
            return Err(ConfigError::invalid(at("name"), format!("duplicate rewrite name {:?}", r.name)));
        }
        if r.match_model.trim().is_empty() {
            return Err(ConfigError::invalid(at("matchModel"), "must not be empty"));
        }
        if !matched.insert(r.match_model.as_str()) {
            return Err(ConfigError::invalid(
                at("matchModel"),
                format!("model {:?} is already matched by an earlier rewrite", r.match_model),
            ));
        }
        if r.targets.is_empty() {
            return Err(ConfigError::invalid(at("targets"), "needs at least one target"));
        }
        let mut targets = Vec::with_capacity(r.targets.len());
        for (j, t) in r.targets.iter().enumerate() {
            if t.model.trim().is_empty() {
                return Err(ConfigError::invalid(at(&format!("targets[{j}].model")), "must not be empty"));
            }
            let weight = t.weight.unwrap_or(1.0);
            if !weight.is_finite() || weight < 0.0 {
                return Err(ConfigError::invalid(
                    at(&format!("targets[{j}].weight")),
                    format!("weight {weight} must be a finite number ≥ 0"),
                ));
            }
            targets.push(RewriteTarget { model: t.model.clone(), weight });
        }
        if targets.iter().all(|t| t.weight == 0.0) {
            // All-zero weights mean "no preference": split evenly instead of never routing.
            for t in &mut targets {
                t.weight = 1.0;
            }
        }
        out.push(ModelRewrite { name: r.name.clone(), match_model: r.match_model.clone(), targets });
    }
    Ok(out)
}

pub(crate) fn build_token_estimator(
    raw: Option<&RawTokenEstimator>,
) -> Result<TokenEstimatorConfig, ConfigError> {
    let defaults = TokenEstimatorConfig::default();
    let Some(raw) = raw else { return Ok(defaults) };
    let check = |field: &str, v: Option<f64>, default: f64| match v {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(ConfigError::invalid(
            format!("tokenEstimator.{field}"),
            format!("{v} must be a finite number > 0"),
        )),
    };
    Ok(TokenEstimatorConfig {
        characters_per_token: check("charactersPerToken", raw.characters_per_token, 4.0)?,
        output_ratio: check("outputRatio", raw.output_ratio, 1.5)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::parse_document;

    fn doc(text: &str) -> crate::config::schema::RawConfig {
        parse_document(text).unwrap()
    }

    #[test]
    fn endpoints_parse_and_default_names() {
        let raw = doc(
            "endpoints:\n- address: 10.0.0.1:8000\n- {address: '[::1]:9000', name: b, labels: {gpu: h100}}\n",
        );
        let eps = build_endpoints(&raw.endpoints).unwrap();
        assert_eq!(eps[0].name, "10.0.0.1:8000");
        assert_eq!(eps[1].address, "[::1]:9000".parse().unwrap());
        assert_eq!(eps[1].labels.get("gpu").map(String::as_str), Some("h100"));
    }

    #[test]
    fn endpoint_errors_name_the_field() {
        for (text, field) in [
            ("endpoints:\n- address: pod-a:8000\n", "endpoints[0].address"),
            ("endpoints:\n- address: 10.0.0.1:0\n", "endpoints[0].address"),
            ("endpoints:\n- address: 10.0.0.1:1\n- address: 10.0.0.1:1\n", "endpoints[1].address"),
            (
                "endpoints:\n- {address: 10.0.0.1:1, name: a}\n- {address: 10.0.0.2:1, name: a}\n",
                "endpoints[1].name",
            ),
        ] {
            let e = build_endpoints(&doc(text).endpoints).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }

    #[test]
    fn objectives_map_and_duplicates() {
        let raw = doc("objectives:\n- {name: critical, priority: 100}\n- {name: batch, priority: -1}\n");
        let objectives = build_objectives(&raw.objectives).unwrap();
        assert_eq!(objectives["critical"], 100);
        assert_eq!(objectives["batch"], -1);
        let raw = doc("objectives:\n- {name: a, priority: 1}\n- {name: a, priority: 2}\n");
        let e = build_objectives(&raw.objectives).unwrap_err().to_string();
        assert!(e.contains("objectives[1].name") && e.contains("duplicate"), "{e}");
        let e = parse_document("objectives:\n- {name: a, priority: high}\n").unwrap_err().to_string();
        assert!(e.contains("objectives[0].priority"), "{e}");
    }

    #[test]
    fn rewrites_weights_and_uniform_fallback() {
        let raw = doc(
            "modelRewrites:\n- name: r\n  matchModel: m\n  targets:\n  - {model: a, weight: 0}\n  - {model: b, weight: 0}\n\
             - name: s\n  matchModel: n\n  targets:\n  - {model: c, weight: 3}\n  - {model: d}\n",
        );
        let rewrites = build_model_rewrites(&raw.model_rewrites).unwrap();
        assert!(rewrites[0].targets.iter().all(|t| t.weight == 1.0));
        assert_eq!(rewrites[1].targets[0].weight, 3.0);
        assert_eq!(rewrites[1].targets[1].weight, 1.0);
    }

    #[test]
    fn rewrite_errors() {
        for (text, field) in [
            ("- {name: r, matchModel: m, targets: [{model: a, weight: -1}]}", "modelRewrites[0].targets[0].weight"),
            ("- {name: r, matchModel: m, targets: []}", "modelRewrites[0].targets"),
            ("- {name: r, matchModel: m, targets: [{model: a}]}\n- {name: s, matchModel: m, targets: [{model: b}]}", "modelRewrites[1].matchModel"),
            ("- {name: r, matchModel: m, targets: [{model: a}]}\n- {name: r, matchModel: n, targets: [{model: b}]}", "modelRewrites[1].name"),
            ("- {name: r, matchModel: m, targets: [{model: ''}]}", "modelRewrites[0].targets[0].model"),
        ] {
            let raw = doc(&format!("modelRewrites:\n{text}\n"));
            let e = build_model_rewrites(&raw.model_rewrites).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }

    #[test]
    fn token_estimator_defaults_and_validation() {
        assert_eq!(build_token_estimator(None).unwrap(), TokenEstimatorConfig::default());
        let raw = doc("tokenEstimator: {charactersPerToken: 3.5}\n");
        let t = build_token_estimator(raw.token_estimator.as_ref()).unwrap();
        assert_eq!((t.characters_per_token, t.output_ratio), (3.5, 1.5));
        for bad in
            ["{charactersPerToken: 0}", "{outputRatio: -1}", "{outputRatio: .nan}", "{outputRatio: .inf}"]
        {
            let raw = doc(&format!("tokenEstimator: {bad}\n"));
            let e = build_token_estimator(raw.token_estimator.as_ref()).unwrap_err().to_string();
            assert!(e.contains("tokenEstimator."), "{bad}: {e}");
        }
        assert!(parse_document("tokenEstimator: {charsPerToken: 4}\n").is_err());
    }
}
