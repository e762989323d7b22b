//! `epp-bench run --lab-replay FILE`: sends exactly the requests the lab simulates for a scenario (or a
//! bare lab workload) file — the lab's own plan (`epp_lab::generate::Plan`: the same bodies, byte for
//! byte, at the same arrival times), so a live run and a lab run of one scenario see identical traffic.
//!
//! Why beside `--lab-workload`: that one translates a workload into epp-bench's own generator and so
//! refuses what the generator cannot express (bursts, diurnal ramps, sessions, a shared-prefix fraction
//! below 1 or of varying length, capped log-normals), which is most of the scenario suite. Replaying the
//! plan needs no translation: every arrival shape, session and prefix mix is already in it. What live
//! traffic cannot carry is still refused by key: priorities (live, a priority is an InferenceObjective the
//! request names, which the lab's workload does not map to).
//!
//! Time: the plan's arrivals are simulated seconds; with `--time-scale S` (epp-sim's `--time-scale`, which
//! runs engines S× faster) they are released S× sooner, and the run reports real time as measured.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use epp_lab::generate::Plan;
use epp_lab::values::Seconds;
use http::{HeaderName, HeaderValue};
use tokio::task::JoinSet;

use super::body::{PlannedRequest, SLO_TPOT_HEADER, SLO_TTFT_HEADER};
use super::client::{send, Target};
use super::runner::RunResult;
use super::workload::WorkloadError;

/// Bytes per simulator token (the lab's plan writes its text in these units; epp-sim tokenizes them back).
const SIM_BYTES_PER_TOKEN: u32 = 4;

/// What may be changed of the file's workload.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    pub seed: Option<u64>,
    /// Simulated seconds of arrivals.
    pub duration_s: Option<f64>,
    /// Multiplies every arrival rate (on top of a scenario's own `rate_scale`), as `epp-bench lab
    /// --rate-scale` does.
    pub rate_scale: Option<f64>,
    /// Releases arrivals this many times sooner (default 1).
    pub time_scale: Option<f64>,
}

/// The requests to send, each with its release offset from the run's start.
#[derive(Debug, Clone)]
pub struct Replay {
    pub workload: epp_lab::Workload,
    pub requests: Vec<(Duration, PlannedRequest)>,
}

fn unsupported(field: &'static str, message: &str) -> WorkloadError {
    WorkloadError::Unsupported { field, message: message.to_string() }
}

/// Reads a scenario file (its workload, rate already scaled) or a lab workload file, and applies `options`.
pub fn load(path: &Path, options: ReplayOptions) -> Result<Replay, WorkloadError> {
    let shown = path.display().to_string();
    let parse = |message: String| WorkloadError::Parse { path: shown.clone(), message };
    let text = std::fs::read_to_string(path).map_err(|e| parse(e.to_string()))?;
    let is_scenario = text.lines().any(|l| l.starts_with("fleet:"));
    let mut workload = if is_scenario {
        epp_lab::scenario::Scenario::from_yaml(&text).map_err(|e| parse(e.to_string()))?.workload
    } else {
        epp_lab::Workload::from_yaml(&text).map_err(|e| parse(e.to_string()))?
    };
    if let Some(scale) = options.rate_scale {
        workload.arrival = workload.arrival.scaled(scale);
    }
    if let Some(seed) = options.seed {
        workload.seed = seed;
    }
    if let Some(d) = options.duration_s {
        workload.duration = Seconds(d);
    }
    plan(workload, options.time_scale.unwrap_or(1.0))
}

/// The plan of `workload` as requests to send, arrivals divided by `time_scale`.
pub fn plan(workload: epp_lab::Workload, time_scale: f64) -> Result<Replay, WorkloadError> {
    if !workload.priorities.is_empty() {
        return Err(unsupported(
            "priorities",
            "live, a priority is an InferenceObjective; the lab's are not mapped",
        ));
    }
    if !(time_scale.is_finite() && time_scale > 0.0) {
        return Err(unsupported("time_scale", "must be a number > 0"));
    }
    let mut headers = Vec::new();
    if let Some(slo) = workload.slo {
        for (name, ms) in [(SLO_TTFT_HEADER, slo.ttft_ms), (SLO_TPOT_HEADER, slo.tpot_ms)] {
            if let Some(value) = ms.and_then(|ms| HeaderValue::from_str(&ms.to_string()).ok()) {
                headers.push((HeaderName::from_static(name), value));
            }
        }
    }
    let plan = Plan::new(&workload);
    let mut body = Vec::new();
    let requests = plan
        .requests
        .iter()
        .map(|req| {
            plan.write_body(req, &mut body);
            let offset = Duration::from_secs_f64(req.arrival / time_scale);
            let request = PlannedRequest {
                body: Bytes::copy_from_slice(&body),
                headers: headers.clone(),
                prompt_tokens: u64::from(prompt_tokens(&plan, req)),
                max_tokens: u64::from(plan.output_tokens(req)),
                objective: None,
            };
            (offset, request)
        })
        .collect();
    Ok(Replay { workload, requests })
}

