//! What a run measured: per-request records folded into the numbers routing results are compared on
//! (TTFT / TPOT / E2E percentiles, throughput, SLO attainment, prefix-cache hit rate, load per replica).
//!
//! Definitions, so columns from different runs mean the same thing:
//! - TTFT: first token time − arrival; E2E: finish − arrival; TPOT: (E2E − TTFT) / (output tokens − 1),
//!   for requests with at least two output tokens. Percentiles are nearest-rank over completed requests.
//! - Throughput: completed requests and output tokens divided by the makespan (time of the last event).
//! - SLO attainment: share of *all* planned requests that completed within every given bound (aborted
//!   and rejected requests miss it).
//! - Prefix hit rate: prompt tokens served from the engines' prefix caches / prompt tokens, over
//!   completed requests (token-weighted, as vLLM's `prefix_cache_hits / prefix_cache_queries`).

use serde::Serialize;

use super::training::PredictorReport;
use super::workload::Slo;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Completed,
    /// The engine refused it (too long for its KV cache).
    Aborted,
    /// The router found no endpoint for it (a filter or admitter refused it).
    Rejected,
}

/// One request's measurements.
#[derive(Debug, Clone)]
pub struct Record {
    pub arrival: f64,
    pub first_token: f64,
    pub finish: f64,
    pub replica: u32,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub output_tokens: u32,
    pub outcome: Outcome,
    /// Finish events seen after the first (must stay 0: each request finishes exactly once).
    pub duplicate_finishes: u32,
}

impl Record {
    pub fn new(arrival: f64) -> Self {
        Self {
            arrival,
            first_token: f64::NAN,
            finish: f64::NAN,
            replica: u32::MAX,
            prompt_tokens: 0,
            cached_tokens: 0,
            output_tokens: 0,
            outcome: Outcome::Pending,
            duplicate_finishes: 0,
        }
    }

    fn ttft(&self) -> f64 {
        self.first_token - self.arrival
    }

    fn e2e(&self) -> f64 {
        self.finish - self.arrival
    }

    fn tpot(&self) -> Option<f64> {
        (self.output_tokens > 1).then(|| (self.finish - self.first_token) / f64::from(self.output_tokens - 1))
    }
}

/// What the report needs to know of each replica.
#[derive(Debug, Clone)]
pub struct ReplicaSummary {
    pub name: String,
    pub profile: String,
    pub preemptions: u64,
}

/// Nearest-rank percentiles and the mean, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Percentiles {
    /// `None` for an empty sample. Sorts `values`.
    pub fn of(values: &mut [f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Some(Self { p50: rank(0.50), p90: rank(0.90), p99: rank(0.99), mean })
    }
}

/// Load one replica carried in a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointLoad {
    pub name: String,
    pub profile: String,
    pub requests: u64,
    pub output_tokens: u64,
    pub prefix_hit_rate: f64,
    pub preemptions: u64,
}

/// The results of one routing config.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub name: String,
    pub requests: u64,
    pub completed: u64,
    pub aborted: u64,
    pub rejected: u64,
    /// Of `rejected`, those the server would answer 429 (e.g. a sheddable request the
    /// `latency-slo-admitter` predicts no endpoint can serve in time).
    pub rejected_429: u64,
    /// Requests flow control held for a while before scheduling them (configs with the `flowControl`
    /// gate), and their mean wait in seconds (`None` when none waited).
    pub flow_waited: u64,
    pub flow_wait_mean_s: Option<f64>,
    /// Requests that never finished (must be 0).
    pub unfinished: u64,
    /// Finish events beyond one per request (must be 0).
    pub duplicate_finishes: u64,
    pub ttft_s: Option<Percentiles>,
    pub tpot_s: Option<Percentiles>,
    pub e2e_s: Option<Percentiles>,
    pub makespan_s: f64,
    pub throughput_rps: f64,
    pub output_tokens_per_s: f64,
    /// `None` when the workload sets no SLO.
    pub slo_attainment: Option<f64>,
    /// Shares of all planned requests that completed within the TTFT bound, and within the TPOT bound
    /// (each `None` when the SLO does not set it): which half of the SLO is missed.
    pub ttft_attainment: Option<f64>,
    pub tpot_attainment: Option<f64>,
    pub prefix_hit_rate: f64,
    pub preemptions: u64,
    pub engine_steps: u64,
    pub endpoints: Vec<EndpointLoad>,
    /// The latency predictor's warm-up and error, for configs with a `predicted-latency-producer`.
    pub predictor: Option<PredictorReport>,
}

/// Every run of one comparison: same fleet, same workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabReport {
    pub replicas: usize,
    pub requests: usize,
    pub duration_s: f64,
    pub seed: u64,
    pub scrape_interval_s: f64,
    pub runs: Vec<RunReport>,
}

