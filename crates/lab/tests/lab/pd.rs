//! Prefill/decode disaggregation in the lab: llm-d's P/D guide config on a fleet of prefill and decode
//! replicas. Every request completes, decode replicas serve them all (the client's endpoint), prefill
//! legs run on the prefill replicas, and no load is left anywhere.

use std::path::Path;

use epp_lab::{compare, Fleet, RouterChoice, RouterSpec, Workload};

const FLEET: &str = "noise: 0\nreplicas:\n\
    - {profile: h100-8b, count: 2, labels: {llm-d.ai/role: prefill}}\n\
    - {profile: h100-8b, count: 2, labels: {llm-d.ai/role: decode}}\n";
const WORKLOAD: &str = "seed: 5\nduration: 20s\narrival: {poisson: {rate: 4}}\n\
    prompt_tokens: {uniform: {min: 2000, max: 8000}}\noutput_tokens: {uniform: {min: 50, max: 150}}\n";

fn guide() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join("config/pd-disaggregation.yaml")).unwrap()
}

#[test]
fn the_guide_config_serves_every_request_from_decode_replicas_after_a_remote_prefill() {
    let choice = RouterChoice::new("pd", RouterSpec::Config { yaml: guide() });
    let fleet = Fleet::from_yaml(FLEET).unwrap();
    let report = compare(&fleet, &Workload::from_yaml(WORKLOAD).unwrap(), &[choice], 1).unwrap();
    let run = &report.runs[0];
    assert_eq!((run.completed, run.unfinished, run.duplicate_finishes), (run.requests, 0, 0), "{run:?}");
    let served: Vec<u64> = run.endpoints.iter().map(|e| e.requests).collect();
    assert_eq!(served[0] + served[1], 0, "prefill replicas serve no client: {served:?}");
    assert_eq!(served[2] + served[3], run.requests, "{served:?}");
    assert!(served[2] > 0 && served[3] > 0, "both decode replicas used: {served:?}");
    // A disaggregated prompt costs the decode replica one token's prefill, so its TTFT is the prefill
    // replica's prefill plus the transfer: well under a local 8k-token prefill behind a busy decode batch.
    let ttft = run.ttft_s.as_ref().unwrap();
    assert!(ttft.p50 > 0.0 && ttft.p50 < 2.0, "{ttft:?}");
}
