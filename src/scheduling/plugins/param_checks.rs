//! Parameter validation shared by the plugins (first the two saturation detectors, then the
//! predicted-latency ones).
//!
//! Both detectors distinguish "unset" from an explicit value (Go uses pointers for this): an unset
//! parameter takes its default, while an explicit `0` where `> 0` is required is an error rather than a
//! silent fallback to the default, because an operator who wrote `0` meant something and should be told.

use crate::scheduling::PluginError;

/// A parameter value outside its valid range, naming the parameter (as written in the config).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parameter `{field}` {message}")]
pub struct InvalidParameter {
    pub field: String,
    pub message: String,
}

impl InvalidParameter {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }

    /// The same error attributed to plugin instance `name` of type `type_name`.
    pub fn for_plugin(self, name: &str, type_name: &str) -> PluginError {
        PluginError::new(name, type_name, self.to_string())
    }
}

/// `value` if set (it must be > 0), else `default`.
pub(crate) fn positive_int(field: &str, value: Option<i64>, default: i64) -> Result<i64, InvalidParameter> {
    match value {
        None => Ok(default),
        Some(v) if v > 0 => Ok(v),
        Some(v) => Err(InvalidParameter::new(field, format!("must be > 0, got {v}"))),
    }
}

/// `value` if set (it must be ≥ 0), else `default`.
pub(crate) fn non_negative_int(
    field: &str,
    value: Option<i64>,
    default: u64,
) -> Result<u64, InvalidParameter> {
    match value {
        None => Ok(default),
        Some(v) => {
            u64::try_from(v).map_err(|_| InvalidParameter::new(field, format!("must be >= 0, got {v}")))
        }
    }
}

/// `value` if set, else `default`; finite and ≥ 0.
pub(crate) fn non_negative(field: &str, value: Option<f64>, default: f64) -> Result<f64, InvalidParameter> {
    let v = value.unwrap_or(default);
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(InvalidParameter::new(field, format!("must be a number >= 0, got {v}")))
    }
}

/// `value` if set, else `default`; finite and > 0.
pub(crate) fn positive(field: &str, value: Option<f64>, default: f64) -> Result<f64, InvalidParameter> {
    let v = value.unwrap_or(default);
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(InvalidParameter::new(field, format!("must be a number > 0, got {v}")))
    }
}

/// `value` if set, else `default`; within [0, 1].
pub(crate) fn unit_fraction(field: &str, value: Option<f64>, default: f64) -> Result<f64, InvalidParameter> {
    let v = value.unwrap_or(default);
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(InvalidParameter::new(field, format!("must be within [0, 1], got {v}")))
    }
}

/// `value` parsed as a duration ("200ms", "1m30s") if set, else `default`.
pub(crate) fn duration(
    field: &str,
    value: Option<&str>,
    default: std::time::Duration,
) -> Result<std::time::Duration, InvalidParameter> {
    let Some(text) = value else { return Ok(default) };
    humantime::parse_duration(text.trim())
        .map_err(|e| InvalidParameter::new(field, format!("{text:?} is not a duration such as \"2s\": {e}")))
}

/// Checks a burst headroom fraction: finite and ≥ 0. Values above 1.0 (more than doubling the ideal
/// threshold) are accepted, as upstream does, but logged because they are rarely intended.
pub(crate) fn check_headroom(plugin: &str, headroom: f64) -> Result<f64, InvalidParameter> {
    if !headroom.is_finite() || headroom < 0.0 {
        return Err(InvalidParameter::new("headroom", format!("must be a number >= 0.0, got {headroom}")));
    }
    if headroom > 1.0 {
        tracing::warn!(
            plugin,
            headroom,
            "headroom above 1.0 lets endpoints take more than twice their ideal load before they are filtered"
        );
    }
    Ok(headroom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_int_distinguishes_unset_from_zero() {
        assert_eq!(positive_int("x", None, 7), Ok(7));
        assert_eq!(positive_int("x", Some(3), 7), Ok(3));
        let e = positive_int("x", Some(0), 7).unwrap_err();
        assert_eq!(e.to_string(), "parameter `x` must be > 0, got 0");
        assert!(positive_int("x", Some(-2), 7).is_err());
    }

    #[test]
    fn float_ranges() {
        assert_eq!(non_negative("w", None, 0.8), Ok(0.8));
        assert_eq!(non_negative("w", Some(0.0), 0.8), Ok(0.0));
        assert!(non_negative("w", Some(f64::NAN), 0.8).is_err());
        assert!(positive("w", Some(0.0), 1.0).is_err());
        assert_eq!(unit_fraction("p", Some(1.0), 0.0), Ok(1.0));
        assert_eq!(unit_fraction("p", Some(1.5), 0.0).unwrap_err().field, "p");
    }

    #[test]
    fn headroom_range() {
        assert_eq!(check_headroom("p", 0.0), Ok(0.0));
        assert_eq!(check_headroom("p", 2.5), Ok(2.5));
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            let e = check_headroom("p", bad).unwrap_err();
            assert_eq!(e.field, "headroom");
        }
    }

    #[test]
    fn plugin_error_names_plugin_and_field() {
        let e = InvalidParameter::new("maxConcurrency", "must be > 0, got 0").for_plugin("det", "t");
        let text = e.to_string();
        assert!(text.contains("\"det\"") && text.contains("`maxConcurrency`"), "{text}");
    }
}
