//! Asking a model server for only the metric families epp reads.
//!
//! vLLM's `/metrics` page is ~48 KB (a real vLLM on CPU, one engine) of which epp reads five gauges.
//! Prometheus' Python client, which vLLM and SGLang serve their pages with, restricts a page to the
//! sample names given as `name[]` query parameters (prometheus/client_python:prometheus_client/exposition.py,
//! `_bake_output`). Writing the whole page costs vLLM's API server process ~5 ms of CPU per scrape
//! against ~0.5 ms for the five gauges (BENCHMARKS.md §10): at the default 50 ms interval, 10% of a core
//! per epp replica, on the asyncio loop that also takes every request. It also costs epp the copy and the
//! walk.
//!
//! Servers differ in whether and where they honour it, so each endpoint's loop finds out:
//! - vLLM serves `/metrics` from prometheus-fastapi-instrumentator's handler, which ignores the query, and
//!   `/metrics/…` from `make_asgi_app`, which honours it (vllm-project/vllm:vllm/entrypoints/serve/instrumentator/metrics.py);
//! - with several API servers (`--api-server-count` > 1; SGLang always) the registry is multiprocess, and
//!   a restricted page is empty: prometheus_client only restricts collectors that declare their names;
//! - a server that is not Prometheus' Python client ignores the query, or refuses the path.
//!
//! So the loop asks `path?name[]=…` first, then `path/?name[]=…`, then settles on the whole page. A page
//! that came back whole is used as it is (the next poll tries the next form); an empty page, one without
//! the load families, a 4xx or a redirect (not followed) is asked again at once in the next form. A
//! filtered page that later stops holding the load families (the server restarted with several API
//! servers) sends the loop back to the whole page. A transport error or a 5xx changes nothing: the poll
//! fails as it would have.

use std::fmt::Write as _;

/// Which page one endpoint's loop asks for, and what it has learned about the server.
#[derive(Debug, Clone)]
pub(crate) struct PageFilter {
    /// The URLs to try, in order; the last is the whole page.
    urls: Vec<String>,
    at: usize,
    /// The current URL answered with only the wanted families.
    settled: bool,
}

/// What a fetched page says about the form it was asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Only the wanted families came back: keep asking this way.
    Filtered,
    /// The whole page came back: usable, but the next poll tries the next form.
    Ignored,
    /// Nothing usable (a 4xx, or no load family on the page): ask again now in the next form.
    Refused,
}

impl PageFilter {
    /// The forms to try for `metrics_url` restricted to `names`; only the whole page when `enabled` is
    /// false or there are no names.
    pub(crate) fn new(metrics_url: &str, names: &[String], enabled: bool) -> Self {
        let mut urls = Vec::with_capacity(3);
        if enabled && !names.is_empty() {
            let (base, query) = metrics_url.split_once('?').unwrap_or((metrics_url, ""));
            let mut params = String::new();
            if !query.is_empty() {
                params.push_str(query);
                params.push('&');
            }
            for (i, name) in names.iter().enumerate() {
                if i > 0 {
                    params.push('&');
                }
                params.push_str("name%5B%5D=");
                percent_encode(name, &mut params);
            }
            urls.push(format!("{base}?{params}"));
            if !base.ends_with('/') {
                urls.push(format!("{base}/?{params}"));
            }
        }
        urls.push(metrics_url.to_string());
        Self { urls, at: 0, settled: false }
    }

    /// The URL the next fetch asks for.
    pub(crate) fn url(&self) -> &str {
        &self.urls[self.at]
    }

    /// Which form the next fetch asks for (its position in the order tried).
    pub(crate) fn form(&self) -> usize {
        self.at
    }

    /// True once the loop asks for the whole page, for good.
    pub(crate) fn is_whole(&self) -> bool {
        self.at + 1 == self.urls.len()
    }

    /// True while the current form answers with only the wanted families.
    pub(crate) fn is_filtered(&self) -> bool {
        self.settled
    }

    /// Records what the current form got. Returns true when the caller should fetch again now.
    pub(crate) fn record(&mut self, answer: Answer) -> bool {
        if self.is_whole() {
            return false;
        }
        match answer {
            Answer::Filtered => {
                self.settled = true;
                false
            }
            Answer::Ignored | Answer::Refused => {
                // A form that worked and stopped working means the server changed: the whole page is what
                // is left that cannot be misread.
                self.at = if self.settled { self.urls.len() - 1 } else { self.at + 1 };
                self.settled = false;
                answer == Answer::Refused
            }
        }
    }
}

/// Appends `text` to `out` with everything but RFC 3986's unreserved characters percent-encoded (a metric
/// name's `:` becomes `%3A`).
fn percent_encode(text: &str, out: &mut String) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            // Writing into a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["vllm:num_requests_waiting".into(), "vllm:kv_cache_usage_perc".into()]
    }

    const QUERY: &str = "name%5B%5D=vllm%3Anum_requests_waiting&name%5B%5D=vllm%3Akv_cache_usage_perc";

    #[test]
    fn the_forms_in_order_end_with_the_whole_page() {
        let filter = PageFilter::new("http://10.0.0.1:8000/metrics", &names(), true);
        assert_eq!(
            filter.urls,
            [
                format!("http://10.0.0.1:8000/metrics?{QUERY}"),
                format!("http://10.0.0.1:8000/metrics/?{QUERY}"),
                "http://10.0.0.1:8000/metrics".to_string(),
            ]
        );
        // A path ending in `/` has one filtered form; an existing query is kept.
        let slash = PageFilter::new("http://h/stats/?x=1", &names(), true);
        assert_eq!(slash.urls, [format!("http://h/stats/?x=1&{QUERY}"), "http://h/stats/?x=1".to_string()]);
    }

    #[test]
    fn disabled_or_nothing_to_ask_for_is_the_whole_page() {
        for filter in [
            PageFilter::new("http://h/metrics", &names(), false),
            PageFilter::new("http://h/metrics", &[], true),
        ] {
            assert!(filter.is_whole());
            assert_eq!(filter.url(), "http://h/metrics");
        }
    }

    #[test]
    fn vllm_ignores_the_first_form_and_honours_the_second() {
        let mut filter = PageFilter::new("http://h/metrics", &names(), true);
        assert!(!filter.record(Answer::Ignored), "a whole page is used; the next poll tries the next form");
        assert!(filter.url().starts_with("http://h/metrics/?"));
        assert!(!filter.record(Answer::Filtered));
        assert!(filter.is_filtered() && !filter.is_whole());
        assert!(!filter.record(Answer::Filtered));
        assert!(filter.url().starts_with("http://h/metrics/?"));
    }

    #[test]
    fn refusals_are_asked_again_at_once_until_the_whole_page() {
        let mut filter = PageFilter::new("http://h/metrics", &names(), true);
        assert!(filter.record(Answer::Refused));
        assert!(filter.record(Answer::Refused));
        assert!(filter.is_whole());
        assert_eq!(filter.url(), "http://h/metrics");
        // The whole page is final.
        assert!(!filter.record(Answer::Refused));
        assert!(filter.is_whole());
    }

    #[test]
    fn a_form_that_stops_working_falls_back_to_the_whole_page() {
        let mut filter = PageFilter::new("http://h/metrics", &names(), true);
        assert!(!filter.record(Answer::Filtered));
        assert!(filter.record(Answer::Refused), "an empty page is asked again, whole");
        assert!(filter.is_whole() && !filter.is_filtered());
    }
}
