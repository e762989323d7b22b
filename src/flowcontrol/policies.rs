//! The ordering and fairness policies (upstream
//! kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/flowcontrol/), as pure functions
//! over keys so that the queue structure stays policy-agnostic and each policy is tested on its own.
//!
//! Ordering is reduced to a sort key computed once at enqueue: every item of a band is keyed by the
//! band's ordering policy, so "the best item" is simply the smallest key, within a flow (its head) and
//! across flows (global-strict fairness compares heads). Fairness picks which flow of a band goes next.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::{Duration, Instant};

use super::settings::{FairnessPolicy, OrderingPolicy};

/// When an item is due. `Never` sorts after every instant: an item with no deadline waits behind every
/// item with one (EDF without a TTL, SLO-deadline without the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Due {
    At(Instant),
    Never,
}

/// The position of an item in its band: smaller goes first. `seq` (assigned in enqueue order) breaks ties,
/// so equal deadlines are served first come, first served, and every key is unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct OrderKey {
    pub due: Due,
    pub seq: u64,
}

/// What the ordering policies read about a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderingInputs {
    /// When the request entered the queue.
    pub enqueued_at: Instant,
    /// When epp received the request's headers.
    pub received_at: Instant,
    /// The request's time-to-live in the queue (`defaultRequestTTL`), if any.
    pub ttl: Option<Duration>,
    /// The request's TTFT objective (`x-slo-ttft-ms`), if any.
    pub slo_ttft: Option<Duration>,
}

/// The sort key of a request under `policy`.
pub(crate) fn order_key(policy: OrderingPolicy, inputs: &OrderingInputs, seq: u64) -> OrderKey {
    let after = |base: Instant, d: Option<Duration>| match d.and_then(|d| base.checked_add(d)) {
        Some(at) => Due::At(at),
        None => Due::Never,
    };
    let due = match policy {
        OrderingPolicy::Fcfs => Due::At(inputs.enqueued_at),
        OrderingPolicy::Edf => after(inputs.enqueued_at, inputs.ttl),
        OrderingPolicy::SloDeadline => after(inputs.received_at, inputs.slo_ttft),
    };
    OrderKey { due, seq }
}

/// Which flow of a band goes next, given each non-empty flow's head key (flows sorted by id) and, for
/// round-robin, the flow selected last.
pub(crate) fn pick_flow<'a, V>(
    policy: FairnessPolicy,
    heads: &'a BTreeMap<String, V>,
    head_key: impl Fn(&V) -> Option<OrderKey>,
    last_selected: Option<&str>,
) -> Option<&'a str> {
    match policy {
        FairnessPolicy::GlobalStrict => heads
            .iter()
            .filter_map(|(id, flow)| head_key(flow).map(|k| (k, id)))
            .min_by_key(|(k, _)| *k)
            .map(|(_, id)| id.as_str()),
        FairnessPolicy::RoundRobin => {
            let after = match last_selected {
                Some(last) => heads.range::<str, _>((Bound::Excluded(last), Bound::Unbounded)),
                None => heads.range::<str, _>(..),
            };
            let non_empty = |(id, flow): (&'a String, &'a V)| head_key(flow).map(|_| id.as_str());
            after.filter_map(non_empty).next().or_else(|| heads.iter().filter_map(non_empty).next())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(base: Instant) -> OrderingInputs {
        OrderingInputs { enqueued_at: base, received_at: base, ttl: None, slo_ttft: None }
    }

    #[test]
    fn fcfs_orders_by_enqueue_time_then_sequence() {
        let t0 = Instant::now();
        let early = order_key(OrderingPolicy::Fcfs, &inputs(t0), 7);
        let late = order_key(OrderingPolicy::Fcfs, &inputs(t0 + Duration::from_millis(1)), 1);
        assert!(early < late);
        let tie_a = order_key(OrderingPolicy::Fcfs, &inputs(t0), 1);
        assert!(tie_a < early, "same instant: sequence decides");
    }

    #[test]
    fn edf_deadline_is_enqueue_plus_ttl_and_no_ttl_is_far_future() {
        let t0 = Instant::now();
        let mut short = inputs(t0 + Duration::from_secs(5));
        short.ttl = Some(Duration::from_secs(1));
        let mut long = inputs(t0);
        long.ttl = Some(Duration::from_secs(10));
        let none = inputs(t0);
        let k_short = order_key(OrderingPolicy::Edf, &short, 3);
        let k_long = order_key(OrderingPolicy::Edf, &long, 2);
        let k_none = order_key(OrderingPolicy::Edf, &none, 1);
        assert_eq!(k_short.due, Due::At(t0 + Duration::from_secs(6)));
        assert!(k_short < k_long, "later enqueue but earlier deadline goes first");
        assert!(k_long < k_none);
        assert_eq!(k_none.due, Due::Never);
    }

    #[test]
    fn slo_deadline_is_received_plus_header() {
        let t0 = Instant::now();
        let mut tight = inputs(t0 + Duration::from_millis(500));
        tight.received_at = t0;
        tight.slo_ttft = Some(Duration::from_millis(100));
        let mut loose = inputs(t0);
        loose.slo_ttft = Some(Duration::from_millis(2000));
        let none = inputs(t0);
        let k_tight = order_key(OrderingPolicy::SloDeadline, &tight, 9);
        assert_eq!(k_tight.due, Due::At(t0 + Duration::from_millis(100)), "received time, not enqueue time");
        assert!(k_tight < order_key(OrderingPolicy::SloDeadline, &loose, 1));
        assert_eq!(order_key(OrderingPolicy::SloDeadline, &none, 1).due, Due::Never);
    }

    fn key(seq: u64) -> Option<OrderKey> {
        Some(OrderKey { due: Due::Never, seq })
    }

    #[test]
    fn global_strict_takes_the_best_head_across_flows() {
        let heads: BTreeMap<String, Option<OrderKey>> =
            [("a".to_string(), key(5)), ("b".to_string(), key(2)), ("c".to_string(), None)].into();
        assert_eq!(pick_flow(FairnessPolicy::GlobalStrict, &heads, |k| *k, Some("b")), Some("b"));
    }

    #[test]
    fn round_robin_resumes_after_the_last_selected_flow_and_wraps() {
        let heads: BTreeMap<String, Option<OrderKey>> = [
            ("a".to_string(), key(1)),
            ("b".to_string(), key(2)),
            ("c".to_string(), None),
            ("d".to_string(), key(3)),
        ]
        .into();
        let rr = |last| pick_flow(FairnessPolicy::RoundRobin, &heads, |k| *k, last);
        assert_eq!(rr(None), Some("a"));
        assert_eq!(rr(Some("a")), Some("b"));
        assert_eq!(rr(Some("b")), Some("d"), "empty flows are skipped");
        assert_eq!(rr(Some("d")), Some("a"), "wraps around");
        assert_eq!(rr(Some("bb")), Some("d"), "a cursor on a removed flow resumes after its key");
        let empty: BTreeMap<String, Option<OrderKey>> = BTreeMap::new();
        assert_eq!(pick_flow(FairnessPolicy::RoundRobin, &empty, |k| *k, Some("a")), None);
    }
}
