//! A hand-written, zero-copy parser for the Prometheus text exposition format.
//!
//! Why not a crate: `prometheus-parse` rejects every `vllm:`-prefixed name, and the full `expfmt`-style
//! parsers build a map of every family on the page, while the extractor needs five or so families out of
//! hundreds of lines. So the walker is handed the set of names it wants ([`NameFilter`]); every other line
//! costs one `memchr` for its end plus a one-byte check per wanted name (the byte that must follow the
//! name), with a full comparison only when that byte fits. Wanted lines are validated fully and borrowed
//! from the page: names and labels are `&str` slices, and a label value is only copied when it holds an
//! escape. A malformed line is skipped and counted, never a panic: the page comes from the network.

use std::borrow::Cow;

use memchr::memchr;

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Labels<'a>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

/// The label block of one sample (the text between the braces), already validated. Kept raw so that a
/// sample costs no allocation; pairs are decoded on demand by [`Labels::iter`] and [`Labels::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Labels<'a> {
    raw: &'a str,
}

impl<'a> Labels<'a> {
    /// The `(name, value)` pairs in page order, values unescaped.
    pub fn iter(&self) -> LabelIter<'a> {
        LabelIter { raw: self.raw, pos: 0 }
    }

    /// The unescaped value of label `name`, if the sample has it.
    pub fn get(&self, name: &str) -> Option<Cow<'a, str>> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The label block as it appeared on the page, without the braces.
    pub fn as_raw(&self) -> &'a str {
        self.raw
    }
}

/// Iterator over the label pairs of a [`Labels`].
#[derive(Debug, Clone)]
pub struct LabelIter<'a> {
    raw: &'a str,
    pos: usize,
}

impl<'a> Iterator for LabelIter<'a> {
    type Item = (&'a str, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        match next_label(self.raw, self.pos) {
            LabelStep::Pair { name, raw_value, next } => {
                self.pos = next;
                Some((name, unescape(raw_value)))
            }
            // The block was validated when the sample was parsed, so `Bad` cannot happen; ending the
            // iteration is the safe answer if it ever did.
            LabelStep::End(_) | LabelStep::Bad => None,
        }
    }
}

/// Which metric names a walk yields. Everything else is skipped without being parsed.
pub trait NameFilter {
    /// `line` starts at a metric name. If that name is wanted, its length; `None` skips the line.
    fn wanted_prefix(&self, line: &[u8]) -> Option<usize>;
}

/// A filter that wants every name: full validation of the page (tests, debugging).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllNames;

impl NameFilter for AllNames {
    fn wanted_prefix(&self, line: &[u8]) -> Option<usize> {
        Some(line.iter().position(|&b| !is_name_char(b)).unwrap_or(line.len()))
    }
}

impl<S: AsRef<str>> NameFilter for [S] {
    fn wanted_prefix(&self, line: &[u8]) -> Option<usize> {
        self.iter().find_map(|wanted| {
            let wanted = wanted.as_ref().as_bytes();
            let len = wanted.len();
            // The byte after the name is checked first: it rejects almost every unwanted line (and names
            // that merely start with a wanted one, like `_bucket` series) before any comparison.
            match line.get(len) {
                Some(b'{' | b' ' | b'\t') => {}
                None if line.len() == len => {}
                _ => return None,
            }
            (line.get(..len) == Some(wanted)).then_some(len)
        })
    }
}

impl<S: AsRef<str>> NameFilter for Vec<S> {
    fn wanted_prefix(&self, line: &[u8]) -> Option<usize> {
        self.as_slice().wanted_prefix(line)
    }
}

/// Walks a page, yielding the samples whose name the filter wants.
#[derive(Debug)]
pub struct SampleIter<'a, 'f, F: NameFilter + ?Sized> {
    page: &'a [u8],
    pos: usize,
    filter: &'f F,
    malformed: usize,
    unwanted: usize,
}

impl<'a, 'f, F: NameFilter + ?Sized> SampleIter<'a, 'f, F> {
    pub fn new(page: &'a [u8], filter: &'f F) -> Self {
        Self { page, pos: 0, filter, malformed: 0, unwanted: 0 }
    }

    /// Sample lines skipped so far because the filter did not want their name (comments and blank lines
    /// are not counted): 0 on a page that holds only the wanted families.
    pub fn unwanted_samples(&self) -> usize {
        self.unwanted
    }

    /// Lines skipped as malformed so far: every wanted line that failed to parse, plus lines whose name
    /// could not even be read. Unwanted lines are not validated, so garbage inside them is not counted.
    pub fn malformed_lines(&self) -> usize {
        self.malformed
    }
}

impl<'a, F: NameFilter + ?Sized> Iterator for SampleIter<'a, '_, F> {
    type Item = Sample<'a>;

    fn next(&mut self) -> Option<Sample<'a>> {
        while self.pos < self.page.len() {
            let rest = &self.page[self.pos..];
            let line_len = memchr(b'\n', rest).unwrap_or(rest.len());
            let mut line = &rest[..line_len];
            self.pos += line_len + 1;
            if let [head @ .., b'\r'] = line {
                line = head;
            }
            match classify_line(line, self.filter) {
                LineKind::Skip => {}
                LineKind::Unwanted => self.unwanted += 1,
                LineKind::Malformed => self.malformed += 1,
                LineKind::Wanted { name_start, name_end } => match parse_sample(line, name_start, name_end) {
                    Some(sample) => return Some(sample),
                    None => self.malformed += 1,
                },
            }
        }
        None
    }
}

