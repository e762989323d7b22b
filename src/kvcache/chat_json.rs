//! The `tojson` filter chat templates call, as transformers defines it (`utils/chat_template_utils.py`:
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`), rather than
//! Jinja's HTML-escaping one: Python's separators (`", "` and `": "`, or `","` and `": "` when indented),
//! non-ASCII text as it is unless `ensure_ascii`, keys in insertion order unless `sort_keys`.

use std::io;

use minijinja::value::{Kwargs, Rest, Value};
use minijinja::{Error, ErrorKind};
use serde::Serialize;

/// `x | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, positionally or by
/// keyword.
pub(crate) fn tojson(value: &Value, positional: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let arg = |index: usize, name: &str| -> Result<Option<Value>, Error> {
        match positional.get(index) {
            Some(value) => Ok(Some(value.clone())),
            None => kwargs.get::<Option<Value>>(name),
        }
    };
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(text) => text.to_owned(),
            None => " ".repeat(usize::try_from(v).map_err(|_| invalid("tojson: `indent` is not a count"))?),
        }),
    };
    let (item, key) = match arg(2, "separators")? {
        Some(v) if !v.is_none() => {
            let pair: Vec<String> = v
                .try_iter()?
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid("tojson: `separators` is not a pair of strings"))?;
            match <[String; 2]>::try_from(pair) {
                Ok([item, key]) => (item, key),
                Err(_) => return Err(invalid("tojson: `separators` is not a pair of strings")),
            }
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let formatter =
        PythonFormatter { item: item.as_bytes(), key: key.as_bytes(), indent, depth: 0, has_value: false };
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    let written = if sort_keys {
        // serde_json's own map is ordered by key, which is Python's order for `str` keys (code points).
        serde_json::to_value(value).and_then(|sorted| sorted.serialize(&mut serializer))
    } else {
        value.serialize(&mut serializer)
    };
    written.map_err(|e| invalid(&format!("tojson: {e}")))?;
    let text = String::from_utf8(out).map_err(|e| invalid(&format!("tojson: {e}")))?;
    Ok(Value::from(if ensure_ascii { escape_non_ascii(&text) } else { text }))
}

fn invalid(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_owned())
}

/// Python's `ensure_ascii`: every non-ASCII character as `\uXXXX` (UTF-16 units). JSON text holds
/// non-ASCII characters only inside strings, so the whole text can be rewritten.
fn escape_non_ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// `json.dumps`' layout: the separators given, and with an indent each item on its own line.
struct PythonFormatter<'a> {
    item: &'a [u8],
    key: &'a [u8],
    indent: Option<String>,
    depth: usize,
    has_value: bool,
}

impl PythonFormatter<'_> {
    fn open<W: io::Write + ?Sized>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: io::Write + ?Sized>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(bracket)
    }

    fn item<W: io::Write + ?Sized>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(self.item)?;
        }
        self.newline(w)
    }

    fn newline<W: io::Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        if let Some(indent) = &self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(indent.as_bytes())?;
            }
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for PythonFormatter<'_> {
    fn begin_array<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: io::Write + ?Sized>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: io::Write + ?Sized>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: io::Write + ?Sized>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(self.key)
    }

    fn end_object_value<W: io::Write + ?Sized>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}
