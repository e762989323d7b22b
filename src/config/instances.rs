//! The plugin instances a pipeline is assembled from: the declared ones, then those the loader adds by
//! the defaulting rules (each default built by its registered factory with no parameters).

use super::local::LocalPlugin;
use super::ConfigError;
use crate::scheduling::{BuiltPlugin, FactoryContext, Registry};

/// Plugin instances of the pipeline: the declared ones, then those the loader adds.
pub(crate) struct Instances<'a> {
    pub plugins: Vec<BuiltPlugin>,
    /// Names of loader-handled plugins, which auto-created plugins must not take either.
    pub(super) local: Vec<(&'a str, &'a LocalPlugin)>,
    pub(super) registry: &'a Registry,
    pub(super) ctx: &'a FactoryContext,
}

impl<'a> Instances<'a> {
    /// The instance named `type_name` (reused if it is of that type), else a new one built with no
    /// parameters, as the Go loader creates its defaults.
    pub(crate) fn auto_create(&mut self, type_name: &str, why: &str) -> Result<usize, ConfigError> {
        if let Some(i) = self.plugins.iter().position(|p| p.id.name == type_name) {
            if self.plugins[i].id.type_name == type_name {
                return Ok(i);
            }
            let taken = &self.plugins[i].id.type_name;
            return Err(ConfigError::invalid(
                "plugins",
                format!(
                    "{why}, so epp adds a {type_name:?} plugin, but that name is taken by a {taken} plugin"
                ),
            ));
        }
        if let Some((_, p)) = self.local.iter().find(|(n, _)| *n == type_name) {
            return Err(ConfigError::invalid(
                "plugins",
                format!("{why}, so epp adds a {type_name:?} plugin, but that name is taken by {}", p.role()),
            ));
        }
        let factory = self.registry.get(type_name).ok_or_else(|| {
            ConfigError::invalid("plugins", format!("{why}, but plugin type {type_name:?} is not registered"))
        })?;
        let built = factory(type_name, None, self.ctx)?;
        tracing::info!(plugin = type_name, "config: added default plugin ({why})");
        self.plugins.push(built);
        Ok(self.plugins.len() - 1)
    }

    /// The loader-handled plugin declared as `name`, if any.
    pub(crate) fn local_plugin(&self, name: &str) -> Option<&'a LocalPlugin> {
        self.local.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }

    pub(crate) fn registry(&self) -> &'a Registry {
        self.registry
    }

    pub(crate) fn ctx(&self) -> &'a FactoryContext {
        self.ctx
    }

    pub(super) fn find(&self, name: &str) -> Option<&BuiltPlugin> {
        self.plugins.iter().find(|p| p.id.name == name)
    }
}
