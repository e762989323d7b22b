//! Prints epp's flags as clap defines them (`epp::cli::knobs`), as JSON, for checks outside Rust: the Helm
//! check (scripts/helm-check.py) reads the flags the chart may pass and the environment variables it may
//! set from here instead of parsing src/cli.rs.
//!
//!   epp-knobs   →   {"flags": [{"long": "grpc-port", "env": null, "default": ["9002"], "hidden": false}, …],
//!                    "other_environment": ["HOSTNAME", …]}

use epp::cli::knobs;

fn main() {
    let flags: Vec<serde_json::Value> = knobs::flags()
        .into_iter()
        .map(|flag| {
            serde_json::json!({
                "long": flag.long,
                "env": flag.env,
                "default": flag.default,
                "hidden": flag.hidden,
                "choices": flag.choices,
            })
        })
        .collect();
    let other: Vec<&str> = knobs::OTHER_ENVIRONMENT.iter().map(|(name, _)| *name).collect();
    println!("{}", serde_json::json!({ "flags": flags, "other_environment": other }));
}
