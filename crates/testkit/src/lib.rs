//! Shared harness for epp's integration and e2e tests: child processes (epp, Envoy, epp-test-backend)
//! that die with the test, free ports, readiness waits, and Envoy config rendering.
//!
//! Why it is built like this: e2e tests run real processes, so every start waits on a real signal (a port
//! accepting, Envoy's admin `/ready` saying LIVE) under one generous deadline instead of sleeping, and a
//! child that dies early fails the test at once with its log. Children are killed when their
//! [`ChildGuard`] drops, which also happens while a failing test unwinds; their logs are printed then.
//!
//! Use from any workspace crate's tests as a dev-dependency: `use epp_testkit::*;`. The binaries it starts
//! (epp, epp-test-backend) are the workspace's own, found beside the running test executable: `cargo test`
//! builds a plain binary only for its own package's tests, so build them first with `cargo build --workspace
//! --bins` (`make test` does). Layout: this file (processes, ports, epp-test-backend, epp), [`envoy`] (binary
//! lookup, templates, start), [`http`] (async client and backend admin/debug helpers), [`epp_metrics`] (epp's
//! /metrics, waiting for scrapes), [`stack`] (backends + epp + Envoy in one call), [`held_backend`] (model
//! servers that hold requests until the test releases them), [`kube_api`] (a fake Kubernetes API server
//! speaking list/watch, for discovery tests), [`prometheus`] (a real Prometheus scraping the
//! stack, queried with PromQL), [`otlp`] (an OTLP trace receiver, gRPC and HTTP), [`certs`] (a
//! throwaway CA for TLS tests).

pub mod certs;
pub mod envoy;
pub mod epp_metrics;
pub mod held_backend;
pub mod http;
pub mod kube_api;
pub mod llamacpp;
pub mod otlp;
pub mod prometheus;
pub mod route_probe;
pub mod sim_pod;
pub mod stack;
pub mod vllm;

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use envoy::*;
#[allow(unused_imports)] // used by the e2e tests through epp
pub use epp_metrics::*;
pub use http::*;
pub use route_probe::{probe_candidate, route_probe, wait_for_probe};
pub use sim_pod::SimPod;
#[allow(unused_imports)] // used by the e2e tests through epp
pub use stack::{
    start_epp_behind_envoy, start_stack, start_stack_with_envoy_vars, start_stack_with_epp_env,
    EppBehindEnvoy, Stack,
};

/// How long a process may take to become ready. Generous on purpose: CI machines are slow and cold.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(90);
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Log lines shown per child when a test fails.
const LOG_TAIL_LINES: usize = 80;

/// The workspace root (where `deploy/`, `config/` and `.venv` live).
pub fn manifest_dir() -> PathBuf {
    let testkit = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or(testkit)
}

/// The Envoy template variable that makes the shipped bootstraps speak plaintext to epp's ext_proc port, for
/// an epp started with `--secure-serving=false` (deploy/envoy/envoy-full-duplex.yaml, `EXTPROC_TRANSPORT`).
pub const PLAINTEXT_EXTPROC: (&str, &str) = ("EXTPROC_TRANSPORT", "raw_buffer.v3.RawBuffer");

/// The flags an in-process epp (`epp::app::Server`) starts with in a test: loopback only, every port the
/// kernel's choice, plaintext. A test appends what it is about.
pub fn loopback_epp_args() -> Vec<String> {
    let flags = ["--bind-address=127.0.0.1", "--grpc-port=0", "--grpc-health-port=0", "--metrics-port=0"];
    ["epp"].into_iter().chain(flags).chain(["--secure-serving=false"]).map(String::from).collect()
}

/// A binary of this workspace, built into the same target directory as the running test executable
/// (`target/<profile>/deps/<test>` → `target/<profile>/<name>`). Panics with the build command when it is
/// missing, since a test cannot do without it.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .map(|dir| if dir.ends_with("deps") { dir.parent().unwrap_or(dir) } else { dir })
        .expect("the test executable has a parent directory");
    let path = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} not found: build it with `cargo build --workspace --bins`", path.display());
    path
}

