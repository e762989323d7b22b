//! `single-profile-handler`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/scheduling/profile/single_profile_handler.go):
//! runs every configured profile once (the config loader ensures there is exactly one) and makes its result
//! the primary one.

use std::sync::Arc;

use super::expect_no_params;
use crate::scheduling::{
    BuiltPlugin, FactoryContext, PluginError, ProfileCycle, ProfileHandler, ProfileRunResult,
    SchedulingRequest,
};

pub(crate) const TYPE_NAME: &str = "single-profile-handler";

#[derive(Debug, Default, Clone, Copy)]
pub struct SingleProfileHandler;

impl ProfileHandler for SingleProfileHandler {
    fn pick_profiles(&self, _: &SchedulingRequest<'_>, cycle: &ProfileCycle<'_>) -> Vec<String> {
        if !cycle.done.is_empty() {
            return Vec::new();
        }
        cycle.profiles.to_vec()
    }

    fn primary_profile(&self, results: &[(String, ProfileRunResult)]) -> Result<String, String> {
        match results {
            [(name, _)] => Ok(name.clone()),
            _ => Err(format!(
                "single-profile-handler expects exactly one profile result, got {}",
                results.len()
            )),
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).profile_handler(Arc::new(SingleProfileHandler)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    #[test]
    fn runs_every_profile_once() {
        let f = RequestFixture::empty();
        let profiles = vec!["default".to_string()];
        let cycle = |done| ProfileCycle { profiles: &profiles, done, results: &[], candidates: &[] };
        assert_eq!(SingleProfileHandler.pick_profiles(&f.request(), &cycle(&[])), profiles);
        assert!(SingleProfileHandler.pick_profiles(&f.request(), &cycle(&profiles)).is_empty());
    }

    #[test]
    fn primary_needs_exactly_one_result() {
        let r = ProfileRunResult::default();
        assert_eq!(SingleProfileHandler.primary_profile(&[("a".into(), r.clone())]), Ok("a".into()));
        assert!(SingleProfileHandler.primary_profile(&[]).is_err());
        assert!(SingleProfileHandler.primary_profile(&[("a".into(), r.clone()), ("b".into(), r)]).is_err());
    }

    #[test]
    fn rejects_parameters() {
        assert_rejects(factory, json!({"primary": "x"}), "primary");
        assert_rejects(factory, json!("x"), "parameters");
    }
}
