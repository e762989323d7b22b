use super::*;
use crate::Workload;
use epp::request::parse_request;

fn workload(extra: &str) -> Workload {
    Workload::from_yaml(&format!(
        "seed: 5\nduration: 20s\narrival: {{poisson: {{rate: 10}}}}\n\
         prompt_tokens: {{uniform: {{min: 20, max: 60}}}}\noutput_tokens: {{constant: 8}}\n{extra}"
    ))
    .unwrap()
}

#[test]
fn plans_are_deterministic_and_ordered() {
    let w = workload("");
    let (a, b) = (Plan::new(&w), Plan::new(&w));
    assert_eq!(a.requests, b.requests);
    assert!((150..250).contains(&a.requests.len()), "{}", a.requests.len());
    assert!(a.requests.windows(2).all(|p| p[0].arrival <= p[1].arrival));
    assert!(a.requests.iter().all(|r| r.arrival < 20.0));
}

#[test]
fn constant_arrivals_are_evenly_spaced() {
    let w = workload("").clone();
    let w = Workload { arrival: Arrival::Constant { rate: 4.0 }, ..w };
    let plan = Plan::new(&w);
    assert_eq!(plan.requests.len(), 80);
    assert_eq!(plan.requests[1].arrival, 0.25);
}

#[test]
fn bursts_concentrate_arrivals() {
    let w = Workload::from_yaml(
        "duration: 100s\narrival: {bursts: {base_rate: 1, burst_rate: 50, burst_duration: 1s, period: 10s}}\n\
         prompt_tokens: {constant: 10}\noutput_tokens: {constant: 1}\n",
    )
    .unwrap();
    let plan = Plan::new(&w);
    let in_burst = plan.requests.iter().filter(|r| r.arrival % 10.0 < 1.0).count();
    let outside = plan.requests.len() - in_burst;
    assert!(in_burst > 3 * outside, "{in_burst} in bursts, {outside} outside");
}

#[test]
fn diurnal_arrivals_ramp_up_and_down_and_scale() {
    let w = Workload::from_yaml(
        "duration: 100s\narrival: {diurnal: {min_rate: 2, max_rate: 40, period: 100s}}\n\
         prompt_tokens: {constant: 10}\noutput_tokens: {constant: 1}\n",
    )
    .unwrap();
    let in_window = |plan: &Plan, from: f64, to: f64| {
        plan.requests.iter().filter(|r| (from..to).contains(&r.arrival)).count()
    };
    let plan = Plan::new(&w);
    let (trough, peak, tail) =
        (in_window(&plan, 0.0, 10.0), in_window(&plan, 45.0, 55.0), in_window(&plan, 90.0, 100.0));
    assert!(peak > 4 * trough && peak > 4 * tail, "trough {trough}, peak {peak}, tail {tail}");
    let doubled = Plan::new(&Workload { arrival: w.arrival.scaled(2.0), ..w.clone() });
    let ratio = doubled.requests.len() as f64 / plan.requests.len() as f64;
    assert!((1.8..2.2).contains(&ratio), "scaled by 2: {ratio}");
}

#[test]
fn bodies_parse_and_share_prefixes() {
    let w = workload(
        "shared_prefixes: {fraction: 1, groups: 1, prefix_tokens: {constant: 200}}\n\
         loras: {base_weight: 1, adapters: [{name: \"ad\\\"x\", weight: 1}]}\n",
    );
    let plan = Plan::new(&w);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    plan.write_body(&plan.requests[0], &mut a);
    plan.write_body(&plan.requests[1], &mut b);
    let (pa, pb) = (
        parse_request("/v1/chat/completions", &a).unwrap(),
        parse_request("/v1/chat/completions", &b).unwrap(),
    );
    assert_eq!(pa.max_tokens, Some(8));
    let common = pa.prefix_bytes(&a).iter().zip(pb.prefix_bytes(&b)).take_while(|(x, y)| x == y).count();
    assert!(common >= 800, "shared system prompt of 200 tokens, {common} common bytes");
    let models: Vec<_> = plan.requests.iter().map(|r| plan.model_of(r)).collect();
    assert!(models.contains(&Some("ad\"x")) && models.contains(&None));
    let lora_req = plan.requests.iter().find(|r| r.lora.is_some()).unwrap();
    let mut body = Vec::new();
    plan.write_body(lora_req, &mut body);
    assert_eq!(parse_request("/v1/chat/completions", &body).unwrap().model, "ad\"x");
}

#[test]
fn sessions_resend_the_growing_conversation() {
    let w = workload("sessions: {fraction: 1, turns: {constant: 3}, think_time: 1s}\n");
    let plan = Plan::new(&w);
    let first = plan.requests.iter().find(|r| r.turn == 0).unwrap();
    let later: Vec<_> = plan.requests.iter().filter(|r| r.first_turn == first.first_turn).collect();
    assert!(later.len() >= 2);
    let mut previous: Vec<u8> = Vec::new();
    for r in later {
        let mut body = Vec::new();
        plan.write_body(r, &mut body);
        let parsed = parse_request("/v1/chat/completions", &body).unwrap();
        let prefix = parsed.prefix_bytes(&body);
        if !previous.is_empty() {
            // Everything but the closing `]` of the previous turn's messages is resent.
            assert!(prefix.starts_with(&previous[..previous.len() - 1]));
            assert!(prefix.len() > previous.len());
        }
        previous = prefix.to_vec();
    }
}
