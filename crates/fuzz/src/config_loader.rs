//! An EndpointPickerConfig file: strict YAML decoding, every plugin's parameters, references, defaults.
//!
//! Invariant beyond "no panic": a config that does not load says why (a non-empty message).

use std::sync::{Arc, OnceLock};

use epp::config;
use epp::datastore::Datastore;
use epp::scheduling::{FactoryContext, PluginMetrics, Registry};

struct Loader {
    registry: Registry,
    ctx: FactoryContext,
}

fn loader() -> &'static Loader {
    static LOADER: OnceLock<Loader> = OnceLock::new();
    LOADER.get_or_init(|| Loader {
        registry: Registry::with_builtins(),
        ctx: FactoryContext::new(Arc::new(Datastore::new("fuzz")), PluginMetrics::detached()),
    })
}

pub fn run(data: &[u8]) {
    // epp reads config files with `read_to_string`: bytes that are not UTF-8 never reach the loader.
    let Ok(text) = std::str::from_utf8(data) else { return };
    let loader = loader();
    match config::load(text, &loader.registry, &loader.ctx) {
        Ok(_) => {}
        Err(e) => assert!(!e.to_string().is_empty(), "a config error without a message"),
    }
}
