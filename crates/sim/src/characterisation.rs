//! Characterisation of the engine's latency model: the tables in the sim report, and the monotone
//! trends routing depends on (TTFT rises with queue depth and prompt length, TPOT with batch size).
//! These are simulated durations, so the assertions are about the model, never the test machine.
//! Run `cargo test --lib sim_characterisation -- --nocapture` to see the tables.

use super::engine::{AcceleratorProfile, Engine, EngineConfig, RequestEvent, SimRequest};

fn engine(profile: AcceleratorProfile) -> Engine {
    Engine::new(EngineConfig { noise: 0.0, ..EngineConfig::for_profile(profile) })
}

fn unique_prompt(id: u64, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| (id as u32).wrapping_mul(7_919).wrapping_add(i.wrapping_mul(31))).collect()
}

/// Per request: (TTFT, mean inter-token latency), all requests arriving together at t = 0.
fn run_burst(
    profile: AcceleratorProfile,
    requests: usize,
    prompt_len: usize,
    output: u32,
) -> Vec<(f64, f64)> {
    let mut engine = engine(profile);
    for id in 0..requests as u64 {
        engine.add_request(SimRequest {
            id,
            prompt: unique_prompt(id, prompt_len),
            max_output_tokens: output,
            lora: None,
        });
    }
    let mut first = vec![0.0; requests];
    let mut done = vec![0.0; requests];
    let mut now = 0.0;
    while engine.has_work() {
        let step = engine.step();
        now += step.duration;
        for event in step.events {
            match event {
                RequestEvent::FirstToken { id, .. } => first[id as usize] = now,
                RequestEvent::Finished { id, .. } => done[id as usize] = now,
                RequestEvent::Token { .. } => {}
            }
        }
    }
    let gaps = f64::from(output.max(2) - 1);
    first.iter().zip(&done).map(|(&f, &d)| (f, (d - f) / gaps)).collect()
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    sum / n.max(1) as f64
}

fn ms(seconds: f64) -> String {
    format!("{:>9.1}", seconds * 1000.0)
}

fn assert_rising(name: &str, values: &[f64]) {
    for pair in values.windows(2) {
        assert!(pair[1] > pair[0], "{name} should rise: {values:?}");
    }
}

#[test]
fn sim_characterisation() {
    for profile in [AcceleratorProfile::h100_8b(), AcceleratorProfile::l4_8b()] {
        println!("\n== {} ==", profile.name);
        println!("TTFT vs queue depth (1k-token prompts, 64 output, all arriving at once)");
        println!("{:>8} {:>9} {:>9}", "depth", "mean ms", "max ms");
        let mut means = Vec::new();
        for depth in [1, 4, 16, 64, 256] {
            let runs = run_burst(profile.clone(), depth, 1000, 64);
            let ttft_mean = mean(runs.iter().map(|r| r.0));
            let ttft_max = runs.iter().map(|r| r.0).fold(0.0, f64::max);
            println!("{depth:>8} {} {}", ms(ttft_mean), ms(ttft_max));
            means.push(ttft_mean);
        }
        assert_rising("TTFT vs queue depth", &means);

        println!("TTFT vs prompt length (lone request)");
        println!("{:>8} {:>9}", "tokens", "TTFT ms");
        let mut ttfts = Vec::new();
        for len in [128, 512, 1000, 4000, 16000] {
            let ttft = run_burst(profile.clone(), 1, len, 2)[0].0;
            println!("{len:>8} {}", ms(ttft));
            ttfts.push(ttft);
        }
        assert_rising("TTFT vs prompt length", &ttfts);

        println!("TPOT vs batch size (1k-token prompts, 256 output)");
        println!("{:>8} {:>9} {:>9}", "batch", "TPOT ms", "TTFT ms");
        let mut tpots = Vec::new();
        for batch in [1, 8, 16, 32, 64, 128] {
            let runs = run_burst(profile.clone(), batch, 1000, 256);
            let tpot = mean(runs.iter().map(|r| r.1));
            println!("{batch:>8} {} {}", ms(tpot), ms(mean(runs.iter().map(|r| r.0))));
            tpots.push(tpot);
        }
        assert_rising("TPOT vs batch size", &tpots);
    }
}

#[test]
fn l4_is_slower_than_h100_end_to_end() {
    let h100 = run_burst(AcceleratorProfile::h100_8b(), 8, 1000, 64);
    let l4 = run_burst(AcceleratorProfile::l4_8b(), 8, 1000, 64);
    let ratio = mean(l4.iter().map(|r| r.1)) / mean(h100.iter().map(|r| r.1));
    assert!((3.0..=4.5).contains(&ratio), "TPOT ratio {ratio}");
}
