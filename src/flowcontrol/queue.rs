//! The queues: priority bands → flows → items, with the capacity accounting of upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/flowcontrol/controller/internal/processor.go
//! (hasCapacity).
//!
//! Generic over the payload so the structure and its limits are tested without the controller. Bands are
//! kept once created (there are as many as configured priorities, a small set) so a band's round-robin
//! cursor survives the band running empty; flows are removed as soon as they empty, because fairness ids
//! come from clients and an idle flow must not cost memory.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::policies::{pick_flow, OrderKey};
use super::settings::{FlowControlConfig, PriorityBand};

/// Where one queued item is: enough to find it again for dispatch or removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    pub priority: i32,
    pub flow: String,
    pub key: OrderKey,
}

/// Which limit an enqueue would break. 0 never appears: a limit of 0 is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    #[error("global queue byte limit of {limit} bytes reached")]
    GlobalBytes { limit: u64 },
    #[error("global queue limit of {limit} requests reached")]
    GlobalRequests { limit: u64 },
    #[error("priority band {priority} byte limit of {limit} bytes reached")]
    BandBytes { priority: i32, limit: u64 },
    #[error("priority band {priority} limit of {limit} requests reached")]
    BandRequests { priority: i32, limit: u64 },
}

#[derive(Debug)]
struct Entry<T> {
    bytes: u64,
    payload: T,
}

#[derive(Debug)]
struct Flow<T> {
    items: BTreeMap<OrderKey, Entry<T>>,
}

impl<T> Flow<T> {
    fn head(&self) -> Option<OrderKey> {
        self.items.keys().next().copied()
    }
}

#[derive(Debug)]
struct Band<T> {
    settings: PriorityBand,
    flows: BTreeMap<String, Flow<T>>,
    /// The flow dispatched last (round-robin resumes after it).
    last_selected: Option<String>,
    requests: u64,
    bytes: u64,
}

/// All queued items.
#[derive(Debug)]
pub(crate) struct Queues<T> {
    max_bytes: u64,
    max_requests: u64,
    default_band: PriorityBand,
    configured: BTreeMap<i32, PriorityBand>,
    /// Highest priority first.
    bands: BTreeMap<Reverse<i32>, Band<T>>,
    requests: u64,
    bytes: u64,
}

fn over(limit: u64, current: u64, adding: u64) -> bool {
    limit > 0 && current.saturating_add(adding) > limit
}

impl<T> Queues<T> {
    pub(crate) fn new(config: &FlowControlConfig) -> Self {
        Self {
            max_bytes: config.max_bytes,
            max_requests: config.max_requests,
            default_band: config.default_priority_band,
            configured: config.priority_bands.clone(),
            bands: BTreeMap::new(),
            requests: 0,
            bytes: 0,
        }
    }

    /// The settings of `priority`'s band: its configured entry, else the default template.
    pub(crate) fn band_settings(&self, priority: i32) -> PriorityBand {
        self.configured.get(&priority).copied().unwrap_or(self.default_band)
    }

    /// Queued requests, all bands.
    pub(crate) fn len(&self) -> u64 {
        self.requests
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requests == 0
    }

    /// Queued bytes, all bands.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether an item of `bytes` fits, checked in Go's order: global bytes, global requests, then the
    /// band's bytes and requests.
    pub(crate) fn check_capacity(&self, priority: i32, bytes: u64) -> Result<(), CapacityError> {
        if over(self.max_bytes, self.bytes, bytes) {
            return Err(CapacityError::GlobalBytes { limit: self.max_bytes });
        }
        if over(self.max_requests, self.requests, 1) {
            return Err(CapacityError::GlobalRequests { limit: self.max_requests });
        }
        let settings = self.band_settings(priority);
        let (band_requests, band_bytes) =
            self.bands.get(&Reverse(priority)).map_or((0, 0), |b| (b.requests, b.bytes));
        if over(settings.max_bytes, band_bytes, bytes) {
            return Err(CapacityError::BandBytes { priority, limit: settings.max_bytes });
        }
        if over(settings.max_requests, band_requests, 1) {
            return Err(CapacityError::BandRequests { priority, limit: settings.max_requests });
        }
        Ok(())
    }

