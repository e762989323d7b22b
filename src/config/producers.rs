//! Data producers: the missing ones are created for consumed keys (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/datalayer/data_graph.go
//! (CreateMissingDataProducers)), and all of them are ordered so that each runs after the producers of the
//! data it consumes.
//!
//! Every declared producer runs, referenced in a profile or not, as in the Go EPP.

use std::collections::HashSet;
use std::sync::Arc;

use super::instances::Instances;
use super::ConfigError;
use crate::scheduling::{BuiltPlugin, DataKey, DataProducer, PluginId};

/// Producers in the order they run.
type Producers = Vec<(PluginId, Arc<dyn DataProducer>)>;

/// The producer type the loader adds when `key` is consumed but nothing produces it.
pub fn default_producer(key: DataKey) -> Option<&'static str> {
    match key {
        DataKey::PrefixCacheMatch => Some("approx-prefix-cache-producer"),
        DataKey::InFlightLoad => Some("inflight-load-producer"),
        DataKey::LatencyPrediction => Some("predicted-latency-producer"),
    }
}

/// Everything `plugin` reads: its declared consumption plus its producer half's.
fn consumed(plugin: &BuiltPlugin) -> impl Iterator<Item = DataKey> + '_ {
    let from_producer = plugin.producer.as_ref().map_or(&[][..], |p| p.consumes());
    plugin.consumes.iter().copied().chain(from_producer.iter().copied())
}

fn produced(plugin: &BuiltPlugin) -> &'static [DataKey] {
    plugin.producer.as_ref().map_or(&[], |p| p.produces())
}

/// The first consumed key nobody produces, with the name of a consumer.
fn first_missing(plugins: &[BuiltPlugin]) -> Option<(DataKey, String)> {
    let available: HashSet<DataKey> = plugins.iter().flat_map(produced).copied().collect();
    plugins.iter().find_map(|p| consumed(p).find(|k| !available.contains(k)).map(|k| (k, p.id.name.clone())))
}

/// Adds the missing default producers, then returns all producers in dependency order.
pub(crate) fn order_producers(instances: &mut Instances<'_>) -> Result<Producers, ConfigError> {
    while let Some((key, consumer)) = first_missing(&instances.plugins) {
        let why = format!("plugin {consumer:?} consumes {key:?} and no declared plugin produces it");
        let Some(type_name) = default_producer(key) else {
            return Err(ConfigError::invalid("plugins", format!("{why}; declare a producer for it")));
        };
        let index = instances.auto_create(type_name, &why)?;
        if !produced(&instances.plugins[index]).contains(&key) {
            return Err(ConfigError::invalid(
                "plugins",
                format!("{why}, and plugin {type_name:?} does not produce it either"),
            ));
        }
    }

    let producers: Vec<&BuiltPlugin> = instances.plugins.iter().filter(|p| p.producer.is_some()).collect();
    // deps[i]: the producers that must run before producer i (a producer's own output is no dependency).
    let deps: Vec<Vec<usize>> = producers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let wants: HashSet<DataKey> = consumed(p).collect();
            (0..producers.len())
                .filter(|&j| j != i && produced(producers[j]).iter().any(|k| wants.contains(k)))
                .collect()
        })
        .collect();
    // Kahn's algorithm, always taking the earliest-declared ready producer so the order is stable.
    let mut placed = vec![false; producers.len()];
    let mut order = Vec::with_capacity(producers.len());
    while order.len() < producers.len() {
        let ready = (0..producers.len()).find(|&i| !placed[i] && deps[i].iter().all(|&d| placed[d]));
        let Some(i) = ready else {
            let cycle: Vec<&str> =
                (0..producers.len()).filter(|&i| !placed[i]).map(|i| producers[i].id.name.as_str()).collect();
            return Err(ConfigError::invalid(
                "plugins",
                format!("data producers depend on each other in a cycle: {}", cycle.join(", ")),
            ));
        };
        placed[i] = true;
        order.push(i);
    }
    Ok(order
        .into_iter()
        .filter_map(|i| producers[i].producer.clone().map(|p| (producers[i].id.clone(), p)))
        .collect())
}
