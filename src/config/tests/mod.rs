//! Loader tests over a registry of fake plugins (the real built-ins are tested in `examples`).

mod defaults;
mod detectors;
mod errors;
mod examples;
mod fakes;
mod sections;

use super::{load, ConfigError, LoadedConfig};

/// Loads `text` with the fake registry.
fn load_ok(text: &str) -> LoadedConfig {
    match load(text, &fakes::registry(), &fakes::ctx()) {
        Ok(c) => c,
        Err(e) => panic!("config should load: {e}\n{text}"),
    }
}

/// Loads `text` with the fake registry, expecting an error; returns its message.
fn load_err(text: &str) -> String {
    match load(text, &fakes::registry(), &fakes::ctx()) {
        Ok(c) => panic!("config should be rejected: {:?}\n{text}", c.pipeline),
        Err(e) => e.to_string(),
    }
}

/// Asserts that `message` mentions every one of `parts`.
#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "expected {part:?} in: {message}");
    }
}

const HEADER: &str = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n";

/// Names of a profile's filters, scorers (with weights) and picker.
fn profile_shape(c: &LoadedConfig, profile: &str) -> (Vec<String>, Vec<(String, f64)>, String) {
    let p = c.pipeline.profiles.iter().find(|p| p.name == profile).expect("profile exists");
    (
        p.filters.iter().map(|(id, _)| id.name.clone()).collect(),
        p.scorers.iter().map(|s| (s.id.name.clone(), s.weight)).collect(),
        p.picker.0.name.clone(),
    )
}

fn producer_names(c: &LoadedConfig) -> Vec<&str> {
    c.pipeline.producers.iter().map(|(id, _)| id.name.as_str()).collect()
}

fn is_unknown_type(e: &ConfigError) -> bool {
    matches!(e, ConfigError::UnknownPluginType { .. })
}
