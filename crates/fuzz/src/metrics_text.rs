//! A model server's `/metrics` page: the Prometheus text parser and every built-in engine's extractor.
//!
//! Invariants beyond "no panic":
//! - the filtered walk the extractor uses (only wanted names validated) yields exactly the samples of the
//!   full walk whose name is wanted, in order: the fast path must not see a different page;
//! - extracted telemetry never holds a NaN KV utilisation (it would poison every comparison downstream).

use std::sync::OnceLock;
use std::time::Instant;

use epp::datastore::EndpointTelemetry;
use epp::telemetry::parser::{parse_all, SampleIter};
use epp::telemetry::{extract, EngineSet, Sample};

fn engines() -> &'static EngineSet {
    static ENGINES: OnceLock<EngineSet> = OnceLock::new();
    ENGINES.get_or_init(EngineSet::builtin)
}

pub fn run(page: &[u8]) {
    let all: Vec<Sample<'_>> = parse_all(page).collect();
    for sample in &all {
        // Decoding every label exercises the unescaping of values.
        for (name, value) in sample.labels.iter() {
            assert!(!name.is_empty(), "an empty label name was yielded: {:?}", sample.labels.as_raw());
            let _ = value.len();
        }
    }

    let now = Instant::now();
    for name in engines().engine_names() {
        let Some(engine) = engines().get(name) else { continue };
        let wanted = engine.wanted_names();
        let filtered: Vec<Sample<'_>> = SampleIter::new(page, wanted).collect();
        let expected: Vec<Sample<'_>> =
            all.iter().filter(|s| wanted.iter().any(|w| w.as_str() == s.name)).copied().collect();
        assert!(
            same_samples(&filtered, &expected),
            "engine {name}: the filtered walk saw {filtered:?}, the full walk {expected:?}"
        );

        let first = extract(page, engine, &EndpointTelemetry::default(), now);
        assert!(!first.metrics.kv_cache_usage.is_nan(), "engine {name}: NaN KV utilisation");
        // Fields not found keep their previous value: extracting again over the result must be stable.
        let again = extract(page, engine, &first.metrics, now);
        assert!(!again.metrics.kv_cache_usage.is_nan(), "engine {name}: NaN KV utilisation");
    }
}

/// Sample equality where NaN equals NaN (a page may carry `NaN` values).
fn same_samples(a: &[Sample<'_>], b: &[Sample<'_>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.name == y.name
                && x.labels == y.labels
                && x.timestamp_ms == y.timestamp_ms
                && (x.value == y.value || (x.value.is_nan() && y.value.is_nan()))
        })
}
