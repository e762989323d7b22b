//! The deciders a disaggregation handler asks whether a stage runs
//! (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/profilehandler/disagg/*_decider.go).
//!
//! `prefix-based-pd-decider` disaggregates when the part of the prompt the chosen decode pod does not
//! hold is at least `nonCachedTokens` (0, the default, turns P/D off), and, with `promptTokens` > 0, only
//! prompts of at least that many tokens. The decode pod's hit is its prefix match ratio times the prompt
//! (llm-d multiplies matched blocks by the block size; the same figure, for approximate and precise
//! matches alike). It consumes the prefix match, so the loader adds `approx-prefix-cache-producer` when no
//! prefix producer is declared. `always-disagg-pd-decider` always disaggregates.
//! `always-disagg-multimodal-decider` (the encode stage's) fires when the request carries media: an
//! `image_url`, `audio_url`, `video_url` or `input_audio` part.

use std::sync::Arc;

use serde::Deserialize;

use super::super::expect_no_params;
use super::super::param_checks::non_negative_int;
use crate::scheduling::{
    parse_params, BuiltPlugin, Candidate, DataKey, Decider, FactoryContext, PluginError, SchedulingRequest,
};

pub(crate) const PREFIX_BASED: &str = "prefix-based-pd-decider";
pub(crate) const ALWAYS: &str = "always-disagg-pd-decider";
pub(crate) const MULTIMODAL: &str = "always-disagg-multimodal-decider";

/// The content-part types that carry media (llm-d/llm-d-router:…/disagg/always_disagg_mm_decider.go).
const MEDIA_KEYS: [&str; 4] = ["\"image_url\"", "\"audio_url\"", "\"video_url\"", "\"input_audio\""];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PrefixParams {
    non_cached_tokens: Option<i64>,
    prompt_tokens: Option<i64>,
}

/// Disaggregates prompts whose uncached part on the decode pod is large enough.
#[derive(Debug, Clone, Copy)]
pub struct PrefixBasedDecider {
    non_cached_tokens: u64,
    prompt_tokens: u64,
}

impl Decider for PrefixBasedDecider {
    fn disaggregate(&self, req: &SchedulingRequest<'_>, decode: &Candidate) -> bool {
        if self.non_cached_tokens == 0 {
            return false;
        }
        let prompt = req.token_ids.map_or(req.input_tokens, |t| t.len() as u64);
        if prompt < self.prompt_tokens || prompt < self.non_cached_tokens {
            return false;
        }
        let cached = (prompt as f64 * decode.attrs.prefix_ratio()).round() as u64;
        prompt.saturating_sub(cached) >= self.non_cached_tokens
    }
}

/// Disaggregates every request.
#[derive(Debug, Clone, Copy)]
pub struct AlwaysDecider;

impl Decider for AlwaysDecider {
    fn disaggregate(&self, _: &SchedulingRequest<'_>, _: &Candidate) -> bool {
        true
    }
}

/// Disaggregates (runs the encode stage for) requests with media parts.
#[derive(Debug, Clone, Copy)]
pub struct MultimodalDecider;

impl Decider for MultimodalDecider {
    fn disaggregate(&self, req: &SchedulingRequest<'_>, _: &Candidate) -> bool {
        // A key in the body's JSON: the same text inside a string would be escaped (`\"image_url\"`), so
        // a prompt that merely mentions it does not match.
        MEDIA_KEYS.iter().any(|k| memchr::memmem::find(req.body, k.as_bytes()).is_some())
    }
}

pub(crate) fn prefix_based_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    let p: PrefixParams = parse_params(name, PREFIX_BASED, params)?;
    let check = |field: &str, v: Option<i64>| {
        non_negative_int(field, v, 0).map_err(|e| e.for_plugin(name, PREFIX_BASED))
    };
    let decider = PrefixBasedDecider {
        non_cached_tokens: check("nonCachedTokens", p.non_cached_tokens)?,
        prompt_tokens: check("promptTokens", p.prompt_tokens)?,
    };
    if decider.non_cached_tokens == 0 {
        tracing::info!(
            plugin = name,
            "prefix-based-pd-decider: nonCachedTokens is 0, so it never disaggregates"
        );
    }
    Ok(BuiltPlugin::new(PREFIX_BASED, name).decider(Arc::new(decider)).consumes(&[DataKey::PrefixCacheMatch]))
}

pub(crate) fn multimodal_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, MULTIMODAL, params)?;
    Ok(BuiltPlugin::new(MULTIMODAL, name).decider(Arc::new(MultimodalDecider)))
}

pub(crate) fn always_factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, ALWAYS, params)?;
    Ok(BuiltPlugin::new(ALWAYS, name).decider(Arc::new(AlwaysDecider)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use crate::scheduling::PrefixMatch;
    use serde_json::json;

    fn decides(params: serde_json::Value, prompt_tokens: u64, cached_fraction: f64) -> bool {
        let built = build(prefix_based_factory, params).unwrap();
        let mut c = Candidate::new(endpoint(1));
        let total = 100;
        let matched = (cached_fraction * total as f64) as usize;
        c.attrs.prefix = Some(PrefixMatch { match_blocks: matched, total_blocks: total, block_chars: 64 });
        let mut f = RequestFixture::empty();
        f.estimated_tokens = prompt_tokens * 2;
        built.decider.unwrap().disaggregate(&f.request(), &c)
    }

    #[test]
    fn disaggregates_when_the_uncached_part_is_large_enough() {
        let p = json!({"nonCachedTokens": 1000});
        assert!(decides(p.clone(), 4000, 0.5));
        assert!(!decides(p.clone(), 4000, 0.8));
        assert!(!decides(p.clone(), 900, 0.0));
        assert!(decides(p, 1000, 0.0));
    }

    #[test]
    fn zero_threshold_disables_and_prompt_gate_applies() {
        assert!(!decides(json!({}), 100_000, 0.0));
        let p = json!({"nonCachedTokens": 100, "promptTokens": 2000});
        assert!(!decides(p.clone(), 1999, 0.0));
        assert!(decides(p, 2000, 0.0));
    }

    #[test]
    fn the_multimodal_decider_fires_on_media_parts_only() {
        let decider = MultimodalDecider;
        let c = Candidate::new(endpoint(1));
        let with = |body: &str| {
            let mut f = RequestFixture::empty();
            f.body = body.as_bytes().to_vec();
            decider.disaggregate(&f.request(), &c)
        };
        assert!(with(r#"{"messages":[{"content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#));
        assert!(with(r#"{"messages":[{"content":[{"type":"input_audio","input_audio":{}}]}]}"#));
        assert!(!with(r#"{"messages":[{"content":"what is an \"image_url\" part?"}]}"#));
    }

    #[test]
    fn parameters_are_checked() {
        assert_rejects(prefix_based_factory, json!({"nonCachedTokens": -1}), "nonCachedTokens");
        assert_rejects(prefix_based_factory, json!({"threshold": 5}), "threshold");
        assert_rejects(always_factory, json!({"x": 1}), "x");
        assert!(build(prefix_based_factory, json!({}))
            .unwrap()
            .consumes
            .contains(&DataKey::PrefixCacheMatch));
    }
}
