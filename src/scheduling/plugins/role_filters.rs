//! The P/D role filters `prefill-filter`, `decode-filter` and `encode-filter`
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go): each keeps the pods
//! whose `llm-d.ai/role` names its stage ([`PodRole`]). `decode-filter` also keeps pods without the label,
//! which serve whole requests; the other two do not.

use std::sync::Arc;

use super::expect_no_params;
use crate::datastore::PodRole;
use crate::scheduling::{BuiltPlugin, Candidate, FactoryContext, Filter, PluginError, SchedulingRequest};

pub(crate) const PREFILL: &str = "prefill-filter";
pub(crate) const DECODE: &str = "decode-filter";
pub(crate) const ENCODE: &str = "encode-filter";

/// Keeps the pods serving one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoleFilter {
    Prefill,
    Decode,
    Encode,
}

impl RoleFilter {
    fn keeps(self, role: PodRole) -> bool {
        match self {
            RoleFilter::Prefill => role.prefill,
            RoleFilter::Decode => role.decode,
            RoleFilter::Encode => role.encode,
        }
    }
}

impl Filter for RoleFilter {
    fn filter(&self, _: &SchedulingRequest<'_>, candidates: &[Candidate], kept: &mut Vec<usize>) {
        kept.retain(|&i| self.keeps(PodRole::of(&candidates[i].endpoint)));
    }
}

fn build(
    type_name: &'static str,
    filter: RoleFilter,
    name: &str,
    params: Option<&serde_json::Value>,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, type_name, params)?;
    Ok(BuiltPlugin::new(type_name, name).filter(Arc::new(filter)))
}

pub(crate) fn prefill_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    build(PREFILL, RoleFilter::Prefill, name, params)
}

pub(crate) fn decode_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    build(DECODE, RoleFilter::Decode, name, params)
}

pub(crate) fn encode_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    build(ENCODE, RoleFilter::Encode, name, params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    /// Candidates labelled with `roles` (`None`: no label), in order.
    fn role_pool(roles: &[Option<&str>]) -> Vec<Candidate> {
        roles
            .iter()
            .enumerate()
            .map(|(i, role)| Candidate::new(labelled_endpoint(i as u8 + 1, &[("llm-d.ai/role", *role)])))
            .collect()
    }

    fn kept(filter: RoleFilter, c: &[Candidate]) -> Vec<usize> {
        let f = RequestFixture::empty();
        let mut kept: Vec<usize> = (0..c.len()).collect();
        filter.filter(&f.request(), c, &mut kept);
        kept
    }

    #[test]
    fn each_filter_keeps_its_stage_and_interleaved_roles() {
        let c = role_pool(&[
            Some("prefill"),
            Some("decode"),
            Some("prefill-decode"),
            None,
            Some("encode"),
            Some("encode-prefill-decode"),
            Some("unknown"),
        ]);
        assert_eq!(kept(RoleFilter::Prefill, &c), [0, 2, 5]);
        assert_eq!(kept(RoleFilter::Decode, &c), [1, 2, 3, 5, 6]);
        assert_eq!(kept(RoleFilter::Encode, &c), [4, 5]);
    }

    #[test]
    fn role_filters_take_no_parameters() {
        assert_rejects(prefill_factory, json!({"label": "x"}), "label");
        assert_rejects(decode_factory, json!({"x": 1}), "x");
    }
}
