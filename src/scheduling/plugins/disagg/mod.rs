//! Prefill/decode disaggregation: `disagg-profile-handler` and its deciders
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/profilehandler/disagg/), and the deprecated
//! `pd-profile-handler`.
//!
//! The handler runs the decode profile first (stage order `decode-first`, the default), then asks each
//! configured decider whether the encode and prefill stages run, given the decode pod chosen. The decode
//! pod is the destination; a prefill pick becomes `x-prefiller-host-port` (and encode picks
//! `x-encoder-hosts-ports`), which the decode pod's sidecar acts on. With `prefill-first`, prefill runs
//! first and no prefill decider is allowed.
//!
//! Where epp differs from llm-d, on purpose:
//! - a decode profile, and a profile for each configured decider, must exist: a startup error names the
//!   missing one (llm-d finds out per request, and silently never disaggregates);
//! - a prefill stage that finds no pod (every prefill pod filtered out) is skipped, not fatal: the decode
//!   pod prefills locally and the decision is `decode-only`;
//! - a prefill pick that is the decode pod itself (an interleaved `prefill-decode` pod) sends no header:
//!   a sidecar told to fetch KV from itself would only add a hop;
//! - decision metrics are recorded on both counters ([`metrics`]).

mod deciders;
mod metrics;
mod params;

use std::sync::{Arc, OnceLock};

pub(crate) use deciders::{
    always_factory, multimodal_factory, prefix_based_factory, ALWAYS, MULTIMODAL, PREFIX_BASED,
};
pub use deciders::{AlwaysDecider, MultimodalDecider, PrefixBasedDecider};
pub use metrics::{Decision, DisaggMetrics};
pub use params::{DisaggSettings, StageOrder};

use crate::datastore::Endpoint;
use crate::scheduling::{
    BuiltPlugin, Decider, FactoryContext, PluginError, ProfileCycle, ProfileHandler, ProfileRunResult,
    ResultExtras, SchedulingRequest, SchedulingResult,
};
use crate::wire::{ENCODERS_HEADER, PREFILLER_HEADER};

pub(crate) const TYPE_NAME: &str = "disagg-profile-handler";
/// Deprecated upstream in favour of `disagg-profile-handler`; loads as it with a warning.
pub(crate) const LEGACY_PD: &str = "pd-profile-handler";
/// Deprecated upstream: `disagg-profile-handler` sets the P/D headers itself, so these do nothing.
pub(crate) const LEGACY_HEADER_HANDLERS: [&str; 2] = ["prefill-header-handler", "disagg-headers-handler"];

/// The disaggregation profile handler.
pub struct DisaggProfileHandler {
    name: String,
    type_name: &'static str,
    settings: DisaggSettings,
    prefill_decider: OnceLock<Arc<dyn Decider>>,
    encode_decider: OnceLock<Arc<dyn Decider>>,
    metrics: Arc<DisaggMetrics>,
}

impl DisaggProfileHandler {
    pub fn new(
        name: &str,
        type_name: &'static str,
        settings: DisaggSettings,
        metrics: Arc<DisaggMetrics>,
    ) -> Self {
        Self {
            name: name.to_string(),
            type_name,
            settings,
            prefill_decider: OnceLock::new(),
            encode_decider: OnceLock::new(),
            metrics,
        }
    }

    /// The first target of profile `name`'s result, if it ran and found one.
    fn target<'r>(results: &'r [(String, ProfileRunResult)], name: &str) -> Option<&'r Arc<Endpoint>> {
        results.iter().find(|(n, _)| n == name).and_then(|(_, r)| r.targets.first())
    }

    /// The prefill pod, when the prefill stage ran, found one, and it is not the decode pod.
    fn prefill_pod<'r>(&self, results: &'r [(String, ProfileRunResult)]) -> Option<&'r Arc<Endpoint>> {
        let prefill = Self::target(results, &self.settings.prefill_profile)?;
        let decode = Self::target(results, &self.settings.decode_profile);
        (!decode.is_some_and(|d| Arc::ptr_eq(d, prefill))).then_some(prefill)
    }

    /// Whether stage `profile` is configured and has not run yet.
    fn pending(cycle: &ProfileCycle<'_>, profile: &String) -> bool {
        cycle.profiles.contains(profile) && !cycle.done.contains(profile)
    }

    /// Whether `decider` (none: no) agrees to its stage for the pick of profile `about`.
    fn decides(
        req: &SchedulingRequest<'_>,
        cycle: &ProfileCycle<'_>,
        decider: Option<&Arc<dyn Decider>>,
        about: &str,
    ) -> bool {
        let asked = Self::target(cycle.results, about).and_then(|e| cycle.candidate(e));
        match (decider, asked) {
            (Some(decider), Some(candidate)) => decider.disaggregate(req, candidate),
            _ => false,
        }
    }

    fn record(&self, req: &SchedulingRequest<'_>, results: &[(String, ProfileRunResult)]) {
        if req.dry_run {
            return;
        }
        let encode = Self::target(results, &self.settings.encode_profile).is_some();
        let prefill = self.prefill_pod(results).is_some();
        self.metrics.record(&self.name, self.type_name, req.target_model, Decision::of(encode, prefill));
    }
}

