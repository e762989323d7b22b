//! Metric specs: which series of a page feed one field, written as a PromQL instant-vector selector.
//!
//! The grammar is the one the Go EPP's engine configs use (`name{l1=v1,l2="v2"}`): unquoted values are
//! accepted, label names starting with `__` are dropped. It is parsed by hand rather than with a regex
//! so that quoted values may hold commas and escapes. Unlike Go, a `!=`, `=~` or `!~` matcher is a
//! configuration error instead of being silently ignored: a config that says "not equal" and gets
//! "any" would route on the wrong numbers.

use std::fmt;

use super::parser::Sample;

/// A parsed spec: a metric name plus label-equality matchers. A series matches when it has every matcher
/// label with exactly that value; extra labels on the series are fine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSpec {
    name: String,
    matchers: Vec<(String, String)>,
}

/// Why a spec string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid metric specification {spec:?}: {reason}")]
pub struct SpecError {
    pub spec: String,
    pub reason: &'static str,
}

impl MetricSpec {
    /// Parses a spec. The empty string means "disabled" and yields `Ok(None)`.
    pub fn parse(text: &str) -> Result<Option<MetricSpec>, SpecError> {
        if text.is_empty() {
            return Ok(None);
        }
        let fail = |reason| SpecError { spec: text.to_string(), reason };
        let mut cursor = Cursor { bytes: text.as_bytes(), pos: 0 };
        cursor.skip_blanks();
        let name = cursor.take_while(is_metric_name_char);
        if name.is_empty() {
            return Err(fail("empty metric name"));
        }
        if name.as_bytes()[0].is_ascii_digit() {
            return Err(fail("metric name starts with a digit"));
        }
        let mut matchers = Vec::new();
        cursor.skip_blanks();
        if cursor.eat(b'{') {
            loop {
                cursor.skip_blanks();
                if cursor.eat(b'}') {
                    break;
                }
                let (label, value) = parse_matcher(&mut cursor).map_err(fail)?;
                if !label.starts_with("__") {
                    matchers.push((label, value));
                }
                cursor.skip_blanks();
                if cursor.eat(b'}') {
                    break;
                }
                if !cursor.eat(b',') {
                    return Err(fail("expected `,` or `}` after a label matcher"));
                }
            }
            cursor.skip_blanks();
        }
        if !cursor.at_end() {
            return Err(fail("unexpected text after the metric name or label block"));
        }
        Ok(Some(MetricSpec { name: name.to_string(), matchers }))
    }

    /// A spec for `name` with no label matchers.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), matchers: Vec::new() }
    }

    /// The same matchers on another metric name (used for renamed metrics).
    pub fn with_name(&self, name: impl Into<String>) -> Self {
        Self { name: name.into(), matchers: self.matchers.clone() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `(label, value)` equality matchers, values unescaped.
    pub fn matchers(&self) -> &[(String, String)] {
        &self.matchers
    }

    /// True when `sample` is a series of this spec.
    pub fn matches(&self, sample: &Sample<'_>) -> bool {
        sample.name == self.name && self.labels_match(sample)
    }

    /// True when the sample's labels satisfy every matcher (the name is not checked).
    pub fn labels_match(&self, sample: &Sample<'_>) -> bool {
        self.matchers.iter().all(|(label, want)| sample.labels.get(label).is_some_and(|got| got == *want))
    }
}

impl fmt::Display for MetricSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.matchers.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (label, value)) in self.matchers.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{label}={value:?}")?;
        }
        f.write_str("}")
    }
}

fn is_metric_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

fn is_label_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn skip_blanks(&mut self) {
        while self.bytes.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// Takes an ASCII run; the slice is valid UTF-8 because it is ASCII.
    fn take_while(&mut self, pred: fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(pred) {
            self.pos += 1;
        }
        std::str::from_utf8(&self.bytes[start..self.pos]).unwrap_or_default()
    }
}