    /// Queues `payload` if it fits. `key` must be unique (its sequence number makes it so).
    pub(crate) fn push(
        &mut self,
        priority: i32,
        flow: &str,
        key: OrderKey,
        bytes: u64,
        payload: T,
    ) -> Result<Slot, CapacityError> {
        self.check_capacity(priority, bytes)?;
        let settings = self.band_settings(priority);
        let band = self.bands.entry(Reverse(priority)).or_insert_with(|| Band {
            settings,
            flows: BTreeMap::new(),
            last_selected: None,
            requests: 0,
            bytes: 0,
        });
        let queue = match band.flows.get_mut(flow) {
            Some(q) => q,
            None => band.flows.entry(flow.to_string()).or_insert_with(|| Flow { items: BTreeMap::new() }),
        };
        queue.items.insert(key, Entry { bytes, payload });
        band.requests += 1;
        band.bytes += bytes;
        self.requests += 1;
        self.bytes += bytes;
        Ok(Slot { priority, flow: flow.to_string(), key })
    }

    /// The item that goes next: the highest non-empty band, its flow chosen by the band's fairness policy,
    /// that flow's head.
    pub(crate) fn select(&self) -> Option<Slot> {
        let (Reverse(priority), band) = self.bands.iter().find(|(_, b)| b.requests > 0)?;
        let flow = pick_flow(band.settings.fairness, &band.flows, Flow::head, band.last_selected.as_deref())?;
        let key = band.flows.get(flow)?.head()?;
        Some(Slot { priority: *priority, flow: flow.to_string(), key })
    }

    pub(crate) fn get(&self, slot: &Slot) -> Option<&T> {
        let band = self.bands.get(&Reverse(slot.priority))?;
        band.flows.get(&slot.flow)?.items.get(&slot.key).map(|e| &e.payload)
    }

    /// Removes a dispatched item and moves the band's round-robin cursor to its flow.
    pub(crate) fn take(&mut self, slot: &Slot) -> Option<(T, u64)> {
        let taken = self.remove(slot)?;
        if let Some(band) = self.bands.get_mut(&Reverse(slot.priority)) {
            band.last_selected = Some(slot.flow.clone());
        }
        Some(taken)
    }

    /// Removes an item that leaves without being dispatched (expired, cancelled); `None` if it is no
    /// longer queued. Returns the payload and its bytes.
    pub(crate) fn remove(&mut self, slot: &Slot) -> Option<(T, u64)> {
        let band = self.bands.get_mut(&Reverse(slot.priority))?;
        let flow = band.flows.get_mut(&slot.flow)?;
        let entry = flow.items.remove(&slot.key)?;
        if flow.items.is_empty() {
            band.flows.remove(&slot.flow);
        }
        band.requests -= 1;
        band.bytes -= entry.bytes;
        self.requests -= 1;
        self.bytes -= entry.bytes;
        Some((entry.payload, entry.bytes))
    }

    /// Removes every item (shutdown), in no particular order.
    pub(crate) fn drain(&mut self) -> Vec<(T, u64)> {
        let mut out = Vec::with_capacity(usize::try_from(self.requests).unwrap_or(0));
        for band in self.bands.values_mut() {
            for (_, flow) in std::mem::take(&mut band.flows) {
                out.extend(flow.items.into_values().map(|e| (e.payload, e.bytes)));
            }
            band.requests = 0;
            band.bytes = 0;
        }
        self.requests = 0;
        self.bytes = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowcontrol::policies::Due;
    use crate::flowcontrol::settings::FairnessPolicy;

    fn key(seq: u64) -> OrderKey {
        OrderKey { due: Due::Never, seq }
    }

    fn config() -> FlowControlConfig {
        FlowControlConfig::default()
    }

    /// Dispatches everything, returning payloads in dispatch order.
    fn drain_in_order(q: &mut Queues<&'static str>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(slot) = q.select() {
            out.push(q.take(&slot).unwrap().0);
        }
        out
    }

