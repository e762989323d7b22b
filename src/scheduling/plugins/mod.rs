//! Built-in plugins (work in progress).
use super::Registry;

/// Registers every built-in plugin type.
pub fn register_all(_registry: &mut Registry) {}