/// Walks `page` yielding every sample (no filtering).
pub fn parse_all(page: &[u8]) -> SampleIter<'_, 'static, AllNames> {
    SampleIter::new(page, &AllNames)
}

enum LineKind {
    /// A comment or a blank line.
    Skip,
    /// A sample whose name the filter does not want.
    Unwanted,
    Malformed,
    Wanted {
        name_start: usize,
        name_end: usize,
    },
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

fn is_label_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_label_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Decides from the start of a line whether it is wanted, without looking further.
fn classify_line<F: NameFilter + ?Sized>(line: &[u8], filter: &F) -> LineKind {
    let name_start = line.iter().position(|&b| !is_blank(b)).unwrap_or(line.len());
    let Some(&first) = line.get(name_start) else { return LineKind::Skip };
    if first == b'#' {
        return LineKind::Skip; // HELP, TYPE and plain comments carry nothing the extractor reads.
    }
    if !is_name_start(first) {
        return LineKind::Malformed;
    }
    match filter.wanted_prefix(&line[name_start..]) {
        Some(len) => LineKind::Wanted { name_start, name_end: name_start + len },
        None => LineKind::Unwanted,
    }
}

/// Parses a wanted line fully. `None` when anything about it is malformed.
fn parse_sample(line: &[u8], name_start: usize, name_end: usize) -> Option<Sample<'_>> {
    let line = std::str::from_utf8(line).ok()?;
    let bytes = line.as_bytes();
    let name = line.get(name_start..name_end)?;
    let mut pos = name_end;
    match bytes.get(pos) {
        None | Some(b'{' | b' ' | b'\t') => {}
        Some(_) => return None,
    }
    let mut labels = Labels::default();
    if bytes.get(pos) == Some(&b'{') {
        let block_start = pos + 1;
        let mut cursor = block_start;
        let close = loop {
            match next_label(line, cursor) {
                LabelStep::Pair { next, .. } => cursor = next,
                LabelStep::End(at) => break at,
                LabelStep::Bad => return None,
            }
        };
        if bytes.get(close) != Some(&b'}') {
            return None;
        }
        labels = Labels { raw: line.get(block_start..close)? };
        pos = close + 1;
    }
    let mut tokens = line.get(pos..)?.split([' ', '\t']).filter(|t| !t.is_empty());
    let value = parse_value(tokens.next()?)?;
    let timestamp_ms = match tokens.next() {
        None => None,
        Some(t) => Some(t.parse::<i64>().ok()?),
    };
    if tokens.next().is_some() {
        return None;
    }
    Some(Sample { name, labels, value, timestamp_ms })
}

/// A float as the exposition format writes it: decimal or exponent form, `+Inf`, `-Inf`, `NaN`.
fn parse_value(token: &str) -> Option<f64> {
    // Rust's parser accepts the same spellings as Go's ParseFloat (case-insensitive inf/nan, signs,
    // exponents); guard against the few extra words it accepts that are not numbers on a metrics page.
    let first = *token.as_bytes().first()?;
    if !(first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.' | b'I' | b'i' | b'N' | b'n')) {
        return None;
    }
    token.parse::<f64>().ok()
}

enum LabelStep<'a> {
    Pair {
        name: &'a str,
        raw_value: &'a str,
        next: usize,
    },
    /// No more pairs: the index of the closing `}` (or of the end of the text).
    End(usize),
    Bad,
}

/// Reads the label pair starting at `pos` (after `{` or after a `,`). Shared by validation and iteration
/// so that both agree on the grammar.
fn next_label(text: &str, mut pos: usize) -> LabelStep<'_> {
    let bytes = text.as_bytes();
    while bytes.get(pos).is_some_and(|&b| is_blank(b)) {
        pos += 1;
    }
    match bytes.get(pos) {
        None | Some(b'}') => return LabelStep::End(pos),
        Some(&b) if is_label_start(b) => {}
        Some(_) => return LabelStep::Bad,
    }
    let name_start = pos;
    while bytes.get(pos).is_some_and(|&b| is_label_char(b)) {
        pos += 1;
    }
    let name_end = pos;
    while bytes.get(pos).is_some_and(|&b| is_blank(b)) {
        pos += 1;
    }
    if bytes.get(pos) != Some(&b'=') {
        return LabelStep::Bad;
    }
    pos += 1;
    while bytes.get(pos).is_some_and(|&b| is_blank(b)) {
        pos += 1;
    }
    if bytes.get(pos) != Some(&b'"') {
        return LabelStep::Bad;
    }
    pos += 1;
    let value_start = pos;
    loop {
        match bytes.get(pos) {
            None => return LabelStep::Bad,
            Some(b'"') => break,
            Some(b'\\') => match bytes.get(pos + 1) {
                Some(b'\\' | b'"' | b'n') => pos += 2,
                _ => return LabelStep::Bad,
            },
            Some(_) => pos += 1,
        }
    }
    let value_end = pos;
    pos += 1;
    while bytes.get(pos).is_some_and(|&b| is_blank(b)) {
        pos += 1;
    }
    match bytes.get(pos) {
        Some(b',') => pos += 1,
        None | Some(b'}') => {}
        Some(_) => return LabelStep::Bad,
    }
    match (text.get(name_start..name_end), text.get(value_start..value_end)) {
        (Some(name), Some(raw_value)) => LabelStep::Pair { name, raw_value, next: pos },
        _ => LabelStep::Bad,
    }
}

/// Undoes the three escapes of the format; borrows when there are none (the usual case).
fn unescape(raw: &str) -> Cow<'_, str> {
    if !raw.contains('\\') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;
