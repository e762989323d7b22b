//! The families of precise prefix-cache routing (`precise-prefix-cache-producer`, `token-producer`):
//! llm-d's names where llm-d has one (llm-d/llm-d-router:pkg/kvevents/metrics.go, pkg/kvcache/metrics),
//! `epp_` names for what llm-d users ask for and lack (why events were dropped, the index's size, how
//! often a request had no token ids).

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::kvcache::SubscriberStats;
use crate::metrics::MetricsRegistry;

/// The handles; clones of each are registered, so recording never touches the registry.
#[derive(Debug, Default)]
pub struct KvCacheMetrics {
    /// What the subscribers count (the pool writes these).
    pub events: Arc<SubscriberStats>,
    pub lookup_requests: Counter,
    pub lookup_hits: Counter,
    /// Distinct epp blocks in the index, as of the last lookup.
    pub index_blocks: Gauge,
    pub token_requests: Counter,
    pub token_failures: Counter,
    /// Requests whose token ids came without a render call (given as ids, or tokenized in process).
    pub token_local: Counter,
}

impl KvCacheMetrics {
    pub(crate) fn register(r: &MetricsRegistry) -> Arc<Self> {
        let m = Self::default();
        let e = &m.events;
        let counters: [(&str, &str, &Counter); 21] = [
            ("llm_d_epp_kv_cache_events_messages_received", "KV-event messages received", &e.messages),
            ("llm_d_epp_kv_cache_events_stores_skipped", "BlockStored events not indexed", &e.stores_skipped),
            (
                "llm_d_epp_kv_cache_events_removals_skipped",
                "Removals of blocks not held",
                &e.removals_skipped,
            ),
            (
                "llm_d_epp_kv_cache_events_zmq_errors",
                "Failed connections to a publisher",
                &e.connect_failures,
            ),
            ("llm_d_epp_kv_cache_index_admissions", "Engine blocks indexed", &e.blocks_stored),
            ("llm_d_epp_kv_cache_index_evictions", "Engine blocks dropped from the index", &e.blocks_removed),
            ("llm_d_epp_kv_cache_index_lookup_requests", "Index lookups", &m.lookup_requests),
            (
                "llm_d_epp_kv_cache_index_lookup_hits",
                "Lookups where some endpoint held block 0",
                &m.lookup_hits,
            ),
            ("epp_kv_cache_events_malformed", "KV-event messages that did not parse", &e.malformed),
            ("epp_kv_cache_events_sequence_gaps", "Jumps in a publisher's sequence (events lost)", &e.gaps),
            ("epp_kv_cache_events_publisher_resets", "Publishers whose sequence restarted", &e.resets),
            ("epp_kv_cache_events_unknown", "Events of a type epp does not know, skipped", &e.unknown_events),
            (
                "epp_kv_cache_events_unknown_pods",
                "Messages on the zmqEndpoint socket whose topic names no endpoint of the pool, skipped",
                &e.unknown_pods,
            ),
            (
                "epp_kv_cache_events_replays",
                "Replays asked of a publisher (on connecting, after a gap)",
                &e.replays,
            ),
            (
                "epp_kv_cache_events_replay_failures",
                "Replays that failed (entries dropped)",
                &e.replay_failures,
            ),
            (
                "epp_token_producer_requests",
                "Requests token-producer was asked to tokenize",
                &m.token_requests,
            ),
            (
                "epp_kv_cache_peer_messages_sent",
                "Speculative placements and first tokens sent to peer epp replicas (datagrams)",
                &e.peer_sent,
            ),
            (
                "epp_kv_cache_peer_messages_received",
                "Peer replicas' speculative placements and first tokens applied",
                &e.peer_received,
            ),
            (
                "epp_kv_cache_peer_messages_dropped",
                "Peer messages dropped: a full outbox, or a datagram malformed, from no peer, or for other block keys",
                &e.peer_dropped,
            ),
            ("epp_token_producer_failures", "Requests left without token ids", &m.token_failures),
            ("epp_token_producer_local", "Requests tokenized without a render call", &m.token_local),
        ];
        for (name, help, counter) in counters {
            r.register(name, help, counter.clone());
        }
        r.register(
            "llm_d_epp_kv_cache_events_active_subscribers",
            "KV-event subscribers running",
            e.active_subscribers.clone(),
        );
        r.register(
            "epp_kv_cache_index_blocks",
            "Distinct blocks in the precise prefix index",
            m.index_blocks.clone(),
        );
        Arc::new(m)
    }
}