    #[test]
    fn higher_priority_bands_go_first() {
        let mut q = Queues::new(&config());
        q.push(-1, "f", key(1), 1, "low").unwrap();
        q.push(10, "f", key(2), 1, "high").unwrap();
        q.push(0, "f", key(3), 1, "mid").unwrap();
        assert_eq!(drain_in_order(&mut q), ["high", "mid", "low"]);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn global_strict_is_one_order_across_flows() {
        let mut q = Queues::new(&config());
        q.push(0, "a", key(1), 1, "a1").unwrap();
        q.push(0, "a", key(2), 1, "a2").unwrap();
        q.push(0, "b", key(3), 1, "b1").unwrap();
        assert_eq!(drain_in_order(&mut q), ["a1", "a2", "b1"]);
    }

    #[test]
    fn round_robin_alternates_between_flows() {
        let mut cfg = config();
        cfg.default_priority_band.fairness = FairnessPolicy::RoundRobin;
        let mut q = Queues::new(&cfg);
        q.push(0, "a", key(1), 1, "a1").unwrap();
        q.push(0, "a", key(2), 1, "a2").unwrap();
        q.push(0, "a", key(3), 1, "a3").unwrap();
        q.push(0, "b", key(4), 1, "b1").unwrap();
        q.push(0, "b", key(5), 1, "b2").unwrap();
        assert_eq!(drain_in_order(&mut q), ["a1", "b1", "a2", "b2", "a3"]);
    }

    #[test]
    fn round_robin_cursor_survives_the_band_running_empty_and_ignores_removals() {
        let mut cfg = config();
        cfg.default_priority_band.fairness = FairnessPolicy::RoundRobin;
        let mut q = Queues::new(&cfg);
        q.push(0, "a", key(1), 1, "a1").unwrap();
        assert_eq!(drain_in_order(&mut q), ["a1"]);
        q.push(0, "a", key(2), 1, "a2").unwrap();
        let b = q.push(0, "b", key(3), 1, "b1").unwrap();
        assert_eq!(q.select().unwrap().flow, "b", "resumes after a");
        q.remove(&b).unwrap();
        assert_eq!(q.select().unwrap().flow, "a", "a cancelled item does not move the cursor");
    }

    #[test]
    fn capacity_limits_in_go_order() {
        let mut cfg = config();
        cfg.max_bytes = 100;
        cfg.max_requests = 3;
        cfg.priority_bands.insert(5, PriorityBand { max_bytes: 50, max_requests: 1, ..Default::default() });
        let mut q = Queues::new(&cfg);
        assert_eq!(q.push(0, "f", key(1), 101, "x"), Err(CapacityError::GlobalBytes { limit: 100 }));
        q.push(5, "f", key(2), 10, "x").unwrap();
        assert_eq!(
            q.push(5, "f", key(3), 10, "x"),
            Err(CapacityError::BandRequests { priority: 5, limit: 1 })
        );
        assert_eq!(q.check_capacity(5, 41), Err(CapacityError::BandBytes { priority: 5, limit: 50 }));
        q.push(0, "f", key(4), 10, "x").unwrap();
        q.push(1, "f", key(5), 10, "x").unwrap();
        assert_eq!(q.push(2, "f", key(6), 1, "x"), Err(CapacityError::GlobalRequests { limit: 3 }));
        assert_eq!((q.len(), q.bytes()), (3, 30));
    }

    #[test]
    fn zero_limits_are_unlimited_and_the_default_band_caps_bytes() {
        let mut cfg = config();
        cfg.default_priority_band.max_bytes = 0;
        let mut q = Queues::new(&cfg);
        for i in 0..100 {
            q.push(0, "f", key(i), u64::MAX / 200, "x").unwrap();
        }
        let q2: Queues<()> = Queues::new(&config());
        assert_eq!(
            q2.check_capacity(0, crate::flowcontrol::settings::DEFAULT_BAND_MAX_BYTES + 1),
            Err(CapacityError::BandBytes {
                priority: 0,
                limit: crate::flowcontrol::settings::DEFAULT_BAND_MAX_BYTES
            })
        );
    }

    #[test]
    fn removal_returns_accounting_exactly_and_is_idempotent() {
        let mut q = Queues::new(&config());
        let a = q.push(0, "a", key(1), 7, "a").unwrap();
        let b = q.push(3, "b", key(2), 11, "b").unwrap();
        assert_eq!(q.get(&a), Some(&"a"));
        assert_eq!(q.remove(&a), Some(("a", 7)));
        assert_eq!(q.remove(&a), None);
        assert_eq!(q.get(&a), None);
        assert_eq!((q.len(), q.bytes()), (1, 11));
        q.push(0, "a", key(3), 5, "a2").unwrap();
        let drained = q.drain();
        assert_eq!(drained.len(), 2);
        assert_eq!((q.len(), q.bytes()), (0, 0));
        assert_eq!(q.remove(&b), None);
        assert!(q.select().is_none());
    }
}
