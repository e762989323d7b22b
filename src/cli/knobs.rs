//! epp's knobs, read from their own sources rather than restated: the flags and the environment variables
//! that set them from clap's metadata (`Cli::command()`). The flag reference in docs/configuration.md is
//! rendered from this, the Helm check (scripts/helm-check.py, via `epp-knobs` in the test kit) checks the
//! chart's flags and environment against it, and the tests below prove the docs, the config schema and
//! the flags agree.

use clap::CommandFactory;

use super::Cli;

/// One flag as clap defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The long name, without the leading `--`.
    pub long: String,
    /// The environment variable that sets it, if any.
    pub env: Option<String>,
    /// The default value(s) as clap shows them.
    pub default: Vec<String>,
    /// Hidden from `--help`: internal or rejected (the Go EPP's deprecated flags).
    pub hidden: bool,
    /// The first line of its help text.
    pub help: String,
    /// The values it takes, when clap enumerates them (booleans aside).
    pub choices: Vec<String>,
}

/// Every flag epp accepts, in clap's order (`--help` and `--version` excluded).
pub fn flags() -> Vec<Flag> {
    let command = Cli::command();
    command
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?.to_string();
            let help = arg.get_help().map(std::string::ToString::to_string).unwrap_or_default();
            let mut choices: Vec<String> =
                arg.get_possible_values().iter().map(|v| v.get_name().to_string()).collect();
            if choices == ["true", "false"] {
                choices.clear();
            }
            Some(Flag {
                long,
                env: arg.get_env().map(|env| env.to_string_lossy().into_owned()),
                default: arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect(),
                hidden: arg.is_hide_set(),
                help: help.lines().next().unwrap_or_default().to_string(),
                choices,
            })
        })
        .collect()
}

/// Environment variables epp reads that are not a flag's: `(name, what it does)`.
pub const OTHER_ENVIRONMENT: &[(&str, &str)] = &[
    ("HOSTNAME", "the leader-election identity when `--pod-name` / `$POD_NAME` is unset"),
    ("KUBECONFIG", "the Kubernetes client's kubeconfig when `--kubeconfig` is unset"),
    (
        "ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER",
        "deprecated: `true` turns flow control on, as `featureGates: [flowControl]` does",
    ),
    ("OTEL_TRACES_EXPORTER", "with `--tracing`: `otlp` (default) or `none`"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "with `--tracing`: the collector (default `http://localhost:4317`)"),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "with `--tracing`: the collector's traces URL, over the general one",
    ),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "with `--tracing`: `grpc` (default) or `http/protobuf`"),
    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "with `--tracing`: the protocol for traces, over the general one"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "with `--tracing`: headers sent with each export (`k=v,…`)"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "with `--tracing`: one export's timeout in milliseconds (default 10000)"),
    ("OTEL_EXPORTER_OTLP_CERTIFICATE", "with `--tracing`: a PEM CA bundle for an https collector"),
    ("OTEL_TRACES_SAMPLER", "with `--tracing`: the sampler (default `parentbased_traceidratio`)"),
    ("OTEL_TRACES_SAMPLER_ARG", "with `--tracing`: the sampled fraction, 0 to 1 (default 0.1)"),
    ("OTEL_SERVICE_NAME", "with `--tracing`: the spans' `service.name` (default `llm-d-epp`)"),
    ("OTEL_RESOURCE_ATTRIBUTES", "with `--tracing`: resource attributes (`k=v,…`)"),
    (
        "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME",
        "the chart's node name, referred to in `OTEL_RESOURCE_ATTRIBUTES`",
    ),
    ("OTEL_BSP_SCHEDULE_DELAY", "with `--tracing`: the span batch's delay in milliseconds (default 5000)"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "with `--tracing`: spans held for export; beyond it they are dropped (2048)"),
];

/// The flag reference as a Markdown table: every visible flag, its environment variable, its default
/// and what it does. docs/configuration.md holds exactly this between its `flags` markers.
pub fn flags_markdown(flags: &[Flag]) -> String {
    let mut out = String::from("| flag | environment | default | what |\n|---|---|---|---|\n");
    for flag in flags.iter().filter(|f| !f.hidden) {
        let env = flag.env.as_deref().map(|e| format!("`{e}`")).unwrap_or_default();
        let default = match flag.default.is_empty() {
            true => String::new(),
            false => format!("`{}`", flag.default.join(",")),
        };
        let mut help = flag.help.replace('|', "\\|");
        if !flag.choices.is_empty() {
            let choices: Vec<String> = flag.choices.iter().map(|c| format!("`{c}`")).collect();
            help.push_str(&format!(" (one of {})", choices.join(", ")));
        }
        out.push_str(&format!("| `--{}` | {env} | {default} | {help} |\n", flag.long));
    }
    out
}

#[cfg(test)]
#[path = "knobs_tests.rs"]
mod tests;
