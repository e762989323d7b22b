//! From a `/metrics` page to [`EndpointTelemetry`], in one pass over the page.
//!
//! The page is walked once with the engine's metric names as the parser's filter; each sample is folded
//! into the accumulator of every spec it matches. As in the Go EPP, a missing family is an error but the
//! fields that were found are still updated, and fields that were not keep their previous value. Unlike
//! Go, the LoRA and cache-info metrics are optional (vLLM prints the LoRA metric only with `--enable-lora`),
//! so their absence is not an error, and `update_time` is set on every extraction that found at least one
//! load family, so that an idle but healthy server never looks stale while a page with none of them (an
//! error page, garbage) leaves the telemetry aging. The clock is an argument: the function reads no clock itself.

use std::collections::HashSet;
use std::fmt;
use std::time::Instant;

use super::engines::{EngineMapping, SeriesAggregation};
use super::parser::{Labels, Sample, SampleIter};
use super::spec::MetricSpec;
use crate::datastore::EndpointTelemetry;

/// The result of one extraction: the metrics to publish, and what was wrong with the page, if anything.
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction {
    pub metrics: EndpointTelemetry,
    /// `Some` when a required family was missing or a label could not be decoded; `metrics` still holds
    /// every field that could be read.
    pub error: Option<ExtractError>,
    /// Lines skipped as malformed (diagnostics only).
    pub malformed_lines: usize,
    /// Whether the page held any of the load families (queue, running batch, KV usage): what a page
    /// restricted to epp's families must hold to count as served (`super::name_filter`).
    pub found_load_families: bool,
    /// Sample lines of families the engine mapping does not read: 0 when the server sent only what was
    /// asked for (`super::name_filter`).
    pub unwanted_samples: usize,
}

/// Everything wrong with one page; displayed as the problems joined with `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ExtractError {
    pub problems: Vec<ExtractProblem>,
}

impl fmt::Display for ExtractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractProblem {
    #[error("metric family {0:?} not found")]
    MissingFamily(String),
    #[error("no series of {0} matches its labels")]
    NoMatchingSeries(String),
    #[error("{metric}: label {label:?} value {value:?} is not a non-negative integer")]
    InvalidLabel { metric: String, label: String, value: String },
}

/// Running state of one spec during the walk.
#[derive(Debug, Default, Clone, Copy)]
struct Fold {
    seen_family: bool,
    matched: bool,
    value: f64,
    /// Timestamp of the kept series, for "latest wins" when the page carries timestamps.
    timestamp_ms: Option<i64>,
}

#[derive(Clone, Copy, PartialEq)]
enum Combine {
    /// First match wins, or the one with the latest timestamp.
    Latest,
    Sum,
    Max,
}

impl Fold {
    fn observe(&mut self, spec: &Option<MetricSpec>, sample: &Sample<'_>, combine: Combine) -> bool {
        let Some(spec) = spec else { return false };
        if sample.name != spec.name() {
            return false;
        }
        self.seen_family = true;
        if !spec.labels_match(sample) {
            return false;
        }
        // NaN says nothing about load; it must not poison a sum or a max.
        let value = if sample.value.is_nan() { 0.0 } else { sample.value };
        let first = !self.matched;
        self.matched = true;
        match combine {
            Combine::Sum => self.value += value,
            Combine::Max => self.value = if first { value } else { self.value.max(value) },
            Combine::Latest => {
                if first || sample.timestamp_ms > self.timestamp_ms {
                    self.value = value;
                    self.timestamp_ms = sample.timestamp_ms;
                    return true;
                }
                return false;
            }
        }
        true
    }

    /// Records a problem for a spec that was configured but found nothing.
    fn check(&self, spec: &Option<MetricSpec>, problems: &mut Vec<ExtractProblem>) -> bool {
        match spec {
            Some(_) if self.matched => true,
            Some(s) if self.seen_family => {
                problems.push(ExtractProblem::NoMatchingSeries(s.to_string()));
                false
            }
            Some(s) => {
                problems.push(ExtractProblem::MissingFamily(s.name().to_string()));
                false
            }
            None => false,
        }
    }
}

