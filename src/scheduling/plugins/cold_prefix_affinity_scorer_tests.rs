use serde_json::json;

use super::*;
use crate::scheduling::plugins::testing::*;
use crate::scheduling::PrefixMatch;

fn candidates(n: u8) -> Vec<Candidate> {
    (1..=n).map(|i| candidate(i, Default::default())).collect()
}

fn scorer() -> Arc<dyn Scorer> {
    let built = build(factory, json!({})).expect("defaults");
    assert_eq!(built.consumes, vec![DataKey::PrefixCacheMatch]);
    built.scorer.expect("a scorer")
}

fn scores(
    scorer: &dyn Scorer,
    fixture: &RequestFixture,
    candidates: &[Candidate],
    subset: &[usize],
) -> Vec<f64> {
    let mut s = vec![f64::NAN; subset.len()];
    scorer.score(&fixture.request(), candidates, subset, &mut s);
    s
}

/// The endpoint a recurring opening is placed on: scored once to be seen, then again.
fn placed(
    scorer: &dyn Scorer,
    fixture: &RequestFixture,
    candidates: &[Candidate],
    subset: &[usize],
) -> usize {
    scores(scorer, fixture, candidates, subset);
    chosen(&scores(scorer, fixture, candidates, subset)).expect("one endpoint chosen")
}

fn chosen(s: &[f64]) -> Option<usize> {
    assert!(s.iter().all(|&v| v == 0.0 || v == 1.0), "{s:?}");
    assert!(s.iter().filter(|&&v| v == 1.0).count() <= 1, "{s:?}");
    s.iter().position(|&v| v == 1.0)
}

#[test]
fn a_first_sight_is_left_to_the_other_scorers_and_a_recurring_opening_is_placed() {
    let fixture = RequestFixture::with_prompt("m", "\"You are a helpful assistant.\"");
    let c = candidates(4);
    let s = scorer();
    assert_eq!(scores(&*s, &fixture, &c, &[0, 1, 2, 3]), vec![0.0; 4], "never seen: no opinion");
    assert!(chosen(&scores(&*s, &fixture, &c, &[0, 1, 2, 3])).is_some(), "seen once: placed");
    // A route probe neither records nor needs to: an unseen opening stays unseen.
    let probe = RequestFixture::with_prompt("m", "\"Probed only.\"");
    let mut req = probe.request();
    req.dry_run = true;
    let mut out = vec![f64::NAN; 4];
    s.score(&req, &c, &[0, 1, 2, 3], &mut out);
    s.score(&req, &c, &[0, 1, 2, 3], &mut out);
    assert_eq!(out, vec![0.0; 4]);
}

#[test]
fn every_replica_places_a_recurring_cold_prompt_on_the_same_endpoint_whatever_the_order() {
    let fixture = RequestFixture::with_prompt("m", "\"You are a helpful assistant. Answer briefly.\"");
    let c = candidates(6);
    let first = placed(&*scorer(), &fixture, &c, &[0, 1, 2, 3, 4, 5]);
    // Another replica (its own table) lists the same endpoints in another order: the same endpoint wins.
    let reversed: Vec<Candidate> = c.iter().rev().cloned().collect();
    let again = placed(&*scorer(), &fixture, &reversed, &[0, 1, 2, 3, 4, 5]);
    assert_eq!(c[first].endpoint.host_port, reversed[again].endpoint.host_port);
    // Filtered out, it gives way to the best of the rest.
    let rest: Vec<usize> = (0..6).filter(|&i| i != first).collect();
    assert_ne!(rest[placed(&*scorer(), &fixture, &c, &rest)], first);
}

#[test]
fn prompts_spread_over_the_endpoints() {
    let c = candidates(4);
    let s = scorer();
    let mut counts = [0usize; 4];
    for n in 0..400 {
        let fixture = RequestFixture::with_prompt("m", &format!("\"system prompt {n}: be brief\""));
        counts[placed(&*s, &fixture, &c, &[0, 1, 2, 3])] += 1;
    }
    assert!(counts.iter().all(|&n| (60..140).contains(&n)), "{counts:?}");
}

#[test]
fn says_nothing_once_any_endpoint_holds_part_of_the_prompt() {
    let fixture = RequestFixture::with_prompt("m", "\"a prompt\"");
    let mut c = candidates(3);
    let s = scorer();
    placed(&*s, &fixture, &c, &[0, 1, 2]);
    c[2].attrs.prefix = Some(PrefixMatch { match_blocks: 1, total_blocks: 4, block_chars: 64 });
    assert_eq!(scores(&*s, &fixture, &c, &[0, 1, 2]), vec![0.0, 0.0, 0.0]);
    c[2].attrs.prefix = Some(PrefixMatch { match_blocks: 0, total_blocks: 4, block_chars: 64 });
    assert!(chosen(&scores(&*s, &fixture, &c, &[0, 1, 2])).is_some());
    // A request without a prompt (nothing parsed) has no opening to place.
    assert_eq!(scores(&*s, &RequestFixture::empty(), &c, &[0, 1, 2]), vec![0.0, 0.0, 0.0]);
}

#[test]
fn only_the_opening_counts() {
    let c = candidates(8);
    let s = scorer();
    let opening = "x".repeat(300);
    let a = RequestFixture::with_prompt("m", &format!("\"{opening} first question\""));
    let b = RequestFixture::with_prompt("m", &format!("\"{opening} another question, longer\""));
    let all: Vec<usize> = (0..8).collect();
    let first = placed(&*s, &a, &c, &all);
    assert_eq!(chosen(&scores(&*s, &b, &c, &all)), Some(first), "b opens as a does: already seen");
}

#[test]
fn parameters() {
    assert!(build(factory, json!({"openingBytes": 64})).is_ok());
    assert_rejects(factory, json!({"openingBytes": 0}), "openingBytes");
    assert_rejects(factory, json!({"openingBytes": "long"}), "openingBytes");
    assert_rejects(factory, json!({"window": 1}), "window");
}
