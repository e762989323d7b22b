//! Replays each target's seeds and every input of its checked-in corpus (`crates/fuzz/corpus/<target>/`,
//! grown and minimised by fuzzing campaigns) through the target: what fuzzing found once stays covered in
//! `make test`, on stable, without libFuzzer. A target that panics or breaks an invariant fails here,
//! naming the input file.

use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

fn replay(target: &str) {
    let run = epp_fuzz::TARGETS.iter().find(|(name, _)| *name == target).map(|(_, run)| *run);
    let run = run.unwrap_or_else(|| panic!("no target named {target}"));
    let seeds = epp_fuzz::seeds::seeds(target);
    assert!(!seeds.is_empty(), "{target} has no seeds");
    for seed in &seeds {
        run(seed);
    }
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    for file in &files {
        let input = std::fs::read(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let outcome = std::panic::catch_unwind(|| run(&input));
        assert!(outcome.is_ok(), "{target} failed on {}", file.display());
    }
    eprintln!("{target}: {} seeds and {} corpus inputs replayed", seeds.len(), files.len());
}

#[test]
fn metrics_text_corpus() {
    replay("metrics_text");
}

#[test]
fn openai_request_corpus() {
    replay("openai_request");
}

#[test]
fn sse_usage_corpus() {
    replay("sse_usage");
}

#[test]
fn config_loader_corpus() {
    replay("config_loader");
}

#[test]
fn extproc_stream_corpus() {
    replay("extproc_stream");
}

#[test]
fn kv_events_corpus() {
    replay("kv_events");
}

#[test]
fn chat_template_corpus() {
    replay("chat_template");
}

#[test]
fn peer_datagram_corpus() {
    replay("peer_datagram");
}

#[test]
fn byte_words_corpus() {
    replay("byte_words");
}

#[test]
fn every_target_has_a_corpus_and_a_replay_test() {
    let this = include_str!("replay.rs");
    for (target, _) in epp_fuzz::TARGETS {
        assert!(corpus_dir(target).is_dir(), "no corpus directory for {target}");
        assert!(this.contains(&format!("fn {target}_corpus()")), "no replay test for {target}");
    }
}
