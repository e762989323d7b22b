//! Writes every target's seeds ([`epp_fuzz::seeds`]) as `DIR/<target>/seed-NNN` (default DIR:
//! `crates/fuzz/corpus`), the directories libFuzzer starts from and grows.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus"), PathBuf::from);
    for (target, _) in epp_fuzz::TARGETS {
        let target_dir = dir.join(target);
        let seeds = epp_fuzz::seeds::seeds(target);
        let written = std::fs::create_dir_all(&target_dir).and_then(|()| {
            seeds
                .iter()
                .enumerate()
                .try_for_each(|(i, seed)| std::fs::write(target_dir.join(format!("seed-{i:03}")), seed))
        });
        if let Err(e) = written {
            eprintln!("epp-fuzz-seeds: writing {}: {e}", target_dir.display());
            return ExitCode::FAILURE;
        }
        println!("{}: {} seeds", target_dir.display(), seeds.len());
    }
    ExitCode::SUCCESS
}
