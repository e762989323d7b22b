use serde_json::json;

use super::*;
use crate::kvcache::{BlockStored, KvEvent, Subscribers};
use crate::kvcache::{HashAlgorithm, PoolConfig, TierWeights, DEFAULT_MAX_BLOCKS};
use crate::scheduling::plugins::testing::{assert_rejects, build, endpoint, RequestFixture};
use crate::scheduling::CompletionKind;

/// llm-d's reference producer entry (llm-d/llm-d:guides/pd-disaggregation/router/pd-multi-tier.values.yaml,
/// with the replay port of its precise-routing lab).
fn llm_d_reference() -> serde_json::Value {
    json!({
        "indexerConfig": {
            "kvBlockIndexConfig": {"inMemoryConfig": {"podCacheSize": 20}, "enableMetrics": true},
            "kvCacheBackendConfigs": [{"name": "gpu", "weight": 1.0}, {"name": "cpu", "weight": 0.4}]
        },
        "tokenProcessorConfig": {"blockSizeTokens": 64, "hashSeed": "42", "hashAlgorithm": "xxh64"},
        "speculativeIndexing": false,
        "kvEventsConfig": {
            "topicFilter": "kv@", "concurrency": 8, "engineType": "vllm", "discoverPods": true,
            "podDiscoveryConfig": {"socketPort": 5556, "replaySocketPort": 5559}
        }
    })
}

#[test]
fn llm_d_reference_config_loads_with_its_values() {
    let config = parse_config("p", Some(&llm_d_reference())).expect("llm-d's config");
    assert_eq!(config.block_size_tokens, 64);
    assert_eq!(config.hash_seed, "42");
    assert_eq!(config.hash_algorithm, HashAlgorithm::Xxh64);
    assert_eq!(config.tiers, TierWeights(vec![("gpu".into(), 1.0), ("cpu".into(), 0.4)]));
    assert_eq!(
        config.pool,
        PoolConfig { socket_port: 5556, replay_port: Some(5559), ..PoolConfig::default() }
    );
    assert_eq!(config.max_blocks, DEFAULT_MAX_BLOCKS);
    let sized = json!({"indexerConfig": {"kvBlockIndexConfig": {"inMemoryConfig": {"size": 1000}}}});
    assert_eq!(parse_config("p", Some(&sized)).expect("size").max_blocks, 1000);
    let defaults = parse_config("p", None).expect("defaults");
    assert_eq!(defaults.block_size_tokens, 16);
    assert_eq!(defaults.hash_algorithm, HashAlgorithm::CborFnv);
    assert_eq!(defaults.pool, PoolConfig::default());
    assert_eq!(defaults.tiers, TierWeights::default());
    // llm-d's centralised mode: epp binds, the engines connect; with discoverPods off, nothing is dialled.
    let central = json!({"kvEventsConfig": {"zmqEndpoint": "tcp://*:5557", "discoverPods": false}});
    let central = parse_config("p", Some(&central)).expect("zmqEndpoint").pool;
    assert_eq!((central.central.as_deref(), central.discover_pods), (Some("tcp://0.0.0.0:5557"), false));
    let older = json!({"tokenProcessorConfig": {"blockSize": 64}});
    assert_eq!(parse_config("p", Some(&older)).expect("blockSize").block_size_tokens, 64);
}

#[test]
fn what_epp_does_not_do_is_refused_by_name() {
    assert_rejects(factory, json!({"kvEventsConfig": {"zmqEndpoint": "ipc:///tmp/kv"}}), "zmqEndpoint");
    assert_rejects(factory, json!({"kvEventsConfig": {"discoverPods": false}}), "discoverPods");
    assert_rejects(factory, json!({"kvEventsConfig": {"engineType": "trtllm"}}), "engineType");
    assert_rejects(factory, json!({"kvEventsConfig": {"concurrency": 0}}), "concurrency");
    assert_rejects(
        factory,
        json!({"kvEventsConfig": {"podDiscoveryConfig": {"socketPort": 0}}}),
        "socketPort",
    );
    let redis = json!({"indexerConfig": {"kvBlockIndexConfig": {"redisConfig": {"address": "r:6379"}}}});
    assert_rejects(factory, redis, "kvBlockIndexConfig");
    let empty = json!({"indexerConfig": {"kvBlockIndexConfig": {"inMemoryConfig": {"size": 0}}}});
    assert_rejects(factory, empty, "inMemoryConfig.size");
    assert_rejects(factory, json!({"tokenProcessorConfig": {"blockSizeTokens": 0}}), "blockSizeTokens");
    assert_rejects(factory, json!({"tokenProcessorConfig": {"hashAlgorithm": "md5"}}), "hashAlgorithm");
    let negative = json!({"indexerConfig": {"kvCacheBackendConfigs": [{"name": "gpu", "weight": -1}]}});
    assert_rejects(factory, negative, "kvCacheBackendConfigs");
    assert_rejects(factory, json!({"kvEventsConfg": {}}), "kvEventsConfg");
    assert!(build(factory, llm_d_reference()).is_ok());
}