/// True under CI (`CI=true` or `CI=1`), where a missing tool always fails the tests that need it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The environment variable a developer sets to skip, rather than fail, the tests whose tool (Envoy,
/// Prometheus, xgboost) is not installed. Ignored under CI.
pub const SKIP_MISSING_TOOLS: &str = "EPP_SKIP_MISSING_TOOLS";

/// A test's tool is missing (`what` says which and how to install it). That fails the test: an e2e test
/// that cannot run must not pass. Only an explicit opt-out (`EPP_SKIP_MISSING_TOOLS=1`, outside CI) turns
/// it into a printed SKIP, so the developer sees what did not run.
pub fn missing_tool(test_name: &str, what: &str) {
    let opted_out =
        std::env::var(SKIP_MISSING_TOOLS).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if opted_out && !in_ci() {
        eprintln!("SKIP {test_name}: {what} ({SKIP_MISSING_TOOLS}=1 skips instead of failing)");
        return;
    }
    let why = if in_ci() { "CI=true" } else { "set EPP_SKIP_MISSING_TOOLS=1 to skip it instead" };
    panic!("{test_name}: {what}; the test cannot run ({why})");
}

/// The ports this test binary has handed out, so that tests running in parallel threads do not collide.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port that was free a moment ago. Never hands out the same port twice in one test binary, so tests
/// running in parallel threads do not collide with each other.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `count` consecutive ports that were free a moment ago, for a process that serves on
/// `port`, `port + 1`, ... (`epp-sim --replicas`). All of them are recorded as handed out, so
/// [`free_port`] never returns one of them to another test in this binary.
pub fn free_ports(count: u16) -> u16 {
    let count = count.max(1);
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let first = listener.local_addr().expect("local addr").port();
        let Some(last) = first.checked_add(count - 1) else { continue };
        let rest_free = (first + 1..=last).all(|port| TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok());
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let handed_out = handed_out.get_or_insert_with(HashSet::new);
        if rest_free && (first..=last).all(|port| !handed_out.contains(&port)) {
            handed_out.extend(first..=last);
            return first;
        }
    }
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_accepts(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Polls `ready` until it returns true or `deadline` passes; returns whether it became ready.
pub fn wait_until(deadline: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if ready() {
            return true;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    ready()
}

/// A server's `/metrics` page on 127.0.0.1:`port` (empty if it does not answer 200).
pub fn metrics_page(port: u16) -> String {
    match http_get_blocking(port, "/metrics") {
        Some((200, body)) => body,
        _ => String::new(),
    }
}

/// A minimal blocking HTTP/1.1 GET to 127.0.0.1 for readiness polling (usable before any runtime exists).
/// Returns the status code and body.
pub fn http_get_blocking(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Some((status, body))
}

/// A child process that is killed when this guard drops (also while a failing test unwinds, in which
/// case the tail of its log is printed). Its stdout and stderr go to a log file in a private temp dir.
pub struct ChildGuard {
    name: String,
    child: Child,
    log_path: PathBuf,
    dir: tempfile::TempDir,
}

impl ChildGuard {
    /// Starts `command` with stdout and stderr captured; `dir` holds its files (config, log).
    pub fn spawn(name: &str, mut command: Command, dir: tempfile::TempDir) -> ChildGuard {
        let log_path = dir.path().join(format!("{name}.log"));
        let log = File::create(&log_path).expect("create child log");
        let log_err = log.try_clone().expect("clone child log");
        command.stdin(Stdio::null()).stdout(Stdio::from(log)).stderr(Stdio::from(log_err));
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        ChildGuard { name: name.to_string(), child, log_path, dir }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's private temp dir (rendered configs live here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the child wrote to stdout and stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL and reap; idempotent.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (for graceful-shutdown tests); returns whether the signal was sent.
    pub fn terminate(&mut self) -> bool {
        Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Waits (up to [`STARTUP_DEADLINE`]) until `ready` holds; panics with the log if the child exits
    /// first or the deadline passes.
    pub fn wait_ready(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let mut exited = None;
        let became_ready = wait_until(STARTUP_DEADLINE, || {
            if let Ok(Some(status)) = self.child.try_wait() {
                exited = Some(status);
                return true;
            }
            ready()
        });
        if let Some(status) = exited {
            panic!("{} exited ({status}) before {what}; log:\n{}", self.name, self.log_tail());
        }
        if !became_ready {
            panic!("{} not ready after {STARTUP_DEADLINE:?}: {what}; log:\n{}", self.name, self.log_tail());
        }
    }

    /// Waits until 127.0.0.1:`port` accepts connections.
    pub fn wait_for_port(&mut self, port: u16) {
        self.wait_ready(&format!("listening on port {port}"), || port_accepts(port));
    }

    /// Waits until `addr` accepts connections, as [`wait_for_port`](Self::wait_for_port) does, except
    /// that a child that exits because the port was taken returns `false` instead of panicking. A port
    /// from [`free_port`] is free only when it is handed out: until the child binds it, another process's
    /// (or a parallel test's) bind to port 0 may get it, so the caller starts the child again on another.
    pub fn wait_listening_unless_taken(&mut self, addr: SocketAddr) -> bool {
        let mut exited = false;
        let became_ready = wait_until(STARTUP_DEADLINE, || {
            exited = matches!(self.child.try_wait(), Ok(Some(_)));
            exited || TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
        });
        if exited && self.logs().contains("Address already in use") {
            return false;
        }
        if exited {
            panic!("{} exited before listening on {addr}; log:\n{}", self.name, self.log_tail());
        }
        if !became_ready {
            panic!(
                "{} not listening on {addr} after {STARTUP_DEADLINE:?}; log:\n{}",
                self.name,
                self.log_tail()
            );
        }
        true
    }

    fn log_tail(&self) -> String {
        let logs = self.logs();
        let lines: Vec<&str> = logs.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("----- {} (pid {}) log tail -----\n{}", self.name, self.pid(), self.log_tail());
        }
    }
}

pub(crate) fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().expect("create temp dir")
}

// ---------------------------------------------------------------------------------------------------
// epp-test-backend

/// One epp-test-backend process serving one backend per port; ids are `backend-<port>`.
pub struct TestBackends {
    pub child: ChildGuard,
    pub ports: Vec<u16>,
}

impl TestBackends {
    /// The `--endpoints` value for epp: `127.0.0.1:p1,127.0.0.1:p2,…`.
    pub fn endpoints(&self) -> String {
        self.ports.iter().map(|port| format!("127.0.0.1:{port}")).collect::<Vec<_>>().join(",")
    }

    /// The `x-backend-id` backend `index` answers with.
    pub fn id(&self, index: usize) -> String {
        format!("backend-{}", self.ports[index])
    }

    /// `http://127.0.0.1:<port of backend index><path>`.
    pub fn url(&self, index: usize, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports[index])
    }
}

/// Starts epp-test-backend on `ports` with default flags and waits until every port accepts.
pub fn start_test_backend(ports: &[u16]) -> ChildGuard {
    start_test_backend_with(ports, &[])
}

/// Like [`start_test_backend`], with extra flags (e.g. `["--chunks", "3", "--chunk-delay-ms", "0"]`).
pub fn start_test_backend_with(ports: &[u16], extra_args: &[&str]) -> ChildGuard {
    let ports_flag = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
    let mut command = Command::new(workspace_bin("epp-test-backend"));
    command.args(["--ports", &ports_flag, "--id", "backend"]).args(extra_args);
    let mut child = ChildGuard::spawn("epp-test-backend", command, temp_dir("epp-test-backend-"));
    for &port in ports {
        child.wait_for_port(port);
    }
    child
}

/// Starts `count` backends on fresh ports in one process.
pub fn start_test_backends(count: usize, extra_args: &[&str]) -> TestBackends {
    let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
    let child = start_test_backend_with(&ports, extra_args);
    TestBackends { child, ports }
}

// ---------------------------------------------------------------------------------------------------
// epp

/// A running epp and its ports.
pub struct Epp {
    pub child: ChildGuard,
    pub grpc_port: u16,
    pub health_port: u16,
    pub metrics_port: u16,
    /// The command line it was started with, for [`Epp::restart`].
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Epp {
    /// Stops epp (SIGTERM, then SIGKILL if it has not exited within its grace period) and starts it
    /// again with the same command line, on the same ports.
    pub fn restart(&mut self) {
        self.child.terminate();
        let exited = wait_until(Duration::from_secs(15), || !self.child.is_running());
        if !exited {
            self.child.kill();
        }
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.child = start_epp_with_env(&self.args, &env);
    }
}

/// Starts epp with exactly `args` and waits until the port given by `--grpc-port` accepts.
pub fn start_epp(args: &[String]) -> ChildGuard {
    start_epp_with_env(args, &[])
}

/// [`start_epp`] with extra environment variables (e.g. the deprecated
/// `ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER`).
pub fn start_epp_with_env(args: &[String], env: &[(&str, &str)]) -> ChildGuard {
    let grpc_port = flag_value(args, "--grpc-port")
        .and_then(|port| port.parse::<u16>().ok())
        .expect("start_epp needs --grpc-port N");
    let mut command = Command::new(workspace_bin("epp"));
    // epp reads its log filter from EPP_LOG (not RUST_LOG), inherited from the test's environment:
    // `EPP_LOG=debug cargo test …` shows every scheduling decision in a failing test's log tail.
    command.args(args).env("NO_COLOR", "1");
    command.envs(env.iter().copied());
    let mut child = ChildGuard::spawn("epp", command, temp_dir("epp-"));
    child.wait_for_port(grpc_port);
    child
}

/// Starts epp on fresh ports, scraping every 50ms, with `endpoints` (`ip:port,…`) and `extra_args` appended
/// (e.g. `["--config-file", path]`). Its ext_proc port serves TLS, as epp does by default, which the shipped
/// Envoy bootstraps speak; an in-process epp ([`loopback_epp_args`]) is plaintext instead, and its Envoy
/// takes [`PLAINTEXT_EXTPROC`].
pub fn start_epp_for(endpoints: &str, extra_args: &[&str]) -> Epp {
    start_epp_for_with_env(endpoints, extra_args, &[])
}

/// [`start_epp_for`] with extra environment variables.
pub fn start_epp_for_with_env(endpoints: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Epp {
    let mut args = vec!["--endpoints", endpoints];
    args.extend_from_slice(extra_args);
    start_epp_on_free_ports(&args, env)
}

/// Starts epp on fresh gRPC, health and metrics ports, scraping every 50ms, with `args` (which name the
/// pool: `--endpoints`, `--endpoints-file`, …) and `env`.
pub fn start_epp_on_free_ports(args: &[&str], env: &[(&str, &str)]) -> Epp {
    let (grpc_port, health_port, metrics_port) = (free_port(), free_port(), free_port());
    let ports = [
        "--grpc-port".to_string(),
        grpc_port.to_string(),
        "--grpc-health-port".to_string(),
        health_port.to_string(),
        "--metrics-port".to_string(),
        metrics_port.to_string(),
        "--refresh-metrics-interval".to_string(),
        "50ms".to_string(),
    ];
    let args: Vec<String> = ports.into_iter().chain(args.iter().map(|a| (*a).to_string())).collect();
    let child = start_epp_with_env(&args, env);
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Epp { child, grpc_port, health_port, metrics_port, args, env }
}

/// The value of `--name V` or `--name=V` in `args`.
fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, arg)| match arg.strip_prefix(name) {
        Some("") => args.get(i + 1).map(String::as_str),
        Some(rest) => rest.strip_prefix('='),
        None => None,
    })
}
