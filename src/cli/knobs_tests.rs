use std::path::{Path, PathBuf};

use super::*;

const BEGIN: &str = "<!-- flags:begin: generated from clap's metadata (src/cli/knobs.rs); \
                     `EPP_BLESS=1 cargo test -p epp --lib knobs::tests::flags_env` rewrites it -->";
const END: &str = "<!-- flags:end -->";

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every page under docs/, concatenated.
fn all_docs() -> String {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(docs_dir())
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    pages.iter().map(|page| read(page)).collect::<Vec<_>>().join("\n")
}

/// The text between the flag table's markers.
fn flag_section(page: &str) -> Option<&str> {
    let start = page.find(BEGIN)? + BEGIN.len();
    let end = start + page[start..].find(END)?;
    Some(page[start..end].trim_start_matches('\n'))
}

/// Where the knobs and the docs disagree, one line each (empty: they agree).
fn disagreements(
    configuration: &str,
    docs: &str,
    flags: &[Flag],
    keys: &[(&'static str, Vec<String>)],
) -> Vec<String> {
    let mut problems = Vec::new();
    match flag_section(configuration) {
        None => problems.push("docs/configuration.md has no flags:begin / flags:end markers".to_string()),
        Some(table) if table != flags_markdown(flags) => problems.push(
            "docs/configuration.md's flag table is not the flags' (EPP_BLESS=1 cargo test -p epp --lib \
             knobs::tests::flags_env rewrites it)"
                .to_string(),
        ),
        Some(_) => {}
    }
    for (name, _) in OTHER_ENVIRONMENT {
        if !docs.contains(&format!("`{name}`")) {
            problems.push(format!("environment variable `{name}` is not in docs/"));
        }
    }
    for (place, names) in keys {
        for key in names {
            if !docs.contains(&format!("`{key}`")) && !docs.contains(&format!("{key}:")) {
                problems.push(format!("config key `{key}` ({place}) is not in docs/"));
            }
        }
    }
    problems
}

/// The flag table, regenerated in place.
fn blessed(configuration: &str, flags: &[Flag]) -> String {
    let start = configuration.find(BEGIN).expect("the flags:begin marker") + BEGIN.len();
    let end = start + configuration[start..].find(END).expect("the flags:end marker");
    format!("{}\n{}{}", &configuration[..start], flags_markdown(flags), &configuration[end..])
}

#[test]
fn flags_env_and_config_keys_agree_with_the_docs() {
    let path = docs_dir().join("configuration.md");
    let mut configuration = read(&path);
    let flags = flags();
    if std::env::var_os("EPP_BLESS").is_some() {
        configuration = blessed(&configuration, &flags);
        std::fs::write(&path, &configuration).expect("writing docs/configuration.md");
    }
    let problems = disagreements(&configuration, &all_docs(), &flags, &crate::config::schema_keys());
    assert!(problems.is_empty(), "knobs and docs disagree:\n{}", problems.join("\n"));
}

#[test]
fn the_check_fails_on_a_broken_copy() {
    let configuration = read(&docs_dir().join("configuration.md"));
    let (docs, flags, keys) = (all_docs(), flags(), crate::config::schema_keys());
    assert!(disagreements(&configuration, &docs, &flags, &keys).is_empty());
    // A flag the docs do not know: a new flag added without its row.
    let mut more = flags.clone();
    more.push(Flag {
        long: "new-flag".into(),
        env: None,
        default: vec![],
        hidden: false,
        help: "x".into(),
        choices: vec![],
    });
    assert_eq!(disagreements(&configuration, &docs, &more, &keys).len(), 1);
    // A row edited by hand.
    let edited = configuration.replacen("| `--grpc-port` |", "| `--grpc-prot` |", 1);
    assert_eq!(disagreements(&edited, &docs, &flags, &keys).len(), 1);
    // A config key nobody documented.
    let mut undocumented = keys.clone();
    undocumented.push(("the top level", vec!["somethingNew".into()]));
    assert_eq!(disagreements(&configuration, &docs, &flags, &undocumented).len(), 1);
}

#[test]
fn the_inventory_reads_clap() {
    let flags = flags();
    let grpc = flags.iter().find(|f| f.long == "grpc-port").expect("--grpc-port");
    assert_eq!((grpc.default.as_slice(), grpc.env.as_deref()), (&["9002".to_string()][..], None));
    let namespace = flags.iter().find(|f| f.long == "pool-namespace").expect("--pool-namespace");
    assert_eq!(namespace.env.as_deref(), Some("NAMESPACE"));
    assert!(flags.iter().any(|f| f.long == "lora-info-metric" && f.hidden), "deprecated flags are hidden");
    let keys = crate::config::schema_keys();
    let top = &keys.iter().find(|(place, _)| *place == "the top level").expect("top level").1;
    assert!(
        top.contains(&"endpointHealth".to_string()) && top.contains(&"apiVersion".to_string()),
        "{top:?}"
    );
}
