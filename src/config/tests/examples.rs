//! The example configs in `config/` (repo root): the GIE ones load unchanged.

use std::path::PathBuf;

use super::fakes::{ctx, registry};
use super::{producer_names, profile_shape};
use crate::config::{load_file, ConfigError, LoadedConfig, ParserKind, DEFAULT_CONFIG_YAML};
use crate::scheduling::Registry;

/// Examples that must load with the real built-in plugins.
const MUST_LOAD: &[&str] = &[
    "default.yaml",
    "gie-integration.yaml",
    "conformance.yaml",
    "weighted-random.yaml",
    "static-endpoints.yaml",
    "flow-control-autoscaling.yaml",
    "optimized-baseline.yaml",
    "predicted-latency.yaml",
    "predicted-latency-slo.yaml",
    "predicted-latency-epp.yaml",
    "predicted-latency-design.yaml",
    "llamacpp.yaml",
    "precise-prefix.yaml",
    "pd-disaggregation.yaml",
];

/// Examples using plugins epp may not implement: they load, or fail only with "unknown type".
const OPTIONAL: &[&str] = &["flow-control.yaml"];

fn config_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config")
}

fn load_example(name: &str, registry: &Registry) -> Result<LoadedConfig, ConfigError> {
    load_file(config_dir().join(name), registry, &ctx())
}

#[test]
fn every_example_is_listed() {
    let mut found: Vec<String> = std::fs::read_dir(config_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    found.sort();
    let mut listed: Vec<&str> = MUST_LOAD.iter().chain(OPTIONAL).copied().collect();
    listed.sort();
    assert_eq!(found, listed);
}

#[test]
fn every_example_loads_with_fake_plugins() {
    for name in MUST_LOAD.iter().chain(OPTIONAL) {
        if let Err(e) = load_example(name, &registry()) {
            panic!("{name}: {e}");
        }
    }
}

#[test]
fn default_example_is_the_embedded_default() {
    let file = std::fs::read_to_string(config_dir().join("default.yaml")).unwrap();
    assert_eq!(file, DEFAULT_CONFIG_YAML);
}

#[test]
fn gie_integration_example() {
    let c = load_example("gie-integration.yaml", &registry()).unwrap();
    assert!(c.feature_gates.enable_legacy_metrics);
    assert_eq!(c.parser, ParserKind::OpenAi);
    let (_, scorers, picker) = profile_shape(&c, "default");
    assert_eq!(scorers.len(), 4);
    assert!(scorers.iter().all(|(_, w)| *w == 1.0));
    assert_eq!(picker, "max-score-picker");
    assert_eq!(producer_names(&c), ["approx-prefix-cache-producer"]);
}

#[test]
fn conformance_example() {
    let c = load_example("conformance.yaml", &registry()).unwrap();
    let (filters, scorers, picker) = profile_shape(&c, "conformance-profile");
    assert_eq!(filters, ["header-based-testing-filter"]);
    assert!(scorers.is_empty());
    assert_eq!(picker, "max-score-picker");
    assert_eq!(c.pipeline.response_hooks[0].0.name, "destination-endpoint-served-verifier");
}

#[test]
fn other_examples() {
    let c = load_example("weighted-random.yaml", &registry()).unwrap();
    assert_eq!(profile_shape(&c, "default").2, "weighted-random-picker");
    let c = load_example("static-endpoints.yaml", &registry()).unwrap();
    assert_eq!(c.endpoints.len(), 2);
    assert_eq!(c.objectives["batch"], -1);
    assert_eq!(c.model_rewrites[0].targets.len(), 2);
    let c = load_example("optimized-baseline.yaml", &registry()).unwrap();
    assert_eq!(producer_names(&c), ["inflight-load-producer", "approx-prefix-cache-producer"]);
    let c = load_example("flow-control.yaml", &registry()).unwrap();
    assert_eq!(c.saturation_detector.as_deref(), Some("detector"));
    assert_eq!(c.flow_control.unwrap().priority_bands.len(), 1);
}

/// The examples with the real built-in plugins.
mod builtins {
    use super::*;

    #[test]
    fn examples_load_with_builtin_plugins() {
        let registry = Registry::with_builtins();
        for name in MUST_LOAD {
            let c = match load_example(name, &registry) {
                Ok(c) => c,
                Err(e) => panic!("{name} must load with the built-in plugins: {e}"),
            };
            let detector = c.saturation_detector.as_deref().and_then(|n| c.pipeline.plugin(n));
            assert!(detector.and_then(|p| p.saturation_detector.as_ref()).is_some(), "{name}: no detector");
        }
        for name in OPTIONAL {
            match load_example(name, &registry) {
                Ok(_) => {}
                Err(ConfigError::InFile { source, .. }) if super::super::is_unknown_type(&source) => {}
                Err(e) => panic!("{name}: {e}"),
            }
        }
        let c = crate::config::load_default(&registry, &ctx()).unwrap();
        assert_eq!(producer_names(&c), ["approx-prefix-cache-producer"]);
    }

    fn builtin_example(name: &str) -> LoadedConfig {
        load_example(name, &Registry::with_builtins()).unwrap()
    }

    /// What epp names when the gateway keeps answers from it (`response_body_mode: NONE`): the
    /// predicted-latency producer in streaming mode reads TTFT and TPOT from the answer's chunks; with
    /// streaming off it learns from the request's end, which epp sees without the body.
    #[test]
    fn the_plugins_that_read_answer_chunks_are_named() {
        let readers = |name: &str| -> Vec<String> {
            builtin_example(name).pipeline.answer_chunk_readers().map(str::to_owned).collect()
        };
        assert_eq!(readers("predicted-latency-epp.yaml").len(), 1);
        assert!(readers("predicted-latency.yaml").is_empty());
        assert!(readers("default.yaml").is_empty());
        assert!(readers("precise-prefix.yaml").is_empty());
    }

    /// Only hooks that do something with a chunk are called (and timed) for each one: llm-d-router's
    /// ResponseStreaming plugins are its predicted-latency producer (and a request-attribute reporter).
    #[test]
    fn only_hooks_that_handle_chunks_are_called_per_chunk() {
        let chunk_hooks = |name: &str| -> Vec<String> {
            builtin_example(name).pipeline.response_chunk_hooks().map(|(id, _)| id.name.clone()).collect()
        };
        assert!(chunk_hooks("optimized-baseline.yaml").is_empty(), "the in-flight load needs no chunk");
        assert!(chunk_hooks("default.yaml").is_empty());
        assert_eq!(chunk_hooks("predicted-latency-epp.yaml").len(), 1);
        assert_eq!(
            chunk_hooks("precise-prefix.yaml").len(),
            1,
            "speculation's TTL starts at the first token"
        );
    }
}
