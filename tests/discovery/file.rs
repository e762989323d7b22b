//! File discovery (`--endpoints-file`, llm-d-router's `file-discovery` format) through the real epp
//! server: the first load publishes the file's endpoints; with `--endpoints-file-watch` edits are
//! followed — an in-place write, an atomic rename over the file, and a ConfigMap-style `..data` symlink
//! swap (the last two replace the inode an fsnotify watch would hold) — invalid entries are skipped on
//! reload, and endpoints no longer listed leave. A bad file stops start-up. Every step polls for the
//! expected endpoint set with a generous bound; nothing is timed.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;

const BOUND: Duration = Duration::from_secs(60);

fn args(file: &Path, watch: bool) -> Vec<String> {
    let mut args = epp_testkit::loopback_epp_args();
    args.extend([
        "--shutdown-grace-period=200ms".into(),
        format!("--endpoints-file={}", file.display()),
        format!("--endpoints-file-watch={watch}"),
    ]);
    args
}

fn entries(list: &[(&str, &str)]) -> String {
    let mut text = String::from("endpoints:\n");
    for (name, addr) in list {
        let (ip, port) = addr.split_once(':').expect("ip:port");
        text.push_str(&format!("  - name: {name}\n    address: \"{ip}\"\n    port: \"{port}\"\n"));
    }
    text
}

fn names(epp: &Server) -> Vec<String> {
    let mut names: Vec<String> = epp.datastore.endpoints().iter().map(|e| e.name.clone()).collect();
    names.sort();
    names
}

async fn until_names(epp: &Server, want: &[&str], what: &str) {
    let polled = tokio::time::timeout(BOUND, async {
        while names(epp) != want {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(polled.await.is_ok(), "never happened: {what} (endpoints {:?})", names(epp));
}

/// Writes `text` beside `path` and renames it over `path` (what editors and `kubectl cp` tools do).
fn replace_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the new file");
    std::fs::rename(&tmp, path).expect("rename over the file");
}

#[tokio::test]
async fn edits_renames_and_symlink_swaps_are_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("endpoints.yaml");
    std::fs::write(&file, entries(&[("a", "10.0.0.1:8000"), ("b", "10.0.0.2:8000")])).expect("write");
    let epp = Server::start(Cli::parse_from(args(&file, true))).await.expect("epp starts");
    assert_eq!(names(&epp), ["a", "b"], "the first load is done before start returns");

    std::fs::write(&file, entries(&[("a", "10.0.0.1:8000")])).expect("write in place");
    until_names(&epp, &["a"], "b leaves after an in-place write").await;

    // An invalid entry is skipped on reload; the valid ones apply.
    let bad = format!(
        "{}  - name: bad\n    address: vllm.local\n    port: \"8000\"\n",
        entries(&[("c", "10.0.0.3:8000")])
    );
    replace_atomically(&file, &bad);
    until_names(&epp, &["c"], "c replaces a after an atomic rename; the bad entry is skipped").await;
    epp.shutdown().await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_configmap_symlink_swap_is_followed() {
    use std::os::unix::fs::symlink;
    // A ConfigMap volume: endpoints.yaml -> ..data/endpoints.yaml, ..data -> ..2026_v1; an update writes
    // ..2026_v2 and renames a new ..data link over the old one.
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::create_dir(root.join("..v1")).expect("v1");
    std::fs::write(root.join("..v1/endpoints.yaml"), entries(&[("a", "10.0.0.1:8000")])).expect("write v1");
    symlink("..v1", root.join("..data")).expect("..data");
    symlink("..data/endpoints.yaml", root.join("endpoints.yaml")).expect("endpoints.yaml");
    let epp =
        Server::start(Cli::parse_from(args(&root.join("endpoints.yaml"), true))).await.expect("epp starts");
    assert_eq!(names(&epp), ["a"]);

    std::fs::create_dir(root.join("..v2")).expect("v2");
    std::fs::write(root.join("..v2/endpoints.yaml"), entries(&[("b", "10.0.0.2:8000")])).expect("write v2");
    symlink("..v2", root.join("..data_tmp")).expect("new link");
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap ..data");
    std::fs::remove_dir_all(root.join("..v1")).expect("old version gone");
    until_names(&epp, &["b"], "the swapped-in version applies").await;
    epp.shutdown().await;
}

#[tokio::test]
async fn a_bad_file_stops_start_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("endpoints.yaml");
    std::fs::write(&file, entries(&[("a", "10.0.0.1:99999")])).expect("write");
    let err = Server::start(Cli::parse_from(args(&file, false))).await.expect_err("refused");
    assert!(format!("{err:#}").contains("port \"99999\""), "{err:#}");
    let missing = Server::start(Cli::parse_from(args(&dir.path().join("none.yaml"), false))).await;
    assert!(missing.is_err(), "a missing file stops start-up");
}
