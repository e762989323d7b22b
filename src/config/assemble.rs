//! Turns the declared plugins and `schedulingProfiles` into a [`Pipeline`], applying the Go loader's
//! defaulting rules (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/config/loader/defaults.go): a default profile when
//! none is given, a default picker per profile, `single-profile-handler` for a single profile, default
//! producers for consumed data, and the default saturation detector.

use std::collections::HashSet;
use std::sync::Arc;

use super::detector::resolve_saturation_detector;
use super::instances::Instances;
use super::local::LocalPlugin;
use super::producers::order_producers;
use super::schema::{RawPluginRef, RawProfile, RawProfilePlugin};
use super::ConfigError;
use crate::scheduling::{
    BuiltPlugin, FactoryContext, Filter, Picker, Pipeline, PluginError, PluginId, Profile, Registry,
    WeightedScorer,
};

pub(crate) const SINGLE_PROFILE_HANDLER: &str = "single-profile-handler";
pub(crate) const MAX_SCORE_PICKER: &str = "max-score-picker";
/// Weight of a scorer listed without one (`DefaultScorerWeight`).
pub const DEFAULT_SCORER_WEIGHT: f64 = 1.0;

/// A `plugins[]` entry after its factory ran.
pub(crate) struct Declared {
    pub name: String,
    pub kind: DeclaredKind,
}

pub(crate) enum DeclaredKind {
    Scheduling(Box<BuiltPlugin>),
    Local(LocalPlugin),
}

/// Builds the pipeline from the declared plugins, the raw profiles and `saturationDetector`; returns it
/// with the name of the saturation detector (added when none is configured).
pub(crate) fn build_pipeline(
    raw_profiles: &[RawProfile],
    raw_detector: Option<&RawPluginRef>,
    declared: &[Declared],
    registry: &Registry,
    ctx: &FactoryContext,
) -> Result<(Pipeline, String), ConfigError> {
    let mut instances = Instances {
        plugins: declared
            .iter()
            .filter_map(|d| match &d.kind {
                DeclaredKind::Scheduling(p) => Some((**p).clone()),
                DeclaredKind::Local(_) => None,
            })
            .collect(),
        local: declared
            .iter()
            .filter_map(|d| match &d.kind {
                DeclaredKind::Local(p) => Some((d.name.as_str(), p)),
                DeclaredKind::Scheduling(_) => None,
            })
            .collect(),
        registry,
        ctx,
    };

    let defaulted;
    let raw_profiles = if raw_profiles.is_empty() {
        defaulted = [default_profile(&instances.plugins)];
        &defaulted[..]
    } else {
        raw_profiles
    };
    let mut names = HashSet::new();
    for (i, raw) in raw_profiles.iter().enumerate() {
        if raw.name.trim().is_empty() {
            return Err(ConfigError::invalid(format!("schedulingProfiles[{i}].name"), "must not be empty"));
        }
        if !names.insert(raw.name.as_str()) {
            return Err(ConfigError::invalid(
                format!("schedulingProfiles[{i}].name"),
                format!("duplicate profile name {:?}", raw.name),
            ));
        }
    }
    let handler = select_handler(&mut instances, raw_profiles.len())?;
    let profiles = raw_profiles
        .iter()
        .enumerate()
        .map(|(i, raw)| build_profile(i, raw, &mut instances))
        .collect::<Result<Vec<_>, _>>()?;

    let producers = order_producers(&mut instances)?;
    // After the profiles, so that a detector added here is in none of them.
    let saturation_detector = resolve_saturation_detector(raw_detector, &mut instances)?;
    let plugins = instances.plugins;
    let handler = {
        let p = &plugins[handler];
        match &p.profile_handler {
            Some(h) => (p.id.clone(), h.clone()),
            None => {
                return Err(ConfigError::invalid(
                    "plugins",
                    format!("{:?} is not a profile handler", p.id.name),
                ))
            }
        }
    };
    let profile_names: Vec<String> = profiles.iter().map(|p: &Profile| p.name.clone()).collect();
    let (id, h) = &handler;
    h.link(&plugins, &profile_names).map_err(|m| PluginError::new(&id.name, id.type_name, m))?;
    let admitters = plugins.iter().filter_map(|p| p.admitter.clone().map(|a| (p.id.clone(), a))).collect();
    let pre_requests =
        plugins.iter().filter_map(|p| p.pre_request.clone().map(|a| (p.id.clone(), a))).collect();
    let response_hooks =
        plugins.iter().filter_map(|p| p.response.clone().map(|a| (p.id.clone(), a))).collect();
    let endpoint_listeners = plugins.iter().filter_map(|p| p.endpoint_listener.clone()).collect();
    let pipeline = Pipeline::new(
        profiles,
        handler,
        producers,
        admitters,
        pre_requests,
        response_hooks,
        endpoint_listeners,
        plugins,
    );
    Ok((pipeline, saturation_detector))
}

/// The profile of rule 4: every declared Filter, Scorer and Picker, in declaration order.
fn default_profile(plugins: &[BuiltPlugin]) -> RawProfile {
    let refs = plugins
        .iter()
        .filter(|p| p.filter.is_some() || p.scorer.is_some() || p.picker.is_some())
        .map(|p| RawProfilePlugin { plugin_ref: p.id.name.clone(), weight: None })
        .collect();
    tracing::info!(
        "config: no schedulingProfiles; using a \"default\" profile with every filter, scorer and picker"
    );
    RawProfile { name: "default".to_string(), plugins: refs }
}

