//! The value types lab files are written in: virtual durations and length distributions, with the
//! samplers behind them.
//!
//! Why hand-rolled samplers: the lab must give identical output for identical inputs on every platform
//! and every dependency upgrade, so each draw is a fixed formula over `SmallRng` uniforms (Box–Muller for
//! normals, inversion for exponentials) rather than a distribution crate whose algorithms may change.

use std::fmt;

use rand::rngs::SmallRng;
use rand::Rng;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// A span of virtual time in seconds, written either as a number of seconds (`1.5`) or as a duration
/// string (`"90s"`, `"250ms"`, `"1h"`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Seconds(pub f64);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SecondsVisitor;
        impl Visitor<'_> for SecondsVisitor {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of seconds or a duration such as \"90s\" or \"250ms\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seconds, E> {
                if v.is_finite() && v >= 0.0 {
                    Ok(Seconds(v))
                } else {
                    Err(E::custom(format!("{v} is not a non-negative number of seconds")))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seconds, E> {
                Ok(Seconds(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds, E> {
                self.visit_f64(v as f64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seconds, E> {
                epp::config::parse_duration(v).map(|d| Seconds(d.as_secs_f64())).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(SecondsVisitor)
    }
}

/// A distribution of token counts, written as a one-key map: `{constant: 100}`,
/// `{uniform: {min: 10, max: 90}}`, `{normal: {mean: 500, stddev: 100}}` or
/// `{lognormal: {mean: 500, stddev: 400, max: 8000}}`. Samples are rounded and clamped to `[1, max]`.
#[derive(Debug, Clone, PartialEq)]
pub enum LengthDist {
    /// Always this many.
    Constant(u32),
    /// Uniform over `min..=max`.
    Uniform { min: u32, max: u32 },
    /// Normal with this mean and standard deviation.
    Normal { mean: f64, stddev: f64, max: Option<u32> },
    /// Log-normal whose own mean and standard deviation (not those of its logarithm) are given: the
    /// long-tailed shape of real prompt and output lengths.
    Lognormal { mean: f64, stddev: f64, max: Option<u32> },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UniformParams {
    min: u32,
    max: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpreadParams {
    mean: f64,
    stddev: f64,
    #[serde(default)]
    max: Option<u32>,
}

impl<'de> Deserialize<'de> for LengthDist {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DistVisitor;
        impl<'de> Visitor<'de> for DistVisitor {
            type Value = LengthDist;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a distribution such as {constant: 100} or {uniform: {min: 10, max: 90}}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LengthDist, A::Error> {
                const KINDS: &[&str] = &["constant", "uniform", "normal", "lognormal"];
                let dist = match single_key(&mut map, KINDS)?.as_str() {
                    "constant" => LengthDist::Constant(map.next_value()?),
                    "uniform" => {
                        let p: UniformParams = map.next_value()?;
                        LengthDist::Uniform { min: p.min, max: p.max }
                    }
                    "normal" => {
                        let p: SpreadParams = map.next_value()?;
                        LengthDist::Normal { mean: p.mean, stddev: p.stddev, max: p.max }
                    }
                    other => {
                        debug_assert_eq!(other, "lognormal");
                        let p: SpreadParams = map.next_value()?;
                        LengthDist::Lognormal { mean: p.mean, stddev: p.stddev, max: p.max }
                    }
                };
                no_more_keys(&mut map)?;
                Ok(dist)
            }
        }
        deserializer.deserialize_map(DistVisitor)
    }
}

/// Reads the key of a one-key map that names a variant (serde_yaml_ng only maps enums from YAML tags,
/// and `{uniform: {...}}` reads better than `!uniform {...}`).
pub(crate) fn single_key<'de, A: MapAccess<'de>>(
    map: &mut A,
    kinds: &'static [&'static str],
) -> Result<String, A::Error> {
    let key: String =
        map.next_key()?.ok_or_else(|| de::Error::custom(format!("expected one of: {}", kinds.join(", "))))?;
    if !kinds.contains(&key.as_str()) {
        return Err(de::Error::unknown_variant(&key, kinds));
    }
    Ok(key)
}

/// Fails when a one-key map has a second key.
pub(crate) fn no_more_keys<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    match map.next_key::<String>()? {
        None => Ok(()),
        Some(extra) => Err(de::Error::custom(format!("give exactly one kind; found a second key `{extra}`"))),
    }
}

impl LengthDist {
    /// Checks the parameters; `field` names the value in error messages.
    pub fn validate(&self, field: &str) -> Result<(), super::LabError> {
        let bad = |message: String| Err(super::LabError::invalid(field, message));
        match *self {
            LengthDist::Constant(0) => bad("constant must be at least 1".into()),
            LengthDist::Uniform { min, max } if min == 0 || min > max => {
                bad(format!("uniform needs 1 <= min <= max, got min {min}, max {max}"))
            }
            LengthDist::Normal { mean, stddev, max } | LengthDist::Lognormal { mean, stddev, max } => {
                if !(mean.is_finite() && mean >= 1.0) {
                    return bad(format!("mean must be a finite number >= 1, got {mean}"));
                }
                if !(stddev.is_finite() && stddev >= 0.0) {
                    return bad(format!("stddev must be a finite number >= 0, got {stddev}"));
                }
                if max == Some(0) {
                    return bad("max must be at least 1".into());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut SmallRng) -> u32 {
        let (value, max) = match *self {
            LengthDist::Constant(n) => return n.max(1),
            LengthDist::Uniform { min, max } => return rng.random_range(min.max(1)..=max.max(min).max(1)),
            LengthDist::Normal { mean, stddev, max } => (mean + stddev * standard_normal(rng), max),
            LengthDist::Lognormal { mean, stddev, max } => {
                // E[X] = exp(mu + s²/2), Var[X] = (exp(s²) − 1)·E[X]².
                let s2 = (1.0 + (stddev / mean).powi(2)).ln();
                let mu = mean.ln() - s2 / 2.0;
                ((mu + s2.sqrt() * standard_normal(rng)).exp(), max)
            }
        };
        let clamped = value.round().clamp(1.0, f64::from(max.unwrap_or(u32::MAX)));
        clamped as u32
    }

    /// The largest value a draw can take, when bounded.
    pub fn upper_bound(&self) -> Option<u32> {
        match *self {
            LengthDist::Constant(n) => Some(n),
            LengthDist::Uniform { max, .. } => Some(max),
            LengthDist::Normal { max, .. } | LengthDist::Lognormal { max, .. } => max,
        }
    }
}

/// A standard normal draw (Box–Muller).
pub fn standard_normal(rng: &mut SmallRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// An exponential draw with the given mean (inversion).
pub fn exponential(rng: &mut SmallRng, mean: f64) -> f64 {
    let u: f64 = 1.0 - rng.random::<f64>();
    -u.ln() * mean
}

/// Index drawn in proportion to `weights` (which must not all be zero).
pub fn weighted_index(rng: &mut SmallRng, weights: &[f64], total: f64) -> usize {
    let mut x = rng.random::<f64>() * total;
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return i;
        }
        x -= w;
    }
    weights.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn seconds_accept_numbers_and_durations() {
        let s: Vec<Seconds> = serde_yaml_ng::from_str("[1.5, 2, \"250ms\", \"1h\"]").unwrap();
        assert_eq!(s, vec![Seconds(1.5), Seconds(2.0), Seconds(0.25), Seconds(3600.0)]);
        assert!(serde_yaml_ng::from_str::<Seconds>("-1").is_err());
        assert!(serde_yaml_ng::from_str::<Seconds>("\"soon\"").is_err());
    }

    #[test]
    fn distributions_parse_and_reject_unknown_fields() {
        let d: LengthDist = serde_yaml_ng::from_str("{uniform: {min: 2, max: 5}}").unwrap();
        assert_eq!(d, LengthDist::Uniform { min: 2, max: 5 });
        let d: LengthDist = serde_yaml_ng::from_str("{constant: 7}").unwrap();
        assert_eq!(d, LengthDist::Constant(7));
        assert!(serde_yaml_ng::from_str::<LengthDist>("{normal: {mean: 5, stdev: 1}}").is_err());
        assert!(serde_yaml_ng::from_str::<LengthDist>("{zipf: 3}").is_err());
        assert!(serde_yaml_ng::from_str::<LengthDist>("{constant: 3, uniform: {min: 1, max: 2}}").is_err());
        assert!(serde_yaml_ng::from_str::<LengthDist>("{}").is_err());
        let d: LengthDist = serde_yaml_ng::from_str("{lognormal: {mean: 5, stddev: 1, max: 9}}").unwrap();
        assert_eq!(d, LengthDist::Lognormal { mean: 5.0, stddev: 1.0, max: Some(9) });
    }

    #[test]
    fn validation_names_the_field() {
        let e = LengthDist::Uniform { min: 5, max: 2 }.validate("prompt_tokens").unwrap_err();
        assert!(e.to_string().contains("prompt_tokens"), "{e}");
        assert!(LengthDist::Constant(0).validate("x").is_err());
        assert!(LengthDist::Lognormal { mean: 0.5, stddev: 1.0, max: None }.validate("x").is_err());
        assert!(LengthDist::Normal { mean: 100.0, stddev: 10.0, max: Some(200) }.validate("x").is_ok());
    }

    #[test]
    fn samples_stay_in_range_and_have_the_right_mean() {
        let mut rng = SmallRng::seed_from_u64(1);
        let lognormal = LengthDist::Lognormal { mean: 400.0, stddev: 300.0, max: Some(5000) };
        let n = 20_000;
        let draws: Vec<u32> = (0..n).map(|_| lognormal.sample(&mut rng)).collect();
        assert!(draws.iter().all(|&d| (1..=5000).contains(&d)));
        let mean = draws.iter().map(|&d| f64::from(d)).sum::<f64>() / f64::from(n);
        assert!((370.0..430.0).contains(&mean), "mean {mean}");
        let uniform = LengthDist::Uniform { min: 3, max: 4 };
        assert!((0..100).all(|_| (3..=4).contains(&uniform.sample(&mut rng))));
        let normal = LengthDist::Normal { mean: 2.0, stddev: 50.0, max: None };
        assert!((0..100).all(|_| normal.sample(&mut rng) >= 1));
    }

    #[test]
    fn weighted_index_follows_weights() {
        let mut rng = SmallRng::seed_from_u64(3);
        let weights = [0.0, 3.0, 1.0];
        let mut counts = [0; 3];
        for _ in 0..4000 {
            counts[weighted_index(&mut rng, &weights, 4.0)] += 1;
        }
        assert_eq!(counts[0], 0);
        assert!((2700..3300).contains(&counts[1]), "{counts:?}");
    }

    #[test]
    fn exponential_mean() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mean = (0..20_000).map(|_| exponential(&mut rng, 2.0)).sum::<f64>() / 20_000.0;
        assert!((1.9..2.1).contains(&mean), "{mean}");
    }
}
