//! The soak (`make soak`, not in CI): `SOAK_MINUTES` (default 30) of open-loop load at `SOAK_LOAD` (default
//! 0.8) of the throughput measured first (closed loop, 32 clients, 10 s), through Envoy, with a fault injected every `SOAK_FAULT_EVERY_S` seconds
//! (default 120), cycling through: a replica SIGKILLed and restarted, a hung `/metrics`, a replica failing
//! every other request, a garbage `/metrics`, a client cancel burst, an Envoy restart. Each fault lasts
//! 20 s. Every 10 s a row goes to `target/soak/soak.csv`: requests, errors (all, then 5xx, transport
//! errors and timeouts, cut bodies) and starts the load generator skipped (2,048 already outstanding) in the window, epp's RSS, the
//! size of its `/metrics` page, the in-flight gauges, and the machine's load average (other work on a shared
//! machine shows there); `scripts/plot-soak.py` draws it.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::load::{after, errors, ClosedLoop, OpenLoop};
use crate::{Fleet, IN_FLIGHT_GAUGES, MODEL};
use epp_testkit::*;

const FAULTS: [&str; 6] =
    ["kill", "metrics-hang", "fail-half", "metrics-garbage", "cancel-burst", "envoy-restart"];
const FAULT_LENGTH: Duration = Duration::from_secs(20);
const ROW_EVERY: Duration = Duration::from_secs(10);

fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

/// The machine's 1-minute load average: other work on the machine shows up here, beside the errors.
fn load_average() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn start_fault(fleet: &mut Fleet, fault: &str) {
    match fault {
        "kill" => fleet.kill(1),
        "metrics-hang" => fleet.set_faults(2, &json!({"metrics": "hang"})).await,
        "fail-half" => fleet.set_faults(0, &json!({"fail_every": 2})).await,
        "metrics-garbage" => fleet.set_faults(1, &json!({"metrics": "garbage"})).await,
        "cancel-burst" => {
            let client = http_client();
            let url = fleet.stack.url("/v1/chat/completions");
            let mut burst = tokio::task::JoinSet::new();
            for n in 0..200u64 {
                let (client, url) = (client.clone(), url.clone());
                burst.spawn(async move {
                    let body = json!({"model": MODEL, "stream": true,
                        "messages": [{"role": "user", "content": format!("burst {n}")}]});
                    let _ =
                        tokio::time::timeout(Duration::from_millis(n % 100), post_json(&client, &url, &body))
                            .await;
                });
            }
            while burst.join_next().await.is_some() {}
        }
        "envoy-restart" => fleet.stack.envoy.restart(),
        _ => {}
    }
}

async fn end_fault(fleet: &mut Fleet, fault: &str) {
    match fault {
        "kill" => fleet.restart(1),
        "metrics-hang" => fleet.set_faults(2, &json!({"metrics": "ok"})).await,
        "fail-half" => fleet.set_faults(0, &json!({"fail_every": 0})).await,
        "metrics-garbage" => fleet.set_faults(1, &json!({"metrics": "ok"})).await,
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "30 minutes: run with `make soak`"]
async fn soak() {
    let duration = env_secs("SOAK_MINUTES", 30) * 60;
    let fault_every = env_secs("SOAK_FAULT_EVERY_S", 120);
    let Some(mut fleet) = Fleet::start("soak", 3, &["--chunks", "8", "--chunk-delay-ms", "5"], &[]).await
    else {
        return;
    };
    let url = fleet.stack.url("/v1/completions");

    let probe = ClosedLoop::start(url.clone(), 32);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let measured = probe.stop().await;
    let max_rate = measured.len() as f64 / 10.0;
    let fraction: f64 = std::env::var("SOAK_LOAD").ok().and_then(|v| v.parse().ok()).unwrap_or(0.8);
    let rate = fraction * max_rate;
    eprintln!("SOAK maximum {max_rate:.0} req/s (closed loop, 32 clients); soaking at {rate:.0} req/s");

    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/soak");
    std::fs::create_dir_all(&out_dir).expect("create target/soak");
    let mut csv = std::fs::File::create(out_dir.join("soak.csv")).expect("create soak.csv");
    writeln!(
        csv,
        "seconds,requests,errors,five_xx,transport,cut,shed,rss_kib,metrics_bytes,in_flight,load1,fault"
    )
    .expect("write soak.csv");

    let load = OpenLoop::start(url, rate, 2048);
    let started = Instant::now();
    let (mut next_row, mut next_fault, mut fault_index) = (ROW_EVERY, fault_every, 0usize);
    let mut active: Option<(&str, Duration)> = None;
    let (mut last_row_at, mut last_shed) = (started, 0);
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = started.elapsed();
        if let Some((fault, since)) = active {
            if t >= since + FAULT_LENGTH {
                end_fault(&mut fleet, fault).await;
                active = None;
            }
        } else if t >= next_fault {
            let fault = FAULTS[fault_index % FAULTS.len()];
            fault_index += 1;
            eprintln!("SOAK {:>5.0}s fault {fault}", t.as_secs_f64());
            start_fault(&mut fleet, fault).await;
            active = Some((fault, t));
            next_fault += fault_every;
        }
        if t >= next_row {
            let now = Instant::now();
            let window = after(&load.snapshot(), last_row_at);
            last_row_at = now;
            let text = fleet.metrics_text();
            let in_flight: f64 =
                IN_FLIGHT_GAUGES.iter().map(|g| metric_sum(&text, g, &[]).unwrap_or(0.0)).sum();
            let fault = active.map_or("", |(f, _)| f);
            let shed = load.shed();
            let five_xx = window.iter().filter(|s| s.status >= 500).count();
            let transport = window.iter().filter(|s| s.status == 0).count();
            let cut = window.iter().filter(|s| s.status == 200 && s.cut).count();
            let row = format!(
                "{:.0},{},{},{five_xx},{transport},{cut},{},{},{},{in_flight},{:.2},{fault}",
                t.as_secs_f64(),
                window.len(),
                errors(&window),
                shed - last_shed,
                rss_kib(fleet.stack.epp.child.pid()),
                text.len(),
                load_average()
            );
            eprintln!("SOAK {row}");
            writeln!(csv, "{row}").expect("write soak.csv");
            last_shed = shed;
            next_row += ROW_EVERY;
        }
    }
    if let Some((fault, _)) = active {
        end_fault(&mut fleet, fault).await;
    }
    let shed = load.shed();
    let samples = load.stop().await;
    fleet.assert_gauges_settle("soak").await;
    let text = fleet.metrics_text();
    eprintln!(
        "SOAK done: {} requests, {} errors ({:.3} %), {shed} starts shed by the load generator, final RSS {} \
         KiB, /metrics {} bytes, gauges 0",
        samples.len(),
        errors(&samples),
        100.0 * errors(&samples) as f64 / samples.len().max(1) as f64,
        rss_kib(fleet.stack.epp.child.pid()),
        text.len()
    );
}
