//! The README's five-minute tour, followed as a new user would: its shell blocks between the `tour:begin`
//! and `tour:end` markers run in order, from the repository root, with epp's defaults (so the shipped Envoy
//! bootstrap must speak TLS to epp). What is substituted: `target/release/` becomes the directory of the
//! binaries this test run built (debug), `/tmp/envoy.yaml` a temporary file, and the README's ports
//! (8001–8002, 8080, 9901, and epp's default 9002, 9003 and 9090, which the epp command then names) free
//! ones, so that a Prometheus or another tour on the machine cannot collide with it. The first block (build
//! and `make envoy`) is what the test run already did.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use epp_testkit::{envoy_or_skip, free_port, free_ports, manifest_dir, workspace_bin};

const TOUR_DEADLINE: Duration = Duration::from_secs(60);

/// The `sh` blocks of the README between the tour markers.
fn tour_blocks(readme: &str) -> Vec<String> {
    let begin = readme.find("<!-- tour:begin").expect("README has a tour:begin marker");
    let end = readme.find("<!-- tour:end -->").expect("README has a tour:end marker");
    let mut blocks = Vec::new();
    let mut lines = readme[begin..end].lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

/// A shell and everything it started in the background, killed together (its own process group).
struct ProcessGroup(Child);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}

/// The README's ports and what they become here. epp's own defaults are named on its command line.
fn port_map() -> Vec<(String, String)> {
    // `epp-sim --port P` with two profiles serves its replicas on P and P + 1.
    let sims = free_ports(2);
    let fixed = [8080, 9901, 9002, 9003, 9090].map(|port| (port.to_string(), free_port().to_string()));
    let mut map = vec![("8001".to_string(), sims.to_string()), ("8002".to_string(), (sims + 1).to_string())];
    map.extend(fixed);
    map
}

#[test]
fn the_readme_tour_routes_a_request_with_epps_defaults() {
    if envoy_or_skip("the_readme_tour_routes_a_request_with_epps_defaults").is_none() {
        return;
    }
    let root = manifest_dir();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let blocks = tour_blocks(&readme);
    assert!(blocks.len() >= 4, "the tour has its build, fleet, gateway and request blocks: {blocks:?}");
    assert!(blocks[0].starts_with("cargo build"), "the tour starts by building: {}", blocks[0]);
    let bin_dir = workspace_bin("epp-sim").parent().map(Path::to_path_buf).expect("binary directory");
    let work = tempfile::tempdir().expect("temp dir");
    let envoy_yaml = work.path().join("envoy.yaml");
    let ports = port_map();
    let follow = |block: &str| {
        // epp's default ports, named so that they can be moved like the others.
        let epp = "target/release/epp --grpc-port 9002 --grpc-health-port 9003 --metrics-port 9090 ";
        let mut text = block.replace("target/release/epp ", epp);
        // Through placeholders: a new port may contain an old one ("38001").
        for (i, (from, _)) in ports.iter().enumerate() {
            text = text.replace(from.as_str(), &format!("\u{1}{i}\u{1}"));
        }
        for (i, (_, to)) in ports.iter().enumerate() {
            text = text.replace(&format!("\u{1}{i}\u{1}"), to);
        }
        text.replace("target/release/", &format!("{}/", bin_dir.display()))
            .replace("/tmp/envoy.yaml", &envoy_yaml.display().to_string())
    };
    let (request, start) = blocks[1..].split_last().expect("blocks after the build");
    // The fleet, epp and Envoy, started in the background by the README's own `&`; `wait` keeps the
    // shell (the group's leader) alive until the guard ends the group.
    let start_script =
        format!("set -e\n{}\nwait\n", start.iter().map(|b| follow(b)).collect::<Vec<_>>().join("\n"));
    let log = std::fs::File::create(work.path().join("tour.log")).expect("log file");
    let shell = Command::new("bash")
        .arg("-c")
        .arg(&start_script)
        .current_dir(&root)
        .process_group(0)
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("bash starts");
    let _group = ProcessGroup(shell);

    // A user retries the request block until the gateway is up; it must then answer with a completion
    // and epp's request counter.
    let deadline = Instant::now() + TOUR_DEADLINE;
    let output = loop {
        let output = Command::new("bash")
            .args(["-c", &format!("set -e -o pipefail\n{}", follow(request))])
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .expect("bash runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() && stdout.contains("\"choices\"") {
            break stdout;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(work.path().join("tour.log")).unwrap_or_default();
            panic!(
                "the tour's request never succeeded; last output:\n{stdout}\nthe tour's processes:\n{log}"
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(output.contains("\"text_completion\""), "a completion came back: {output}");
    assert!(
        output.lines().any(|line| line.starts_with("inference_objective_request_total{")),
        "epp counted the request: {output}"
    );
}