impl ProfileHandler for DisaggProfileHandler {
    fn pick_profiles(&self, req: &SchedulingRequest<'_>, cycle: &ProfileCycle<'_>) -> Vec<String> {
        let s = &self.settings;
        let decode_done = cycle.done.contains(&s.decode_profile);
        if decode_done {
            if cycle.result(&s.decode_profile).is_none() {
                return Vec::new();
            }
            if s.stage_order == StageOrder::DecodeFirst {
                let (encode, prefill) = (self.encode_decider.get(), self.prefill_decider.get());
                if Self::pending(cycle, &s.encode_profile)
                    && Self::decides(req, cycle, encode, &s.decode_profile)
                {
                    return vec![s.encode_profile.clone()];
                }
                if Self::pending(cycle, &s.prefill_profile)
                    && Self::decides(req, cycle, prefill, &s.decode_profile)
                {
                    return vec![s.prefill_profile.clone()];
                }
            }
            self.record(req, cycle.results);
            return Vec::new();
        }
        if s.stage_order == StageOrder::PrefillFirst {
            // No decode pick yet: prefill always runs, and the encode decider is asked about the prefill pick.
            if Self::pending(cycle, &s.prefill_profile) {
                return vec![s.prefill_profile.clone()];
            }
            let encode = self.encode_decider.get();
            if Self::pending(cycle, &s.encode_profile)
                && Self::decides(req, cycle, encode, &s.prefill_profile)
            {
                return vec![s.encode_profile.clone()];
            }
        }
        vec![s.decode_profile.clone()]
    }

    fn primary_profile(&self, results: &[(String, ProfileRunResult)]) -> Result<String, String> {
        match Self::target(results, &self.settings.decode_profile) {
            Some(_) => Ok(self.settings.decode_profile.clone()),
            None => Err("failed to find available decode workers".to_string()),
        }
    }

    fn profile_required(&self, profile: &str) -> bool {
        profile == self.settings.decode_profile
    }

    fn extras(&self, result: &SchedulingResult) -> ResultExtras {
        let mut extras = ResultExtras::default();
        if let Some(prefill) = self.prefill_pod(&result.profile_results) {
            extras.upstream_headers.push((PREFILLER_HEADER, prefill.host_port.clone()));
            extras.prefill = Some(prefill.clone());
        }
        let encode = result.profile_results.iter().find(|(n, _)| *n == self.settings.encode_profile);
        if let Some((_, r)) = encode.filter(|(_, r)| !r.targets.is_empty()) {
            let hosts: Vec<&str> = r.targets.iter().map(|e| e.host_port.as_str()).collect();
            extras.upstream_headers.push((ENCODERS_HEADER, hosts.join(",")));
        }
        extras
    }

    fn link(&self, plugins: &[BuiltPlugin], profiles: &[String]) -> Result<(), String> {
        let s = &self.settings;
        let has = |p: &str| profiles.iter().any(|n| n == p);
        if !has(&s.decode_profile) {
            return Err(format!("the decode profile {:?} is not among schedulingProfiles", s.decode_profile));
        }
        let stages = [
            ("deciders.prefill", &s.prefill_decider, &s.prefill_profile, &self.prefill_decider),
            ("deciders.encode", &s.encode_decider, &s.encode_profile, &self.encode_decider),
        ];
        for (field, decider, profile, slot) in stages {
            let Some(decider) = decider else { continue };
            let plugin = plugins
                .iter()
                .find(|p| p.id.name == *decider)
                .ok_or_else(|| format!("{field}: no plugin named {decider:?} is declared"))?;
            let found = plugin.decider.clone().ok_or_else(|| {
                format!("{field}: plugin {decider:?} (type {}) is not a decider", plugin.id.type_name)
            })?;
            if !has(profile) {
                return Err(format!("{field} is set, but no scheduling profile is named {profile:?}"));
            }
            // A second link (the same handler in a rebuilt pipeline) finds the same decider.
            let _ = slot.set(found);
        }
        if s.stage_order == StageOrder::PrefillFirst && !has(&s.prefill_profile) {
            return Err(format!("stageOrder prefill-first needs a profile named {:?}", s.prefill_profile));
        }
        Ok(())
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let settings = params::parse(name, TYPE_NAME, params)?;
    let handler = DisaggProfileHandler::new(name, TYPE_NAME, settings, ctx.metrics.disagg.clone());
    Ok(BuiltPlugin::new(TYPE_NAME, name).profile_handler(Arc::new(handler)))
}

pub(crate) fn legacy_pd_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    tracing::warn!(plugin = name, "plugin type {LEGACY_PD:?} is deprecated; use {TYPE_NAME:?}");
    let settings = params::parse_legacy_pd(name, LEGACY_PD, params)?;
    let handler = DisaggProfileHandler::new(name, LEGACY_PD, settings, ctx.metrics.disagg.clone());
    Ok(BuiltPlugin::new(LEGACY_PD, name).profile_handler(Arc::new(handler)))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HeaderHandlerParams {
    /// Upstream's; nothing here reads it.
    #[allow(dead_code)]
    prefill_profile: Option<String>,
}

/// A deprecated header handler: accepted with a warning, and inert.
fn legacy_header_handler(
    type_name: &'static str,
    name: &str,
    params: Option<&serde_json::Value>,
) -> Result<BuiltPlugin, PluginError> {
    tracing::warn!(plugin = name, "{type_name} is deprecated: disagg-profile-handler sets the P/D headers");
    crate::scheduling::parse_params::<HeaderHandlerParams>(name, type_name, params)?;
    Ok(BuiltPlugin::new(type_name, name))
}

pub(crate) fn prefill_header_handler_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    legacy_header_handler(LEGACY_HEADER_HANDLERS[0], name, params)
}

pub(crate) fn disagg_headers_handler_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    legacy_header_handler(LEGACY_HEADER_HANDLERS[1], name, params)
}
