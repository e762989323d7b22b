//! Token-length distributions for prompts and outputs: `512`, `uniform:100-2000`, `lognormal:800,0.6`.
//!
//! Why hand-rolled: the only sampling needed is uniform and log-normal, and a seeded `SmallRng` plus
//! Box–Muller keeps runs reproducible without another dependency. The log-normal is given by its
//! arithmetic *mean in tokens* (what people know about their traffic) and the σ of the underlying
//! normal, so `lognormal:800,0.6` really averages ~800 tokens.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Largest length any distribution yields: keeps a heavy log-normal tail from building absurd bodies.
pub const MAX_TOKENS: u64 = 1_000_000;

/// A distribution of token counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DistributionText", into = "String")]
pub enum Distribution {
    Fixed(u64),
    /// Inclusive on both ends.
    Uniform {
        min: u64,
        max: u64,
    },
    /// `mean` is the distribution's mean in tokens; `sigma` the σ of ln(x).
    LogNormal {
        mean: f64,
        sigma: f64,
    },
}

/// What a workload file may hold: a bare number or the text form.
#[derive(Deserialize)]
#[serde(untagged)]
enum DistributionText {
    Number(u64),
    Text(String),
}

impl TryFrom<DistributionText> for Distribution {
    type Error = String;
    fn try_from(value: DistributionText) -> Result<Self, String> {
        match value {
            DistributionText::Number(n) => Distribution::fixed(n),
            DistributionText::Text(text) => text.parse(),
        }
    }
}

impl From<Distribution> for String {
    fn from(d: Distribution) -> String {
        d.to_string()
    }
}

impl Distribution {
    fn fixed(n: u64) -> Result<Self, String> {
        if n > MAX_TOKENS {
            return Err(format!("{n} is above the limit of {MAX_TOKENS} tokens"));
        }
        Ok(Distribution::Fixed(n))
    }

    /// Draws one length, clamped to `0..=MAX_TOKENS`.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match *self {
            Distribution::Fixed(n) => n,
            Distribution::Uniform { min, max } => rng.random_range(min..=max),
            Distribution::LogNormal { mean, sigma } => {
                let mu = mean.ln() - sigma * sigma / 2.0;
                let x = (mu + sigma * standard_normal(rng)).exp().round();
                if x.is_finite() {
                    (x as u64).min(MAX_TOKENS)
                } else {
                    MAX_TOKENS
                }
            }
        }
    }

    /// The smallest length this distribution can yield.
    pub fn min(&self) -> u64 {
        match *self {
            Distribution::Fixed(n) => n,
            Distribution::Uniform { min, .. } => min,
            Distribution::LogNormal { .. } => 0,
        }
    }

    /// The expected length.
    pub fn mean(&self) -> f64 {
        match *self {
            Distribution::Fixed(n) => n as f64,
            Distribution::Uniform { min, max } => (min + max) as f64 / 2.0,
            Distribution::LogNormal { mean, .. } => mean,
        }
    }
}

/// One draw from N(0, 1) by Box–Muller (the second value is dropped: simplicity over speed here).
fn standard_normal(rng: &mut impl Rng) -> f64 {
    // 1 - U lies in (0, 1], so the logarithm is finite.
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn parse_count(text: &str, what: &str) -> Result<u64, String> {
    let n: u64 = text.trim().parse().map_err(|_| format!("{what} {text:?} is not a whole number"))?;
    if n > MAX_TOKENS {
        return Err(format!("{what} {n} is above the limit of {MAX_TOKENS} tokens"));
    }
    Ok(n)
}

fn parse_float(text: &str, what: &str) -> Result<f64, String> {
    let x: f64 = text.trim().parse().map_err(|_| format!("{what} {text:?} is not a number"))?;
    if !x.is_finite() {
        return Err(format!("{what} must be finite"));
    }
    Ok(x)
}

impl FromStr for Distribution {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let Some((kind, args)) = text.split_once(':') else {
            return Distribution::fixed(parse_count(text, "token count")?);
        };
        match kind.trim() {
            "fixed" => Distribution::fixed(parse_count(args, "token count")?),
            "uniform" => {
                let (min, max) =
                    args.split_once('-').ok_or_else(|| format!("uniform needs MIN-MAX, got {args:?}"))?;
                let (min, max) = (parse_count(min, "uniform minimum")?, parse_count(max, "uniform maximum")?);
                if min > max {
                    return Err(format!("uniform minimum {min} is above the maximum {max}"));
                }
                Ok(Distribution::Uniform { min, max })
            }
            "lognormal" => {
                let (mean, sigma) = args
                    .split_once(',')
                    .ok_or_else(|| format!("lognormal needs MEAN,SIGMA, got {args:?}"))?;
                let (mean, sigma) =
                    (parse_float(mean, "lognormal mean")?, parse_float(sigma, "lognormal sigma")?);
                if mean <= 0.0 || mean > MAX_TOKENS as f64 {
                    return Err(format!("lognormal mean must be in (0, {MAX_TOKENS}], got {mean}"));
                }
                if !(0.0..=5.0).contains(&sigma) {
                    return Err(format!("lognormal sigma must be in [0, 5], got {sigma}"));
                }
                Ok(Distribution::LogNormal { mean, sigma })
            }
            other => {
                Err(format!("unknown distribution {other:?}: use N, uniform:MIN-MAX or lognormal:MEAN,SIGMA"))
            }
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Fixed(n) => write!(f, "{n}"),
            Distribution::Uniform { min, max } => write!(f, "uniform:{min}-{max}"),
            Distribution::LogNormal { mean, sigma } => write!(f, "lognormal:{mean},{sigma}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn parses_every_form_and_round_trips() {
        assert_eq!("512".parse(), Ok(Distribution::Fixed(512)));
        assert_eq!("fixed:7".parse(), Ok(Distribution::Fixed(7)));
        assert_eq!("uniform:100-2000".parse(), Ok(Distribution::Uniform { min: 100, max: 2000 }));
        assert_eq!("lognormal:800,0.6".parse(), Ok(Distribution::LogNormal { mean: 800.0, sigma: 0.6 }));
        for text in ["512", "uniform:100-2000", "lognormal:800,0.6"] {
            assert_eq!(text.parse::<Distribution>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn rejects_bad_forms_with_a_reason() {
        let err = |t: &str| t.parse::<Distribution>().unwrap_err();
        assert!(err("abc").contains("not a whole number"));
        assert!(err("uniform:10").contains("MIN-MAX"));
        assert!(err("uniform:20-10").contains("above the maximum"));
        assert!(err("lognormal:0,1").contains("mean"));
        assert!(err("lognormal:100,-1").contains("sigma"));
        assert!(err("zipf:1").contains("unknown distribution"));
        assert!(err("2000000").contains("limit"));
    }

    #[test]
    fn seeded_samples_are_reproducible_and_in_range() {
        let uniform = Distribution::Uniform { min: 100, max: 200 };
        let draw = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..1000).map(|_| uniform.sample(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(7).iter().all(|x| (100..=200).contains(x)));
    }

    #[test]
    fn lognormal_mean_is_the_token_mean() {
        let d = Distribution::LogNormal { mean: 800.0, sigma: 0.6 };
        let mut rng = SmallRng::seed_from_u64(42);
        let n = 20_000;
        let mean = (0..n).map(|_| d.sample(&mut rng) as f64).sum::<f64>() / f64::from(n);
        assert!((mean - 800.0).abs() < 25.0, "sample mean {mean}");
        let zero_sigma = Distribution::LogNormal { mean: 300.0, sigma: 0.0 };
        assert_eq!(zero_sigma.sample(&mut rng), 300);
    }
}