/// Engine blocks of 4 tokens stored on endpoint 1 (GPU) and on endpoint 2 (the first two only, then
/// offloaded to CPU), keyed by epp in blocks of 2.
fn stored(tokens: &[u32], medium: Option<&str>) -> KvEvent {
    KvEvent::BlockStored(BlockStored {
        block_hashes: (0..tokens.len() as u64 / 4).map(|i| 100 + i).collect(),
        parent_block_hash: None,
        token_ids: tokens.to_vec(),
        block_size: 4,
        medium: medium.map(str::to_string),
        lora_name: None,
        lora_id: None,
    })
}

#[tokio::test]
async fn candidates_get_their_longest_held_run_at_tier_weights() {
    let config =
        parse_config("p", Some(&json!({"tokenProcessorConfig": {"blockSizeTokens": 2}}))).expect("config");
    let hasher = BlockKeyHasher::new(config.hash_algorithm, 2, "");
    let index = Arc::new(RwLock::new(KvIndex::new(
        hasher,
        TierWeights(vec![("gpu".into(), 1.0), ("cpu".into(), 0.5)]),
    )));
    let metrics = Arc::new(KvCacheMetrics::default());
    let pool = Arc::new(KvEventPool::new(PoolConfig::default(), index.clone(), metrics.events.clone()));
    let (one, two, three) = (endpoint(1), endpoint(2), endpoint(3));
    let mut subscribers = Subscribers::new(pool.clone());
    subscribers.reconcile(&[one.clone(), two.clone(), three.clone()]);
    let prompt: Vec<u32> = (0..12).collect();
    {
        let mut index = index.write().expect("index");
        let id = |e: &Arc<crate::datastore::Endpoint>| pool.endpoint_id(e.addr).expect("id");
        index.apply(id(&one), "m", &stored(&prompt, None));
        index.apply(id(&two), "m", &stored(&prompt[..8], Some("CPU")));
        index.apply(id(&three), "other-model", &stored(&prompt, None));
    }
    let producer = PrecisePrefixCacheProducer::new(pool, 2, metrics.clone());
    let fixture = RequestFixture::with_prompt("m", "\"ignored: the token ids are what is matched\"");
    let mut candidates: Vec<Candidate> = [one, two, three].into_iter().map(Candidate::new).collect();
    let mut req = fixture.request();
    producer.prepare(&req, &mut candidates);
    assert!(candidates
        .iter()
        .all(|c| c.attrs.prefix == Some(PrefixMatch { match_blocks: 0, total_blocks: 0, block_chars: 8 })));
    let mut asked: Vec<u32> = prompt.clone();
    asked.push(99);
    req.token_ids = Some(&asked);
    producer.prepare(&req, &mut candidates);
    let matched: Vec<_> =
        candidates.iter().map(|c| c.attrs.prefix.map(|p| (p.match_blocks, p.total_blocks))).collect();
    assert_eq!(
        matched,
        [Some((6, 6)), Some((2, 6)), Some((0, 6))],
        "all 6 blocks on GPU; 4 CPU blocks at weight 0.5; another model's blocks never match"
    );
    assert_eq!(
        (metrics.lookup_requests.get(), metrics.lookup_hits.get()),
        (1, 1),
        "a request without tokens looks nothing up"
    );
    assert_eq!(metrics.events.active_subscribers.get(), 3);
}

