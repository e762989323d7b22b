//! `/metrics/?name[]=…`: the page restricted to the sample names asked for, as vLLM serves it.
//!
//! vLLM's `/metrics` is prometheus-fastapi-instrumentator's handler, which ignores the query; `/metrics/…`
//! is prometheus_client's `make_asgi_app`, whose restricted registry yields only the samples named
//! (vllm-project/vllm:vllm/entrypoints/serve/instrumentator/metrics.py;
//! prometheus/client_python:prometheus_client/registry.py, `RestrictedRegistry`). The simulator serves
//! both routes the same way, so epp's scrape loops meet what they meet in front of vLLM.

/// The `name[]` values of a query string, percent-decoded; empty when it has none.
pub(crate) fn requested_names(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| percent_decode(key) == "name[]")
        .map(|(_, value)| percent_decode(value))
        .collect()
}

/// The lines of `page` for the samples `names` lists, each family's `# HELP` and `# TYPE` with them.
pub(crate) fn restrict(page: &str, names: &[String]) -> String {
    let wanted = |name: &str| names.iter().any(|n| n == name);
    // A comment names its family; a family's samples may add a suffix (`_total`, `_bucket`).
    let family_wanted = |family: &str| names.iter().any(|n| n.starts_with(family));
    let mut out = String::new();
    for line in page.lines() {
        let keep = match line.strip_prefix("# ") {
            Some(comment) => comment.split(' ').nth(1).is_some_and(family_wanted),
            None => wanted(line.split(['{', ' ']).next().unwrap_or("")),
        };
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_decoded_from_either_spelling() {
        let q = "name%5B%5D=vllm%3Anum_requests_waiting&x=1&name[]=vllm:kv_cache_usage_perc&name%5B%5D";
        assert_eq!(requested_names(q), ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]);
        assert!(requested_names("").is_empty());
        assert_eq!(percent_decode("%zz%4"), "%zz%4", "a malformed escape is kept as it is");
    }

    #[test]
    fn only_the_named_samples_and_their_comments_are_kept() {
        let page = "# HELP vllm:a a\n# TYPE vllm:a gauge\nvllm:a{m=\"x\"} 1\n# HELP vllm:b b\n# TYPE vllm:b counter\nvllm:b_total 2\nvllm:b_created 3\n";
        let names = ["vllm:a".to_string(), "vllm:b_total".to_string()];
        assert_eq!(
            restrict(page, &names),
            "# HELP vllm:a a\n# TYPE vllm:a gauge\nvllm:a{m=\"x\"} 1\n# HELP vllm:b b\n# TYPE vllm:b counter\nvllm:b_total 2\n"
        );
        assert_eq!(restrict(page, &[]), "");
    }
}
