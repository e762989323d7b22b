//! Configuration errors. Every variant names where the problem is (a YAML path such as
//! `schedulingProfiles[0].plugins[1].weight`, a plugin name, or a file), because the config is read once at
//! startup and the operator must be able to fix it from the message alone.

use std::path::PathBuf;

use crate::scheduling::PluginError;

/// Why an EndpointPickerConfig could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A problem inside a config file; wraps the error with the file's path.
    #[error("config file {}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ConfigError>,
    },
    /// The YAML does not match the schema (unknown key, wrong type, bad value). `field` is the path of
    /// the offending value, empty for the document itself.
    #[error("config: {}{message}", field_prefix(field))]
    Parse { field: String, message: String },
    /// The YAML is well-formed but violates a rule (duplicate name, dangling reference, ...).
    #[error("config: {}{message}", field_prefix(field))]
    Invalid { field: String, message: String },
    /// A plugin's factory rejected its parameters.
    #[error("config: {0}")]
    Plugin(#[from] PluginError),
    /// A plugin's `type` is not a known plugin type.
    #[error(
        "config: plugins[{index}]: plugin {name:?} has unknown type {type_name:?}; known types: {}",
        known.join(", ")
    )]
    UnknownPluginType { index: usize, name: String, type_name: String, known: Vec<String> },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() || field == "." {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl ConfigError {
    /// A rule violation at `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid { field: field.into(), message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_the_field() {
        let e = ConfigError::invalid("plugins[2].name", "duplicate plugin name \"x\"");
        assert_eq!(e.to_string(), "config: plugins[2].name: duplicate plugin name \"x\"");
    }

    #[test]
    fn document_level_errors_have_no_field_prefix() {
        let e = ConfigError::Parse { field: ".".into(), message: "unknown field `data`".into() };
        assert_eq!(e.to_string(), "config: unknown field `data`");
    }

    #[test]
    fn unknown_type_lists_known_types() {
        let e = ConfigError::UnknownPluginType {
            index: 1,
            name: "s".into(),
            type_name: "qeue-scorer".into(),
            known: vec!["queue-scorer".into(), "max-score-picker".into()],
        };
        let text = e.to_string();
        assert!(
            text.contains("\"qeue-scorer\"") && text.contains("queue-scorer, max-score-picker"),
            "{text}"
        );
    }
}
