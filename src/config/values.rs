//! Scalar value formats the Go EPP's config inherits from Kubernetes: `resource.Quantity` ("10Gi", "1G",
//! "500M", plain integers) and `metav1.Duration` ("60s", "200ms", "1m30s").
//!
//! They are decoded here, at load time, into plain `u64` / `Duration` so nothing downstream parses text.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A non-negative Kubernetes quantity, resolved to an integer (rounded up, as `Quantity.Value()` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct Quantity(pub u64);

/// Parses a Kubernetes quantity string: a decimal number followed by a binary suffix (Ki, Mi, Gi, Ti, Pi,
/// Ei), a decimal suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent (e3, E-2). Negative values are
/// rejected: every quantity in this config is a capacity.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let unsigned = s.strip_prefix('+').unwrap_or(s);
    if unsigned.starts_with('-') {
        return Err(format!("quantity {text:?} must not be negative"));
    }
    let number_end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
        return Err(format!("quantity {text:?} is not a number with an optional suffix (e.g. 10Gi, 500M)"));
    }
    let bad = || format!("quantity {text:?} is too large");
    let mut mantissa: u128 = 0;
    for digit in int_part.bytes().chain(frac_part.bytes()) {
        mantissa =
            mantissa.checked_mul(10).and_then(|m| m.checked_add(u128::from(digit - b'0'))).ok_or_else(bad)?;
    }
    let (binary_shift, mut exponent10): (u32, i64) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        other if other.starts_with(['e', 'E']) => {
            let exp: i64 = other[1..].parse().map_err(|_| format!("quantity {text:?} has a bad suffix"))?;
            (0, exp)
        }
        other => return Err(format!("quantity {text:?} has unknown suffix {other:?}")),
    };
    exponent10 -= i64::try_from(frac_part.len()).map_err(|_| bad())?;
    if exponent10.abs() > 38 {
        return Err(bad());
    }
    let mut numerator = mantissa.checked_shl(binary_shift).filter(|v| v >> binary_shift == mantissa);
    let mut denominator: u128 = 1;
    let pow10 = 10u128.pow(exponent10.unsigned_abs() as u32);
    if exponent10 >= 0 {
        numerator = numerator.and_then(|n| n.checked_mul(pow10));
    } else {
        denominator = pow10;
    }
    let numerator = numerator.ok_or_else(bad)?;
    let value = numerator.div_ceil(denominator);
    u64::try_from(value).map_err(|_| bad())
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;
        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative quantity such as 5000, \"10Gi\" or \"500M\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                u64::try_from(v)
                    .map(Quantity)
                    .map_err(|_| E::custom(format!("quantity {v} must not be negative")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
                    return Err(E::custom(format!("quantity {v} must be a finite non-negative number")));
                }
                Ok(Quantity(v.ceil() as u64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                parse_quantity(v).map(Quantity).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// A Go-style duration ("60s", "200ms", "1m30s", "1.5s"); the integer 0 is also accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct GoDuration(pub Duration);

/// Parses a duration string. "0" is zero; anything else goes through `humantime`, which accepts Go's
/// units (ns, us, ms, s, m, h), fractions and concatenations such as "1m30s".
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("duration {text:?} must not be negative"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("bad duration {text:?} ({e}); expected e.g. \"60s\" or \"200ms\""))
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"60s\" or \"200ms\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoDuration, E> {
                if v == 0 {
                    Ok(GoDuration(Duration::ZERO))
                } else {
                    Err(E::custom(format!("duration {v} has no unit; write e.g. \"{v}s\"")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoDuration, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("duration {v} must not be negative"))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
                parse_duration(v).map(GoDuration).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Deserializes a value whose YAML `null` (an empty key such as `plugins:`) means the default, as it does
/// in the Go decoder.
pub(super) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(parse_quantity("10Gi"), Ok(10 * (1 << 30)));
        assert_eq!(parse_quantity("5Gi"), Ok(5 * 1024 * 1024 * 1024));
        assert_eq!(parse_quantity("512Mi"), Ok(512 << 20));
        assert_eq!(parse_quantity("1G"), Ok(1_000_000_000));
        assert_eq!(parse_quantity("500M"), Ok(500_000_000));
        assert_eq!(parse_quantity("2k"), Ok(2000));
        assert_eq!(parse_quantity("1E"), Ok(1_000_000_000_000_000_000));
    }

    #[test]
    fn plain_numbers_fractions_and_exponents() {
        assert_eq!(parse_quantity("5000"), Ok(5000));
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_quantity("1500m"), Ok(2), "fractions round up like Quantity.Value()");
        assert_eq!(parse_quantity("0.5"), Ok(1));
        assert_eq!(parse_quantity("0"), Ok(0));
    }

    #[test]
    fn rejects_bad_quantities() {
        for bad in ["", "Gi", "-1Gi", "10GB", "1.2.3", "10 Gi", "99999999999Ei", "1e40"] {
            assert!(parse_quantity(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn quantity_from_yaml_int_or_string() {
        let q: Quantity = serde_yaml_ng::from_str("10Gi").unwrap();
        assert_eq!(q.0, 10 << 30);
        let q: Quantity = serde_yaml_ng::from_str("5000").unwrap();
        assert_eq!(q.0, 5000);
        assert!(serde_yaml_ng::from_str::<Quantity>("-3").is_err());
        assert!(serde_yaml_ng::from_str::<Quantity>("[1]").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("60").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn duration_from_yaml() {
        let d: GoDuration = serde_yaml_ng::from_str("\"60s\"").unwrap();
        assert_eq!(d.0, Duration::from_secs(60));
        let d: GoDuration = serde_yaml_ng::from_str("0").unwrap();
        assert_eq!(d.0, Duration::ZERO);
        let e = serde_yaml_ng::from_str::<GoDuration>("60").unwrap_err();
        assert!(e.to_string().contains("no unit"), "{e}");
    }
}