/// Simulator tokens of the request's prompt: its system prompt and every turn's text up to its own.
fn prompt_tokens(plan: &Plan, req: &epp_lab::generate::PlannedRequest) -> u32 {
    let system = req.system.map_or(0, |g| plan.system_prompts[g as usize].len);
    let start = req.first_turn as usize;
    let turns = &plan.turns[start..=start + req.turn as usize];
    let history: u32 = turns.iter().take(req.turn as usize).map(|t| t.user.len + t.assistant.len).sum();
    let own = turns.last().map_or(0, |t| t.user.len);
    (system + history + own) / SIM_BYTES_PER_TOKEN
}

/// Releases every request at its offset (open loop: a slow answer delays nothing), and waits for all.
pub async fn run(target: &Target, replay: Replay) -> RunResult {
    let started_unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let start = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::with_capacity(replay.requests.len())));
    let mut tasks = JoinSet::new();
    for (index, (offset, request)) in replay.requests.into_iter().enumerate() {
        tokio::time::sleep_until((start + offset).into()).await;
        let (target, samples) = (target.clone(), samples.clone());
        tasks.spawn(async move {
            let sample = send(&target, index as u64, request, start).await;
            samples.lock().unwrap_or_else(PoisonError::into_inner).push(sample);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = start.elapsed();
    let mut samples = std::mem::take(&mut *samples.lock().unwrap_or_else(PoisonError::into_inner));
    samples.sort_by_key(|s| s.index);
    RunResult { samples, elapsed, started_unix_s }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = "duration: 20s\narrival: {bursts: {base_rate: 1, burst_rate: 8, burst_duration: 2s, period: 5s}}\n\
                        prompt_tokens: {lognormal: {mean: 300, stddev: 300, max: 4000}}\n\
                        output_tokens: {lognormal: {mean: 250, stddev: 200, max: 1500}}\n\
                        shared_prefixes: {fraction: 0.8, groups: 4, prefix_tokens: {uniform: {min: 100, max: 300}}}\n\
                        sessions: {fraction: 0.3, turns: {uniform: {min: 2, max: 3}}, think_time: 2s}\n\
                        slo: {ttft_ms: 1000, tpot_ms: 80}\nseed: 7\n";

    fn workload(text: &str) -> epp_lab::Workload {
        epp_lab::Workload::from_yaml(text).expect("a lab workload")
    }

    #[test]
    fn the_replay_is_the_labs_plan_byte_for_byte() {
        let replay = plan(workload(CHAT), 1.0).expect("replayable");
        let lab = Plan::new(&workload(CHAT));
        assert_eq!(replay.requests.len(), lab.requests.len());
        let mut body = Vec::new();
        for ((offset, sent), planned) in replay.requests.iter().zip(&lab.requests) {
            lab.write_body(planned, &mut body);
            assert_eq!(sent.body.as_ref(), body.as_slice());
            assert!((offset.as_secs_f64() - planned.arrival).abs() < 1e-6);
            assert_eq!(sent.max_tokens, u64::from(lab.output_tokens(planned)));
            let names: Vec<&str> = sent.headers.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, [SLO_TTFT_HEADER, SLO_TPOT_HEADER]);
        }
        // Sessions resend their history: a later turn's prompt is longer than its first's.
        assert!(lab.requests.iter().any(|r| r.turn > 0));
    }

    #[test]
    fn time_scale_releases_sooner_and_priorities_are_refused() {
        let one = plan(workload(CHAT), 1.0).expect("replayable");
        let fast = plan(workload(CHAT), 4.0).expect("replayable");
        let last = |r: &Replay| r.requests.last().map(|(o, _)| o.as_secs_f64()).unwrap_or_default();
        assert!((last(&one) / 4.0 - last(&fast)).abs() < 1e-6);
        let with_priorities = format!("{CHAT}priorities: [{{priority: 1, weight: 1}}]\n");
        let err = plan(workload(&with_priorities), 1.0).expect_err("refused");
        assert!(err.to_string().contains("priorities"), "{err}");
    }

    #[test]
    fn scenario_files_are_replayed_with_their_rate_scale() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lab/inputs/scenarios");
        let path = dir.join("chat-3fast-1slow.yaml");
        let options = ReplayOptions { seed: Some(101), duration_s: Some(30.0), ..Default::default() };
        let replay = load(&path, options).expect("the scenario replays");
        let scenario = epp_lab::scenario::Scenario::load(&path).expect("scenario");
        assert_eq!(replay.workload.arrival, scenario.workload.arrival, "rate_scale applied once");
        assert_eq!((replay.workload.seed, replay.workload.duration.0), (101, 30.0));
        assert!(!replay.requests.is_empty());
    }
}
