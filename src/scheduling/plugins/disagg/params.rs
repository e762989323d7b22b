//! `disagg-profile-handler`'s parameters (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/
//! profilehandler/disagg/disagg_profile_handler.go): the nested form, and the deprecated flat one, which is
//! accepted with a warning per field. Mixing the two is an error naming both schemas' complaints.

use serde::Deserialize;

use crate::scheduling::PluginError;

/// Which stage's profile runs first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StageOrder {
    /// Decode, then encode and prefill if their deciders say so (they may read the decode pick).
    #[default]
    DecodeFirst,
    /// Prefill, then encode, then decode; no prefill decider (there is no decode pick to ask about).
    PrefillFirst,
}

impl StageOrder {
    /// llm-d's spellings: case, `-` and `_` are ignored, and `decode` / `prefill` are accepted.
    fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "" | "decodefirst" | "decode" => Ok(Self::DecodeFirst),
            "prefillfirst" | "prefill" => Ok(Self::PrefillFirst),
            _ => Err(format!("stageOrder {s:?} is not \"decode-first\" or \"prefill-first\"")),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profiles {
    decode: Option<String>,
    prefill: Option<String>,
    encode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Deciders {
    prefill: Option<String>,
    encode: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Nested {
    stage_order: Option<String>,
    #[serde(default)]
    profiles: Profiles,
    #[serde(default)]
    deciders: Deciders,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Legacy {
    stage_order: Option<String>,
    decode_profile: Option<String>,
    prefill_profile: Option<String>,
    encode_profile: Option<String>,
    prefill_decider_plugin_name: Option<String>,
    encode_decider_plugin_name: Option<String>,
    decider_plugin_name: Option<String>,
}

/// The handler's settings, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisaggSettings {
    pub stage_order: StageOrder,
    pub decode_profile: String,
    pub prefill_profile: String,
    pub encode_profile: String,
    /// Plugin names of the deciders; `None` disables that stage.
    pub prefill_decider: Option<String>,
    pub encode_decider: Option<String>,
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn deprecated(name: &str, old: &str, new: &str, value: Option<String>) -> Option<String> {
    let value = nonempty(value);
    if value.is_some() {
        tracing::warn!(plugin = name, "disagg-profile-handler: parameter {old:?} is deprecated; use {new:?}");
    }
    value
}

impl Legacy {
    fn into_nested(self, name: &str) -> Nested {
        let prefill = deprecated(
            name,
            "prefillDeciderPluginName",
            "deciders.prefill",
            self.prefill_decider_plugin_name,
        )
        .or_else(|| deprecated(name, "deciderPluginName", "deciders.prefill", self.decider_plugin_name));
        Nested {
            stage_order: self.stage_order,
            profiles: Profiles {
                decode: deprecated(name, "decodeProfile", "profiles.decode", self.decode_profile),
                prefill: deprecated(name, "prefillProfile", "profiles.prefill", self.prefill_profile),
                encode: deprecated(name, "encodeProfile", "profiles.encode", self.encode_profile),
            },
            deciders: Deciders {
                prefill,
                encode: deprecated(
                    name,
                    "encodeDeciderPluginName",
                    "deciders.encode",
                    self.encode_decider_plugin_name,
                ),
            },
        }
    }
}

/// Parses the handler's parameters (absent: decode-only, the default profile names).
pub(super) fn parse(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Result<DisaggSettings, PluginError> {
    let err = |m: String| PluginError::new(name, type_name, m);
    let empty = serde_json::json!({});
    let value = params.filter(|v| !v.is_null()).unwrap_or(&empty);
    let nested = match serde_path_to_error::deserialize::<_, Nested>(value) {
        Ok(n) => n,
        Err(nested_err) => match serde_path_to_error::deserialize::<_, Legacy>(value) {
            Ok(legacy) => {
                tracing::warn!(
                    plugin = name,
                    "disagg-profile-handler: flat parameters are deprecated; use profiles/deciders"
                );
                legacy.into_nested(name)
            }
            Err(legacy_err) => {
                return Err(err(format!(
                "parameters fit neither schema (use either nested profiles/deciders or the deprecated flat \
                     fields): nested: {} at {}; flat: {} at {}",
                nested_err.inner(),
                nested_err.path(),
                legacy_err.inner(),
                legacy_err.path()
            )))
            }
        },
    };
    let stage_order = StageOrder::parse(nested.stage_order.as_deref().unwrap_or("")).map_err(err)?;
    let prefill_decider = nonempty(nested.deciders.prefill);
    if stage_order == StageOrder::PrefillFirst && prefill_decider.is_some() {
        return Err(err("deciders.prefill is not supported with stageOrder prefill-first".to_string()));
    }
    let or = |v: Option<String>, d: &str| nonempty(v).unwrap_or_else(|| d.to_string());
    Ok(DisaggSettings {
        stage_order,
        decode_profile: or(nested.profiles.decode, "decode"),
        prefill_profile: or(nested.profiles.prefill, "prefill"),
        encode_profile: or(nested.profiles.encode, "encode"),
        prefill_decider,
        encode_decider: nonempty(nested.deciders.encode),
    })
}

/// The deprecated `pd-profile-handler`'s parameters
/// (llm-d/llm-d-router:pkg/epp/framework/plugins/scheduling/profilehandler/disagg/pd_profile_handler.go).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LegacyPd {
    decode_profile: Option<String>,
    prefill_profile: Option<String>,
    decider_plugin_name: Option<String>,
    /// Accepted and ignored: epp reads the prefix match the producers wrote, whichever produced it.
    prefix_plugin_type: Option<String>,
    prefix_plugin_name: Option<String>,
    prefix_match_info_producer_name: Option<String>,
    /// Deprecated upstream (not needed with Istio >= 1.28.1); checked, then ignored.
    primary_port: Option<i64>,
}

/// `pd-profile-handler`: decode first, with the decider `deciderPluginName` (default
/// `prefix-based-pd-decider`, which must then be declared).
pub(super) fn parse_legacy_pd(
    name: &str,
    type_name: &str,
    params: Option<&serde_json::Value>,
) -> Result<DisaggSettings, PluginError> {
    let p: LegacyPd = crate::scheduling::parse_params(name, type_name, params)?;
    if let Some(port) = p.primary_port.filter(|p| *p != 0) {
        if !(1..=65535).contains(&port) {
            return Err(PluginError::new(
                name,
                type_name,
                format!("primaryPort must be in 1..=65535, got {port}"),
            ));
        }
        tracing::warn!(plugin = name, "pd-profile-handler: primaryPort is deprecated and ignored");
    }
    let _ignored = (p.prefix_plugin_type, p.prefix_plugin_name, p.prefix_match_info_producer_name);
    let or = |v: Option<String>, d: &str| nonempty(v).unwrap_or_else(|| d.to_string());
    Ok(DisaggSettings {
        stage_order: StageOrder::DecodeFirst,
        decode_profile: or(p.decode_profile, "decode"),
        prefill_profile: or(p.prefill_profile, "prefill"),
        encode_profile: "encode".into(),
        prefill_decider: Some(or(p.decider_plugin_name, "prefix-based-pd-decider")),
        encode_decider: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: serde_json::Value) -> DisaggSettings {
        parse("h", "disagg-profile-handler", Some(&v)).unwrap()
    }

    #[test]
    fn defaults_and_nested_form() {
        let s = parse("h", "disagg-profile-handler", None).unwrap();
        assert_eq!((s.decode_profile.as_str(), s.prefill_profile.as_str()), ("decode", "prefill"));
        assert_eq!((s.stage_order, s.prefill_decider), (StageOrder::DecodeFirst, None));
        let s = ok(
            json!({"deciders": {"prefill": "d"}, "profiles": {"decode": "dec"}, "stageOrder": "decode_first"}),
        );
        assert_eq!((s.prefill_decider.as_deref(), s.decode_profile.as_str()), (Some("d"), "dec"));
    }

    #[test]
    fn legacy_flat_form_is_translated() {
        let s = ok(json!({"deciderPluginName": "d", "decodeProfile": "dec", "prefillProfile": "pre"}));
        assert_eq!(s.prefill_decider.as_deref(), Some("d"));
        assert_eq!((s.decode_profile.as_str(), s.prefill_profile.as_str()), ("dec", "pre"));
        let s = ok(json!({"prefillDeciderPluginName": "a", "deciderPluginName": "b"}));
        assert_eq!(s.prefill_decider.as_deref(), Some("a"));
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = parse("h", "t", Some(&json!({"deciders": {"prefil": "d"}}))).unwrap_err();
        assert!(e.message.contains("prefil"), "{e}");
        let e = parse("h", "t", Some(&json!({"stageOrder": "sideways"}))).unwrap_err();
        assert!(e.message.contains("sideways"), "{e}");
        let e = parse("h", "t", Some(&json!({"stageOrder": "prefill-first", "deciders": {"prefill": "d"}})))
            .unwrap_err();
        assert!(e.message.contains("prefill-first"), "{e}");
        let mixed = json!({"deciders": {"prefill": "d"}, "decodeProfile": "x"});
        assert!(parse("h", "t", Some(&mixed)).unwrap_err().message.contains("neither schema"));
    }

    #[test]
    fn the_deprecated_pd_profile_handler_maps_onto_the_same_settings() {
        let s = parse_legacy_pd("h", "pd-profile-handler", None).unwrap();
        assert_eq!(s.prefill_decider.as_deref(), Some("prefix-based-pd-decider"));
        let v = json!({"deciderPluginName": "d", "prefillProfile": "p", "primaryPort": 8000, "prefixPluginType": "x"});
        let s = parse_legacy_pd("h", "pd-profile-handler", Some(&v)).unwrap();
        assert_eq!((s.prefill_decider.as_deref(), s.prefill_profile.as_str()), (Some("d"), "p"));
        assert!(parse_legacy_pd("h", "t", Some(&json!({"primaryPort": 70000}))).is_err());
        let e = parse_legacy_pd("h", "t", Some(&json!({"threshold": 0}))).unwrap_err();
        assert!(e.message.contains("threshold"), "{e}");
    }
}
