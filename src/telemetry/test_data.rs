//! Access to the shared sample pages (`shared/data/` beside the worktrees).

use std::path::PathBuf;

/// Reads a file from the shared data directory, next to the crate root or at `/work/shared/data`.
pub(crate) fn sample_page(name: &str) -> Vec<u8> {
    let beside = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data").join(name);
    let inside = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shared/data").join(name);
    let absolute = PathBuf::from("/work/shared/data").join(name);
    [beside, inside, absolute]
        .iter()
        .find_map(|path| std::fs::read(path).ok())
        .unwrap_or_else(|| panic!("sample page {name} not found under shared/data"))
}
