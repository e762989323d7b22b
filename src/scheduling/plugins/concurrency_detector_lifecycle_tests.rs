//! The detector's own accounting: every dispatch is released exactly once, by exactly its amounts, under
//! any interleaving and across endpoint removal.

use super::*;

#[test]
fn completion_releases_exactly_what_dispatch_added() {
    let d = requests_mode(10, 0.0);
    let ep = endpoint(1);
    let a = dispatch_to(&d, &ep, 100);
    let b = dispatch_to(&d, &ep, 30);
    assert_eq!(d.load(&ep), InFlightLoad { requests: 2, tokens: 130 });
    d.on_complete(&a, &finished());
    assert_eq!(d.load(&ep), InFlightLoad { requests: 1, tokens: 30 });
    // However the request ends.
    d.on_complete(&b, &aborted());
    assert_eq!(d.load(&ep), InFlightLoad::default());
}

#[test]
fn only_the_primary_target_is_counted() {
    let d = requests_mode(10, 0.0);
    let (primary, fallback) = (endpoint(1), endpoint(2));
    let info = dispatch(&primary, 5, 10);
    let result = result_for(&[primary.clone(), fallback.clone()]);
    d.pre_request(&RequestFixture::empty().request(), &result, &info);
    assert_eq!(d.load(&primary).requests, 1);
    assert_eq!(d.load(&fallback), InFlightLoad::default());
}

#[test]
fn counters_never_go_negative() {
    let d = requests_mode(10, 0.0);
    let ep = endpoint(1);
    let info = dispatch_to(&d, &ep, 5);
    d.on_complete(&info, &finished());
    // A release without a matching dispatch (not something the framework does) floors at zero.
    d.on_complete(&info, &finished());
    assert_eq!(d.load(&ep), InFlightLoad::default());
}

#[test]
fn removed_endpoints_take_their_counters_and_late_completions_resurrect_nothing() {
    let d = requests_mode(10, 0.0);
    let (gone, stays) = (endpoint(1), endpoint(2));
    let late = dispatch_to(&d, &gone, 40);
    let kept = dispatch_to(&d, &stays, 40);
    assert_eq!(d.tracked_endpoints(), 2);
    d.on_endpoints_removed(std::slice::from_ref(&gone));
    assert_eq!(d.tracked_endpoints(), 1);
    assert_eq!(d.load(&gone), InFlightLoad::default());
    d.on_complete(&late, &finished());
    assert_eq!(d.tracked_endpoints(), 1, "a late completion creates no counters");
    assert_eq!(d.load(&gone), InFlightLoad::default());
    assert_eq!(d.load(&stays), InFlightLoad { requests: 1, tokens: 40 });
    d.on_complete(&kept, &finished());
    assert_eq!(d.load(&stays), InFlightLoad::default());
}

#[test]
fn idle_counters_of_vanished_endpoints_are_pruned() {
    let d = requests_mode(10, 0.0);
    {
        // Dispatched to an endpoint nobody references once the request ends (its removal notice missed).
        let gone = endpoint(1);
        let info = dispatch_to(&d, &gone, 5);
        d.on_complete(&info, &finished());
    }
    dispatch_to(&d, &endpoint(2), 5);
    assert_eq!(d.tracked_endpoints(), 1);
}

#[test]
fn concurrent_dispatch_and_completion_end_at_exactly_zero() {
    let d = Arc::new(tokens_mode(1_000_000, 0.0));
    let endpoints: Vec<_> = (1..=4).map(endpoint).collect();
    let workers: Vec<_> = (0..8u64)
        .map(|t| {
            let d = d.clone();
            let endpoints = endpoints.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..5_000u64 {
                    let ep = &endpoints[((t + i) % 4) as usize];
                    held.push(dispatch_to(&d, ep, (i * 7 + t) % 4096));
                    // Release in bursts, alternately finished and aborted, so many requests overlap.
                    if held.len() >= 16 || i % 5 == 0 {
                        for (k, info) in held.drain(..).enumerate() {
                            d.on_complete(&info, &if k % 2 == 0 { finished() } else { aborted() });
                        }
                    }
                }
                for info in held.drain(..) {
                    d.on_complete(&info, &finished());
                }
            })
        })
        .collect();
    // Readers: the gate and the filter never see a negative load while the counters move.
    let reader = {
        let d = d.clone();
        let endpoints = endpoints.clone();
        std::thread::spawn(move || {
            let c = candidates_of(&endpoints);
            for _ in 0..2_000 {
                let s = d.saturation_with_pending(&c, Instant::now(), PendingLoad::default());
                assert!(s >= 0.0, "{s}");
                for ep in &endpoints {
                    let l = d.load(ep);
                    assert!(l.requests >= 0 && l.tokens >= 0, "{l:?}");
                }
                let _ = run_filter(&d, &c);
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    for ep in &endpoints {
        assert_eq!(d.load(ep), InFlightLoad::default());
    }
    assert_eq!(d.saturation(&candidates_of(&endpoints), Instant::now()), 0.0);
}

#[test]
fn concurrent_removal_never_underflows() {
    let d = Arc::new(requests_mode(100, 0.0));
    let stable = endpoint(1);
    let flapping = endpoint(2);
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let d = d.clone();
            let (stable, flapping) = (stable.clone(), flapping.clone());
            std::thread::spawn(move || {
                for i in 0..3_000u64 {
                    let ep = if (i + t) % 2 == 0 { &stable } else { &flapping };
                    let info = dispatch_to(&d, ep, i % 100 + 1);
                    std::thread::yield_now();
                    d.on_complete(&info, &finished());
                }
            })
        })
        .collect();
    let remover = {
        let d = d.clone();
        let flapping = flapping.clone();
        std::thread::spawn(move || {
            for _ in 0..2_000 {
                d.on_endpoints_removed(std::slice::from_ref(&flapping));
                let l = d.load(&flapping);
                assert!(l.requests >= 0 && l.tokens >= 0, "{l:?}");
                std::thread::yield_now();
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    remover.join().unwrap();
    // The endpoint that was never removed is exactly balanced; the flapping one is at zero or gone.
    assert_eq!(d.load(&stable), InFlightLoad::default());
    assert_eq!(d.load(&flapping), InFlightLoad::default());
}
