//! `saturationDetector` (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/config/loader/defaults.go): the plugin whose
//! saturation gradient gates admission and flow control. It must name a declared plugin with a
//! saturation-detector role; when the section is absent, a `utilization-detector` with default parameters is
//! added, so a loaded config always has one.
//!
//! The added detector is not put in any scheduling profile: like a declared detector that is only named
//! here (docs/configuration.md, "Saturation detectors and flow control"), it gates admission but filters no endpoints.

use super::datalayer::wrong_ref;
use super::instances::Instances;
use super::local::RefTarget;
use super::schema::RawPluginRef;
use super::ConfigError;

/// The default detector's type, and the name it gets unless that name is taken.
pub(crate) const UTILIZATION_DETECTOR: &str = "utilization-detector";

const FIELD: &str = "saturationDetector.pluginRef";

/// The name of the saturation detector in `instances`, adding the default one when none is configured.
pub(crate) fn resolve_saturation_detector(
    raw: Option<&RawPluginRef>,
    instances: &mut Instances<'_>,
) -> Result<String, ConfigError> {
    let Some(RawPluginRef { plugin_ref }) = raw else {
        return add_default(instances, None);
    };
    if let Some(plugin) = instances.plugins.iter().find(|p| p.id.name == *plugin_ref) {
        if plugin.saturation_detector.is_some() {
            return Ok(plugin_ref.clone());
        }
        return Err(wrong_ref(
            FIELD,
            plugin_ref,
            RefTarget::Scheduling { type_name: plugin.id.type_name },
            "a saturation detector",
        ));
    }
    if let Some(local) = instances.local_plugin(plugin_ref) {
        return Err(wrong_ref(FIELD, plugin_ref, RefTarget::Local(local), "a saturation detector"));
    }
    // Naming the default detector without declaring it gets the default detector, as `parser.pluginRef:
    // openai-parser` gets the default parser.
    if plugin_ref == UTILIZATION_DETECTOR {
        return add_default(instances, Some(plugin_ref));
    }
    Err(wrong_ref(FIELD, plugin_ref, RefTarget::Missing, "a saturation detector"))
}

/// Adds a `utilization-detector` with default parameters, named `name` or else the first free one of
/// `utilization-detector`, `utilization-detector-default`, `utilization-detector-default-2`, ...
fn add_default(instances: &mut Instances<'_>, name: Option<&str>) -> Result<String, ConfigError> {
    let declared: Vec<&str> = instances
        .plugins
        .iter()
        .filter(|p| p.saturation_detector.is_some())
        .map(|p| p.id.name.as_str())
        .collect();
    if !declared.is_empty() {
        tracing::warn!(
            declared = declared.join(", "),
            "config: saturation detectors are declared but saturationDetector.pluginRef names none; \
             admission and flow control use a default utilization-detector"
        );
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => {
            let taken = |n: &str| {
                instances.plugins.iter().any(|p| p.id.name == n) || instances.local_plugin(n).is_some()
            };
            let mut candidates =
                [UTILIZATION_DETECTOR.to_string(), format!("{UTILIZATION_DETECTOR}-default")]
                    .into_iter()
                    .chain((2..).map(|i| format!("{UTILIZATION_DETECTOR}-default-{i}")));
            // The chain is endless and only finitely many names are taken, so `find` always succeeds.
            candidates.find(|n| !taken(n)).unwrap_or_default()
        }
    };
    let factory = instances.registry().get(UTILIZATION_DETECTOR).ok_or_else(|| {
        ConfigError::invalid(
            "saturationDetector",
            format!("a default {UTILIZATION_DETECTOR} is needed, but that plugin type is not registered"),
        )
    })?;
    let built = factory(&name, None, instances.ctx())?;
    if built.saturation_detector.is_none() {
        return Err(ConfigError::invalid(
            "saturationDetector",
            format!("the default {UTILIZATION_DETECTOR} plugin has no saturation-detector role"),
        ));
    }
    tracing::info!(plugin = %name, "config: added the default saturation detector ({UTILIZATION_DETECTOR})");
    instances.plugins.push(built);
    Ok(name)
}