#[tokio::test]
async fn with_speculation_a_routed_prompt_counts_on_its_target_until_the_ttl_after_its_first_token() {
    use crate::scheduling::plugins::testing::{dispatch, result_for};
    let params = json!({"speculativeIndexing": true, "speculativeTTL": "2s", "tokenProcessorConfig": {"blockSizeTokens": 4}});
    let config = parse_config("p", Some(&params)).expect("config");
    assert_eq!(config.speculative_ttl, Some(Duration::from_secs(2)));
    assert_eq!(parse_config("p", None).expect("defaults").speculative_ttl, None, "off by default");
    assert_rejects(factory, json!({"speculativeIndexing": true, "speculativeTTL": "soon"}), "speculativeTTL");
    let hasher = BlockKeyHasher::new(config.hash_algorithm, 4, "");
    let index = Arc::new(RwLock::new(KvIndex::new(hasher, TierWeights::default())));
    let metrics = Arc::new(KvCacheMetrics::default());
    let pool = Arc::new(KvEventPool::new(PoolConfig::default(), index, metrics.events.clone()));
    let (one, two) = (endpoint(1), endpoint(2));
    let mut subscribers = Subscribers::new(pool.clone());
    subscribers.reconcile(&[one.clone(), two.clone()]);
    let producer = PrecisePrefixCacheProducer::new(pool, 4, metrics).with_speculation(config.speculative_ttl);
    let fixture = RequestFixture::with_prompt("m", "\"x\"");
    let tokens: Vec<u32> = (0..16).collect();
    let mut req = fixture.request();
    req.token_ids = Some(&tokens);
    let routed = dispatch(&one, 16, 32);
    producer.pre_request(&req, &result_for(std::slice::from_ref(&one)), &routed);
    let mut candidates: Vec<Candidate> = [one.clone(), two.clone()].into_iter().map(Candidate::new).collect();
    producer.prepare(&req, &mut candidates);
    let matched =
        |c: &[Candidate]| c.iter().map(|c| c.attrs.prefix.map_or(0, |p| p.match_blocks)).collect::<Vec<_>>();
    assert_eq!(matched(&candidates), [4, 0], "the routed prompt's 4 blocks, on its target only");
    // Queued in the engine past the TTL: the engine has not computed the blocks yet, so they still count.
    req.now += Duration::from_secs(5);
    producer.prepare(&req, &mut candidates);
    assert_eq!(matched(&candidates), [4, 0], "waiting for its first token, the request keeps its entries");
    producer.on_response_chunk(&routed, b"data: {}", false, req.now);
    producer.on_response_chunk(&routed, b"data: {}", true, req.now);
    producer.on_response_chunk(&routed, b"data: {}", false, req.now + Duration::from_secs(1));
    req.now += Duration::from_millis(1_999);
    producer.prepare(&req, &mut candidates);
    assert_eq!(matched(&candidates), [4, 0], "the TTL runs from the first token");
    req.now += Duration::from_millis(1);
    producer.prepare(&req, &mut candidates);
    assert_eq!(matched(&candidates), [0, 0], "expired: no engine ever confirmed them");
    producer.on_complete(&routed, &completion(req.now));
    producer.prepare(&req, &mut candidates);
    assert_eq!(matched(&candidates), [0, 0], "the end of a served request changes nothing");

    // A request that ends without a first token (refused, cancelled) starts its TTL at its end.
    let mut second = dispatch(&two, 16, 32);
    second.dispatch_id = 2;
    producer.pre_request(&req, &result_for(std::slice::from_ref(&two)), &second);
    producer.on_complete(&second, &completion(req.now + Duration::from_secs(30)));
    req.now += Duration::from_secs(31);
    producer.prepare(&req, &mut candidates);
    assert_eq!(matched(&candidates), [0, 4], "within the TTL of the request's end");
    req.now += Duration::from_secs(1);
    producer.prepare(&req, &mut candidates);
    assert_eq!(matched(&candidates), [0, 0]);
}

fn completion(now: std::time::Instant) -> Completion {
    Completion { kind: CompletionKind::Aborted, status: None, usage: None, now }
}

fn peer_params(own: u16, other: u16) -> serde_json::Value {
    json!({
        "speculativeIndexing": true,
        "tokenProcessorConfig": {"blockSizeTokens": 4},
        "speculativePeers": {"listen": format!("127.0.0.1:{own}"), "peers": [format!("127.0.0.1:{other}")]},
    })
}