/// Folds a run's records into its report.
pub fn summarize(
    name: &str,
    records: &[Record],
    replicas: &[ReplicaSummary],
    slo: Option<Slo>,
    makespan: f64,
    engine_steps: u64,
) -> RunReport {
    let mut endpoints: Vec<EndpointLoad> = replicas
        .iter()
        .map(|r| EndpointLoad {
            name: r.name.clone(),
            profile: r.profile.clone(),
            requests: 0,
            output_tokens: 0,
            prefix_hit_rate: 0.0,
            preemptions: r.preemptions,
        })
        .collect();
    let mut endpoint_tokens = vec![(0u64, 0u64); replicas.len()];
    let (mut ttft, mut tpot, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    let (mut completed, mut aborted, mut rejected, mut unfinished, mut duplicates) = (0, 0, 0, 0, 0);
    let (mut prompt_tokens, mut cached_tokens, mut output_tokens, mut attained) = (0u64, 0u64, 0u64, 0u64);
    let (mut ttft_attained, mut tpot_attained) = (0u64, 0u64);
    for r in records {
        duplicates += u64::from(r.duplicate_finishes);
        if let Some(ep) = endpoints.get_mut(r.replica as usize) {
            ep.requests += 1;
        }
        match r.outcome {
            Outcome::Pending => unfinished += 1,
            Outcome::Aborted => aborted += 1,
            Outcome::Rejected => rejected += 1,
            Outcome::Completed => {
                completed += 1;
                ttft.push(r.ttft());
                e2e.push(r.e2e());
                let request_tpot = r.tpot();
                tpot.extend(request_tpot);
                prompt_tokens += u64::from(r.prompt_tokens);
                cached_tokens += u64::from(r.cached_tokens);
                output_tokens += u64::from(r.output_tokens);
                if let Some(ep) = endpoints.get_mut(r.replica as usize) {
                    ep.output_tokens += u64::from(r.output_tokens);
                    let t = &mut endpoint_tokens[r.replica as usize];
                    t.0 += u64::from(r.prompt_tokens);
                    t.1 += u64::from(r.cached_tokens);
                }
                if let Some(slo) = slo {
                    let ttft_ok = slo.ttft_ms.is_none_or(|b| r.ttft() * 1000.0 <= b);
                    let tpot_ok = slo.tpot_ms.is_none_or(|b| request_tpot.is_none_or(|t| t * 1000.0 <= b));
                    attained += u64::from(ttft_ok && tpot_ok);
                    ttft_attained += u64::from(ttft_ok);
                    tpot_attained += u64::from(tpot_ok);
                }
            }
        }
    }
    for (ep, (prompt, cached)) in endpoints.iter_mut().zip(endpoint_tokens) {
        ep.prefix_hit_rate = ratio(cached, prompt);
    }
    let per_second = |x: u64| if makespan > 0.0 { x as f64 / makespan } else { 0.0 };
    RunReport {
        name: name.to_string(),
        requests: records.len() as u64,
        completed,
        aborted,
        rejected,
        rejected_429: 0,
        flow_waited: 0,
        flow_wait_mean_s: None,
        unfinished,
        duplicate_finishes: duplicates,
        ttft_s: Percentiles::of(&mut ttft),
        tpot_s: Percentiles::of(&mut tpot),
        e2e_s: Percentiles::of(&mut e2e),
        makespan_s: makespan,
        throughput_rps: per_second(completed),
        output_tokens_per_s: per_second(output_tokens),
        slo_attainment: slo.map(|_| ratio(attained, records.len() as u64)),
        ttft_attainment: slo.and_then(|s| s.ttft_ms).map(|_| ratio(ttft_attained, records.len() as u64)),
        tpot_attainment: slo.and_then(|s| s.tpot_ms).map(|_| ratio(tpot_attained, records.len() as u64)),
        prefix_hit_rate: ratio(cached_tokens, prompt_tokens),
        preemptions: replicas.iter().map(|r| r.preemptions).sum(),
        engine_steps,
        endpoints,
        predictor: None,
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(arrival: f64, first: f64, finish: f64, out: u32, replica: u32) -> Record {
        Record {
            first_token: first,
            finish,
            output_tokens: out,
            replica,
            prompt_tokens: 100,
            cached_tokens: 50,
            outcome: Outcome::Completed,
            ..Record::new(arrival)
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = Percentiles::of(&mut v).unwrap();
        assert_eq!((p.p50, p.p90, p.p99, p.mean), (50.0, 90.0, 99.0, 50.5));
        assert_eq!(Percentiles::of(&mut [7.0]).unwrap().p99, 7.0);
        assert!(Percentiles::of(&mut []).is_none());
    }

    #[test]
    fn summary_counts_outcomes_and_slo() {
        let records = vec![
            completed(0.0, 0.1, 1.1, 11, 0),  // ttft 100 ms, tpot 100 ms
            completed(0.0, 0.5, 0.6, 2, 1),   // ttft 500 ms, tpot 100 ms
            completed(1.0, 1.05, 1.25, 5, 1), // ttft 50 ms, tpot 50 ms
            Record { outcome: Outcome::Rejected, ..Record::new(2.0) },
            Record { outcome: Outcome::Aborted, replica: 0, ..Record::new(2.0) },
        ];
        let replicas =
            ["a", "b"].map(|n| ReplicaSummary { name: n.into(), profile: "p".into(), preemptions: 1 });
        let slo = Slo { ttft_ms: Some(200.0), tpot_ms: Some(100.0) };
        let r = summarize("x", &records, &replicas, Some(slo), 2.0, 10);
        assert_eq!((r.completed, r.rejected, r.aborted, r.unfinished), (3, 1, 1, 0));
        assert_eq!(r.slo_attainment, Some(2.0 / 5.0));
        assert_eq!((r.ttft_attainment, r.tpot_attainment), (Some(2.0 / 5.0), Some(3.0 / 5.0)));
        assert_eq!(r.throughput_rps, 1.5);
        assert_eq!(r.output_tokens_per_s, 9.0);
        assert_eq!(r.prefix_hit_rate, 0.5);
        assert_eq!(r.preemptions, 2);
        assert_eq!(r.endpoints[0].requests, 2);
        assert_eq!(r.endpoints[1].requests, 2);
        assert_eq!(r.endpoints[1].output_tokens, 7);
        let ttft = r.ttft_s.unwrap();
        assert!((ttft.p50 - 0.1).abs() < 1e-9 && (ttft.p99 - 0.5).abs() < 1e-9);
    }
}