/// Rule 2: exactly one profile handler, added for a single profile; returns its index.
fn select_handler(instances: &mut Instances<'_>, profile_count: usize) -> Result<usize, ConfigError> {
    let handlers: Vec<usize> =
        (0..instances.plugins.len()).filter(|&i| instances.plugins[i].profile_handler.is_some()).collect();
    let index = match handlers[..] {
        [] if profile_count == 1 => {
            instances.auto_create(SINGLE_PROFILE_HANDLER, "no profile handler is declared")?
        }
        [] => {
            return Err(ConfigError::invalid(
                "plugins",
                format!(
                    "{profile_count} scheduling profiles need a profile handler; declare one under plugins"
                ),
            ))
        }
        [one] => one,
        _ => {
            let names: Vec<&str> = handlers.iter().map(|&i| instances.plugins[i].id.name.as_str()).collect();
            return Err(ConfigError::invalid(
                "plugins",
                format!("only one profile handler is allowed, found {}", names.join(", ")),
            ));
        }
    };
    let handler = &instances.plugins[index];
    if handler.id.type_name == SINGLE_PROFILE_HANDLER && profile_count > 1 {
        return Err(ConfigError::invalid(
            "schedulingProfiles",
            format!(
                "profile handler {:?} is a single-profile-handler, which runs one profile, but {profile_count} are configured",
                handler.id.name
            ),
        ));
    }
    Ok(index)
}

fn build_profile(
    index: usize,
    raw: &RawProfile,
    instances: &mut Instances<'_>,
) -> Result<Profile, ConfigError> {
    let profile = &raw.name;
    let mut filters: Vec<(PluginId, Arc<dyn Filter>)> = Vec::new();
    let mut scorers = Vec::new();
    let mut picker: Option<(PluginId, Arc<dyn Picker>)> = None;
    let mut seen = HashSet::new();
    for (j, entry) in raw.plugins.iter().enumerate() {
        let field = format!("schedulingProfiles[{index}].plugins[{j}]");
        let name = &entry.plugin_ref;
        let Some(plugin) = instances.find(name) else {
            let message = match instances.local.iter().find(|(n, _)| n == name) {
                Some((_, local)) => format!(
                    "profile {profile:?}: plugin {name:?} is {}, not a filter, scorer or picker",
                    local.role()
                ),
                None => format!("profile {profile:?} references unknown plugin {name:?}"),
            };
            return Err(ConfigError::invalid(format!("{field}.pluginRef"), message));
        };
        let type_name = plugin.id.type_name;
        if plugin.filter.is_none() && plugin.scorer.is_none() && plugin.picker.is_none() {
            return Err(ConfigError::invalid(
                format!("{field}.pluginRef"),
                format!("profile {profile:?}: plugin {name:?} (type {type_name}) is not a filter, scorer or picker"),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(ConfigError::invalid(
                format!("{field}.pluginRef"),
                format!("profile {profile:?} lists plugin {name:?} twice"),
            ));
        }
        if let Some(w) = entry.weight {
            if plugin.scorer.is_none() {
                return Err(ConfigError::invalid(
                    format!("{field}.weight"),
                    format!("profile {profile:?}: plugin {name:?} (type {type_name}) is not a scorer; weight applies to scorers only"),
                ));
            }
            if !w.is_finite() || w < 0.0 {
                return Err(ConfigError::invalid(
                    format!("{field}.weight"),
                    format!("profile {profile:?}: weight {w} of scorer {name:?} must be a finite number ≥ 0"),
                ));
            }
        }
        if let Some(f) = &plugin.filter {
            filters.push((plugin.id.clone(), f.clone()));
        }
        if let Some(s) = &plugin.scorer {
            let weight = entry.weight.unwrap_or(DEFAULT_SCORER_WEIGHT);
            scorers.push(WeightedScorer { id: plugin.id.clone(), scorer: s.clone(), weight });
        }
        if let Some(p) = &plugin.picker {
            if let Some((first, _)) = &picker {
                return Err(ConfigError::invalid(
                    format!("{field}.pluginRef"),
                    format!("profile {profile:?} has two pickers: {:?} and {name:?}", first.name),
                ));
            }
            picker = Some((plugin.id.clone(), p.clone()));
        }
    }
    let picker = match picker {
        Some(p) => p,
        None => default_picker(profile, instances)?,
    };
    Ok(Profile { name: profile.clone(), filters, scorers, picker })
}

/// Rule 3: the first declared picker, else a `max-score-picker`.
fn default_picker(
    profile: &str,
    instances: &mut Instances<'_>,
) -> Result<(PluginId, Arc<dyn Picker>), ConfigError> {
    let index = match instances.plugins.iter().position(|p| p.picker.is_some()) {
        Some(i) => i,
        None => instances.auto_create(MAX_SCORE_PICKER, &format!("profile {profile:?} has no picker"))?,
    };
    let plugin = &instances.plugins[index];
    match &plugin.picker {
        Some(p) => Ok((plugin.id.clone(), p.clone())),
        None => Err(ConfigError::invalid(
            "plugins",
            format!("profile {profile:?} has no picker and {:?} is not a picker", plugin.id.name),
        )),
    }
}
