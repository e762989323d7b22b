//! Request headers as epp keeps them: lower-case names, in arrival order.

/// A small ordered header list with case-insensitive lookup (names are stored lower-case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    entries: Vec<(String, String)>,
}

impl Headers {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty list with room for `n` headers.
    pub fn with_capacity(n: usize) -> Self {
        Self { entries: Vec::with_capacity(n) }
    }

    /// Adds a header; the name is lower-cased.
    pub fn push(&mut self, name: &str, value: impl Into<String>) {
        self.entries.push((name.to_ascii_lowercase(), value.into()));
    }

    /// Adds a header it takes, lower-casing the name in place (no copy of either).
    pub fn push_owned(&mut self, mut name: String, value: String) {
        name.make_ascii_lowercase();
        self.entries.push((name, value));
    }

    /// The first value of `name` (which must be lower-case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for Headers {
    fn from_iter<T: IntoIterator<Item = (&'a str, &'a str)>>(iter: T) -> Self {
        let mut h = Headers::new();
        for (n, v) in iter {
            h.push(n, v);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive() {
        let h: Headers =
            [("X-Request-Id", "abc"), ("Content-Type", "application/json")].into_iter().collect();
        assert_eq!(h.get("x-request-id"), Some("abc"));
        assert_eq!(h.get("content-type"), Some("application/json"));
        assert!(!h.contains("missing"));
    }
}
