use std::time::Instant;

use super::*;
use crate::datastore::EndpointTelemetry;
use crate::scheduling::plugins::testing::*;
use crate::scheduling::CompletionKind;
use serde_json::json;

fn producer(basis: TokenBasis) -> InFlightLoadProducer {
    InFlightLoadProducer::new("inflight", basis, ctx().metrics.inflight)
}

fn completion() -> Completion {
    Completion { kind: CompletionKind::Finished, status: Some(200), usage: None, now: Instant::now() }
}

fn acquire(p: &InFlightLoadProducer, info: &DispatchInfo) {
    let f = RequestFixture::empty();
    p.pre_request(&f.request(), &result_for(std::slice::from_ref(&info.endpoint)), info);
}

#[test]
fn acquire_release_and_prepare() {
    let p = producer(TokenBasis::PromptAndOutput);
    let mut c = vec![candidate(1, EndpointTelemetry::default()), candidate(2, EndpointTelemetry::default())];
    let a = dispatch(&c[0].endpoint, 40, 100);
    let b = dispatch(&c[0].endpoint, 10, 30);
    acquire(&p, &a);
    acquire(&p, &b);
    p.prepare(&RequestFixture::empty().request(), &mut c);
    assert_eq!(c[0].attrs.inflight, InFlightLoad { requests: 2, tokens: 130 });
    assert_eq!(c[1].attrs.inflight, InFlightLoad::default());

    p.on_complete(&a, &completion());
    assert_eq!(p.load(&c[0].endpoint), InFlightLoad { requests: 1, tokens: 30 });
    p.on_complete(&b, &completion());
    assert_eq!(p.load(&c[0].endpoint), InFlightLoad::default());
}

#[test]
fn prompt_only_basis_counts_input_tokens() {
    let p = producer(TokenBasis::PromptOnly);
    let ep = endpoint(1);
    let info = dispatch(&ep, 40, 100);
    acquire(&p, &info);
    assert_eq!(p.load(&ep), InFlightLoad { requests: 1, tokens: 40 });
    p.on_complete(&info, &completion());
    assert_eq!(p.load(&ep), InFlightLoad::default());
}

#[test]
fn never_negative() {
    let p = producer(TokenBasis::PromptAndOutput);
    let ep = endpoint(1);
    let info = dispatch(&ep, 1, 5);
    acquire(&p, &info);
    p.on_complete(&info, &completion());
    // A spurious extra release floors at zero instead of going negative.
    p.on_complete(&info, &completion());
    assert_eq!(p.load(&ep), InFlightLoad::default());
}

#[test]
fn removal_drops_counters_and_late_releases_do_not_recreate_them() {
    let p = producer(TokenBasis::PromptAndOutput);
    let ep = endpoint(1);
    let info = dispatch(&ep, 1, 5);
    acquire(&p, &info);
    assert_eq!(p.tracked_endpoints(), 1);
    p.on_endpoints_removed(std::slice::from_ref(&ep));
    assert_eq!(p.tracked_endpoints(), 0);
    p.on_complete(&info, &completion());
    assert_eq!(p.tracked_endpoints(), 0);
    assert_eq!(p.load(&ep), InFlightLoad::default());
}

#[test]
fn idle_counters_of_vanished_endpoints_are_pruned() {
    let p = producer(TokenBasis::PromptAndOutput);
    {
        // Dispatched to an endpoint that is no longer referenced anywhere once the request ends.
        let gone = endpoint(1);
        let info = dispatch(&gone, 1, 5);
        acquire(&p, &info);
        p.on_complete(&info, &completion());
    }
    let live = endpoint(2);
    acquire(&p, &dispatch(&live, 1, 5));
    assert_eq!(p.tracked_endpoints(), 1);
}

#[test]
fn concurrent_acquire_release_ends_at_exactly_zero() {
    let p = Arc::new(producer(TokenBasis::PromptAndOutput));
    let endpoints: Vec<_> = (1..=3).map(endpoint).collect();
    let mut handles = Vec::new();
    for t in 0..8u64 {
        let p = p.clone();
        let endpoints = endpoints.clone();
        handles.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            for i in 0..5_000u64 {
                let ep = &endpoints[((t + i) % 3) as usize];
                let info = dispatch(ep, i % 7, i % 13 + t);
                acquire(&p, &info);
                held.push(info);
                // Release in bursts so many requests overlap.
                if held.len() >= 16 || i % 5 == 0 {
                    for info in held.drain(..) {
                        p.on_complete(&info, &completion());
                    }
                }
            }
            for info in held.drain(..) {
                p.on_complete(&info, &completion());
            }
        }));
    }
    // A reader checks that no counter is ever observed negative.
    let reader = {
        let p = p.clone();
        let endpoints = endpoints.clone();
        std::thread::spawn(move || {
            for _ in 0..2_000 {
                let mut c: Vec<_> = endpoints.iter().map(|e| Candidate::new(e.clone())).collect();
                p.prepare(&RequestFixture::empty().request(), &mut c);
                for c in &c {
                    assert!(c.attrs.inflight.requests >= 0 && c.attrs.inflight.tokens >= 0);
                }
            }
        })
    };
    for h in handles {
        h.join().unwrap();
    }
    reader.join().unwrap();
    for ep in &endpoints {
        assert_eq!(p.load(ep), InFlightLoad::default());
    }
}

#[test]
fn a_prefill_leg_loads_its_pod_until_the_response_starts_or_the_request_ends() {
    let p = producer(TokenBasis::PromptAndOutput);
    let (decode, prefill) = (endpoint(1), endpoint(2));
    let mut info = dispatch(&decode, 40, 100);
    info.prefill_endpoint = Some(prefill.clone());
    acquire(&p, &info);
    assert_eq!(p.load(&prefill), InFlightLoad { requests: 1, tokens: 40 });
    assert_eq!(p.load(&decode), InFlightLoad { requests: 1, tokens: 100 });
    p.on_response_headers(&info, Some(200), None, &mut Vec::new());
    assert_eq!(p.load(&prefill), InFlightLoad::default(), "the sidecar answers after the prefill leg");
    p.on_response_headers(&info, Some(200), None, &mut Vec::new());
    p.on_complete(&info, &completion());
    assert_eq!((p.load(&prefill), p.load(&decode)), (InFlightLoad::default(), InFlightLoad::default()));
    // Cancelled (or the prefill pod died) before any response: released on completion, once.
    let mut cancelled = dispatch(&decode, 40, 100);
    (cancelled.dispatch_id, cancelled.prefill_endpoint) = (2, Some(prefill.clone()));
    acquire(&p, &cancelled);
    p.on_complete(&cancelled, &completion());
    assert_eq!((p.load(&prefill), p.load(&decode)), (InFlightLoad::default(), InFlightLoad::default()));
    assert!(p.prefilling.lock().unwrap().is_empty());
}

#[test]
fn factory_roles_and_parameters() {
    let built = build(factory, json!({})).unwrap();
    assert!(built.producer.is_some() && built.pre_request.is_some());
    assert!(built.response.is_some() && built.endpoint_listener.is_some());
    assert_eq!(built.producer.unwrap().produces(), &[DataKey::InFlightLoad]);
    assert!(build(factory, json!({"addEstimatedOutputTokens": false})).is_ok());
    assert_rejects(factory, json!({"addEstimatedOutputTokens": "no"}), "addEstimatedOutputTokens");
    assert_rejects(factory, json!({"outputRatio": 1.5}), "outputRatio");
}