/// Reads `page` with `engine`'s mapping. Fields not found keep their value from `previous`;
/// `update_time` becomes `Some(now)`.
pub fn extract(
    page: &[u8],
    engine: &EngineMapping,
    previous: &EndpointTelemetry,
    now: Instant,
) -> Extraction {
    let (count_combine, kv_combine) = match engine.aggregation {
        SeriesAggregation::First => (Combine::Latest, Combine::Latest),
        SeriesAggregation::SumMax => (Combine::Sum, Combine::Max),
    };
    let (mut queued, mut running, mut kv, mut kv_fallback) = Default::default();
    let (mut lora, mut cache_info, mut block_gauge, mut blocks_gauge) = Default::default();
    let mut lora_labels: Option<Labels<'_>> = None;
    let mut cache_labels: Option<Labels<'_>> = None;

    let mut samples = SampleIter::new(page, engine.wanted_names());
    for sample in samples.by_ref() {
        Fold::observe(&mut queued, &engine.queued, &sample, count_combine);
        Fold::observe(&mut running, &engine.running, &sample, count_combine);
        Fold::observe(&mut kv, &engine.kv_usage, &sample, kv_combine);
        Fold::observe(&mut kv_fallback, &engine.kv_usage_fallback, &sample, kv_combine);
        if Fold::observe(&mut lora, &engine.lora, &sample, Combine::Max) && lora.value == sample.value {
            // The value is the adapter state's creation time: the largest is the newest.
            lora_labels = Some(sample.labels);
        }
        if Fold::observe(&mut cache_info, &engine.cache_info, &sample, Combine::Latest) {
            cache_labels = Some(sample.labels);
        }
        Fold::observe(&mut block_gauge, &engine.cache_block_size, &sample, Combine::Latest);
        Fold::observe(&mut blocks_gauge, &engine.cache_num_blocks, &sample, Combine::Latest);
    }

    let mut problems = Vec::new();
    // Scalars start from `previous`; the sets start empty and are cloned only when the page lacks them.
    let mut metrics = EndpointTelemetry {
        waiting_queue_size: previous.waiting_queue_size,
        running_requests: previous.running_requests,
        kv_cache_usage: previous.kv_cache_usage,
        active_models: HashSet::new(),
        waiting_models: HashSet::new(),
        max_active_models: previous.max_active_models,
        cache_block_size: previous.cache_block_size,
        cache_num_blocks: previous.cache_num_blocks,
        update_time: Some(now),
    };
    if queued.check(&engine.queued, &mut problems) {
        metrics.waiting_queue_size = to_count(queued.value);
    }
    if running.check(&engine.running, &mut problems) {
        metrics.running_requests = to_count(running.value);
    }
    let kv_found = if kv.matched || !kv_fallback.matched {
        kv.check(&engine.kv_usage, &mut problems).then_some(kv.value)
    } else {
        Some(kv_fallback.value)
    };
    if let Some(value) = kv_found {
        metrics.kv_cache_usage = value;
    }
    match lora_labels {
        Some(labels) => read_lora(&labels, engine, &mut metrics, &mut problems),
        None => {
            metrics.active_models = previous.active_models.clone();
            metrics.waiting_models = previous.waiting_models.clone();
        }
    }
    if let Some(labels) = cache_labels {
        read_cache_info(&labels, engine, &mut metrics, &mut problems);
    }
    if block_gauge.matched {
        metrics.cache_block_size = to_count(block_gauge.value) as usize;
    }
    if blocks_gauge.matched {
        metrics.cache_num_blocks = to_count(blocks_gauge.value) as usize;
    }
    // A page with none of the engine's families (an HTML error page, a proxy's 200, garbage) says nothing
    // about the server: it must not refresh the telemetry's age, or the endpoint health check would take
    // frozen values for fresh ones. A page with the engine's other families but no load gauges is the
    // engine's own: vLLM with a multiprocess registry (`--api-server-count` above 1) shows a gauge only
    // once a process has set it, so until its first request its page holds `cache_config_info` and no
    // load at all. That is an idle server, fresh, and a new pod in that mode must not stay stale (and so
    // unrouted) until traffic it cannot get reaches it. The missing families are still reported.
    let found_load_families = queued.matched || running.matched || kv.matched || kv_fallback.matched;
    let engines_page = found_load_families
        || cache_info.matched
        || lora.matched
        || block_gauge.matched
        || blocks_gauge.matched;
    if !engines_page {
        metrics.update_time = previous.update_time;
    }
    let error = (!problems.is_empty()).then_some(ExtractError { problems });
    Extraction {
        metrics,
        error,
        malformed_lines: samples.malformed_lines(),
        found_load_families,
        unwanted_samples: samples.unwanted_samples(),
    }
}

/// Go's `int(float)`, saturating: negative and NaN become 0.
fn to_count(value: f64) -> u64 {
    value as u64
}

fn parse_count(metric: &str, label: &str, value: &str, problems: &mut Vec<ExtractProblem>) -> Option<usize> {
    if value.is_empty() {
        return None;
    }
    match value.trim().parse::<usize>() {
        Ok(n) => Some(n),
        Err(_) => {
            problems.push(ExtractProblem::InvalidLabel {
                metric: metric.to_string(),
                label: label.to_string(),
                value: value.to_string(),
            });
            None
        }
    }
}

fn read_lora(
    labels: &Labels<'_>,
    engine: &EngineMapping,
    metrics: &mut EndpointTelemetry,
    problems: &mut Vec<ExtractProblem>,
) {
    let metric = engine.lora.as_ref().map_or("", |s| s.name());
    for (label, value) in labels.iter() {
        match label {
            "running_lora_adapters" => add_adapters(&mut metrics.active_models, &value),
            "waiting_lora_adapters" => add_adapters(&mut metrics.waiting_models, &value),
            "max_lora" => {
                if let Some(n) = parse_count(metric, label, &value, problems) {
                    metrics.max_active_models = n;
                }
            }
            _ => {}
        }
    }
}

fn add_adapters(set: &mut HashSet<String>, list: &str) {
    set.extend(list.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_string));
}

fn read_cache_info(
    labels: &Labels<'_>,
    engine: &EngineMapping,
    metrics: &mut EndpointTelemetry,
    problems: &mut Vec<ExtractProblem>,
) {
    let metric = engine.cache_info.as_ref().map_or("", |s| s.name());
    // As in Go: the block size is reset so that a page without the label does not keep a stale size.
    metrics.cache_block_size = 0;
    for (label, value) in labels.iter() {
        if label == engine.cache_block_size_label {
            if let Some(n) = parse_count(metric, label, &value, problems) {
                metrics.cache_block_size = n;
            }
        } else if label == engine.cache_num_blocks_label {
            if let Some(n) = parse_count(metric, label, &value, problems) {
                metrics.cache_num_blocks = n;
            }
        }
    }
}

#[cfg(test)]
#[path = "extractor_tests.rs"]
mod tests;