#[test]
fn peers_are_checked_by_name() {
    let on = |peers: serde_json::Value| json!({"speculativeIndexing": true, "speculativePeers": peers});
    let off = json!({"speculativePeers": {"listen": ":9004", "peers": ["epp:9004"]}});
    assert_rejects(factory, off, "speculativePeers");
    assert_rejects(factory, on(json!({"listen": "9004", "peers": ["epp:9004"]})), "speculativePeers.listen");
    assert_rejects(factory, on(json!({"listen": ":0", "peers": ["epp:9004"]})), "speculativePeers.listen");
    assert_rejects(factory, on(json!({"listen": ":9004", "peers": []})), "speculativePeers.peers");
    assert_rejects(factory, on(json!({"listen": ":9004", "peers": ["epp"]})), "speculativePeers.peers");
    assert_rejects(factory, on(json!({"listen": ":9004", "peers": [":9004"]})), "speculativePeers.peers");
    assert_rejects(factory, on(json!({"listen": ":9004", "peerz": []})), "peerz");
    let config = parse_config("p", Some(&on(json!({"listen": ":9004", "peers": ["epp-peers.ns.svc:9004"]}))))
        .expect("config");
    let peers = config.peers.expect("peers");
    assert_eq!(peers.listen, "0.0.0.0:9004".parse().expect("address"));
    assert_eq!(peers.peers, ["epp-peers.ns.svc:9004"]);
}

#[tokio::test]
async fn a_listen_port_in_use_is_a_startup_error() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port();
    assert_rejects(factory, peer_params(port, 9), "speculativePeers.listen");
}

/// Two replicas of the plugin, each with its own datastore of the same two pods and the other as its peer,
/// over UDP on loopback: what one routes counts on the other, and the other's TTL starts at the first
/// token the first one sees.
#[tokio::test]
async fn with_peers_what_one_replica_routes_counts_on_the_other() {
    use crate::datastore::{Datastore, Endpoint};
    use crate::scheduling::plugins::testing::{dispatch, result_for};
    use crate::scheduling::{FactoryContext, PluginMetrics};
    let (one, two) = (endpoint(1), endpoint(2));
    let replica = |own: u16, other: u16| {
        let datastore = Arc::new(Datastore::new("t"));
        datastore.set_endpoints([&one, &two].iter().map(|e| Endpoint::new(e.name.clone(), e.addr)).collect());
        let ctx = FactoryContext::new(datastore, PluginMetrics::detached());
        factory("p", Some(&peer_params(own, other)), &ctx).expect("builds")
    };
    let (port_a, port_b) = (epp_testkit::free_port(), epp_testkit::free_port());
    let (a, b) = (replica(port_a, port_b), replica(port_b, port_a));
    let (Some(a_routes), Some(a_hears), Some(b_reads)) = (&a.pre_request, &a.response, &b.producer) else {
        panic!("the plugin routes, hears responses and produces")
    };
    let fixture = RequestFixture::with_prompt("m", "\"x\"");
    let tokens: Vec<u32> = (0..16).collect();
    let mut req = fixture.request();
    req.token_ids = Some(&tokens);
    let mut candidates: Vec<Candidate> = [one.clone(), two.clone()].into_iter().map(Candidate::new).collect();
    let matched =
        |c: &[Candidate]| c.iter().map(|c| c.attrs.prefix.map_or(0, |p| p.match_blocks)).collect::<Vec<_>>();
    let routed = dispatch(&one, 16, 32);
    // Both supervisors number the pods as they start: until then a placement names a pod unknown to one of
    // them. The same dispatch id each time, so a resend replaces the entry instead of adding one.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        a_routes.pre_request(&req, &result_for(std::slice::from_ref(&one)), &routed);
        b_reads.prepare(&req, &mut candidates);
        if matched(&candidates) == [4, 0] || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(matched(&candidates), [4, 0], "A's routing counts on B, on A's target");
    // Pending on B until A's request gets its first token, however long that takes.
    let mut much_later = fixture.request();
    much_later.token_ids = Some(&tokens);
    much_later.now += Duration::from_secs(30);
    b_reads.prepare(&much_later, &mut candidates);
    assert_eq!(matched(&candidates), [4, 0], "still pending");
    a_hears.on_response_chunk(&routed, b"data: {}", true, req.now);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while matched(&candidates) != [0, 0] && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        b_reads.prepare(&much_later, &mut candidates);
    }
    assert_eq!(matched(&candidates), [0, 0], "B started the TTL when A saw the first token");
}