fn parse_matcher(cursor: &mut Cursor<'_>) -> Result<(String, String), &'static str> {
    let label = cursor.take_while(is_label_name_char);
    if label.is_empty() || label.as_bytes()[0].is_ascii_digit() {
        return Err("invalid label name");
    }
    cursor.skip_blanks();
    match (cursor.peek(), cursor.bytes.get(cursor.pos + 1).copied()) {
        (Some(b'='), Some(b'~')) | (Some(b'!'), _) => return Err("only `=` label matchers are supported"),
        (Some(b'='), _) => cursor.pos += 1,
        _ => return Err("expected `=` after a label name"),
    }
    cursor.skip_blanks();
    let value = match cursor.peek() {
        Some(quote @ (b'"' | b'\'')) => {
            cursor.pos += 1;
            parse_quoted(cursor, quote)?
        }
        _ => {
            // Unquoted, as the Go regex `([^",}\s]+)` allows.
            let start = cursor.pos;
            while cursor.peek().is_some_and(|b| !matches!(b, b'"' | b',' | b'}') && !b.is_ascii_whitespace())
            {
                cursor.pos += 1;
            }
            if start == cursor.pos {
                return Err("empty unquoted label value (write \"\" for an empty value)");
            }
            String::from_utf8_lossy(&cursor.bytes[start..cursor.pos]).into_owned()
        }
    };
    Ok((label.to_string(), value))
}

fn parse_quoted(cursor: &mut Cursor<'_>, quote: u8) -> Result<String, &'static str> {
    let mut out = Vec::new();
    loop {
        match cursor.peek() {
            None => return Err("unterminated quoted label value"),
            Some(b) if b == quote => {
                cursor.pos += 1;
                break;
            }
            Some(b'\\') => {
                let escaped = match cursor.bytes.get(cursor.pos + 1) {
                    Some(b'n') => b'\n',
                    Some(b't') => b'\t',
                    Some(&b @ (b'\\' | b'"' | b'\'')) => b,
                    _ => return Err("invalid escape in a quoted label value"),
                };
                out.push(escaped);
                cursor.pos += 2;
            }
            Some(b) => {
                out.push(b);
                cursor.pos += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "label value is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::parser::parse_all;

    fn spec(s: &str) -> MetricSpec {
        MetricSpec::parse(s).unwrap().unwrap()
    }

    fn pairs(s: &MetricSpec) -> Vec<(&str, &str)> {
        s.matchers().iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
    }

    #[test]
    fn plain_name_and_empty_spec() {
        assert_eq!(spec("vllm:num_requests_waiting"), MetricSpec::named("vllm:num_requests_waiting"));
        assert_eq!(MetricSpec::parse("").unwrap(), None);
        assert_eq!(spec("  trtllm_x  ").name(), "trtllm_x");
    }

    #[test]
    fn quoted_and_unquoted_values() {
        let s = spec(r#"nv_trt_llm_request_metrics{request_type=waiting, model="a,b\"c"}"#);
        assert_eq!(s.name(), "nv_trt_llm_request_metrics");
        assert_eq!(pairs(&s), vec![("request_type", "waiting"), ("model", "a,b\"c")]);
        assert_eq!(pairs(&spec("m{a='x'}")), vec![("a", "x")]);
        assert_eq!(pairs(&spec("m{}")), Vec::<(&str, &str)>::new());
        assert_eq!(pairs(&spec("m{a=1,}")), vec![("a", "1")]);
    }

    #[test]
    fn reserved_labels_are_dropped() {
        assert_eq!(pairs(&spec(r#"m{__name__="m",a="1"}"#)), vec![("a", "1")]);
    }

    #[test]
    fn rejects_bad_specs() {
        for bad in [
            " ",
            "{a=\"1\"}",
            "1abc",
            "m{a!=\"1\"}",
            "m{a=~\"1\"}",
            "m{a!~\"1\"}",
            "m{a=\"1\"",
            "m{a}",
            "m{=1}",
            "m{a=}",
            "m{a=\"1\" b=\"2\"}",
            "m x",
            "m{a=\"\\q\"}",
            "m-x",
        ] {
            assert!(MetricSpec::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn display_round_trips() {
        let s = spec(r#"m{a=x,b="y\"z"}"#);
        assert_eq!(s.to_string(), r#"m{a="x",b="y\"z"}"#);
        assert_eq!(spec(&s.to_string()), s);
    }

    #[test]
    fn matching_requires_every_label() {
        let page = b"m{a=\"1\",b=\"2\"} 1\nm{a=\"1\"} 2\nm{a=\"x,y\"} 3\nn{a=\"1\",b=\"2\"} 4\n";
        let hits =
            |s: &str| parse_all(page).filter(|x| spec(s).matches(x)).map(|x| x.value).collect::<Vec<_>>();
        assert_eq!(hits("m"), vec![1.0, 2.0, 3.0]);
        assert_eq!(hits("m{a=1}"), vec![1.0, 2.0]);
        assert_eq!(hits("m{a=1,b=2}"), vec![1.0]);
        assert_eq!(hits(r#"m{a="x,y"}"#), vec![3.0]);
        assert_eq!(hits("m{c=\"\"}"), Vec::<f64>::new(), "a missing label never matches (as in Go)");
    }
}
