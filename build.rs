//! Stamps the build with its version and git commit, for the `inference_extension_info` / `llm_d_epp_info` metric.
//!
//! The rerun triggers are the checkout's real HEAD and refs, asked of git: in a worktree `.git` is a file
//! and they live elsewhere, and a trigger path that does not exist makes cargo rerun this script (and
//! rebuild epp) on every build.
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=EPP_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    for (flag, leaf) in [("--git-dir", "HEAD"), ("--git-common-dir", "refs")] {
        if let Some(dir) = git(&["rev-parse", flag]) {
            let path = Path::new(&dir).join(leaf);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
