//! InferencePool mode end to end: client → a real Envoy → epp (ext_proc, discovering its pool from the
//! fake Kubernetes API server through the real kube-rs client) → Envoy's ORIGINAL_DST cluster → one
//! `epp-sim` replica per pod, each on its own loopback address (127.0.0.2, .3, .4) and the pool's one
//! target port, as pods share a port on different IPs in a cluster.
//!
//! Why through Envoy: discovery is only useful if the addresses it publishes are the ones Envoy dials,
//! and a scale-down is only safe if no request that was not on the removed pod fails. So while the pool
//! scales up and down (pods added, made unready, terminating, deleted, and a pod's server killed with
//! its pod), a steady stream of completions flows, each tagged with the *epoch* it started in: the test
//! bumps the epoch only once epp's datastore shows the step (and waits for the earlier epochs' requests
//! to finish), so a request of epoch `e` was routed while epp knew the pool of epoch `e` or `e + 1`, and
//! must have been served by one of their pods, with status 200. The one exception is the crash: requests
//! sent to the killed pod before epp heard of it may fail. Every wait polls for a state under one
//! generous deadline; nothing is timed. Without Envoy the test fails (`EPP_SKIP_MISSING_TOOLS=1` skips it,
//! printing SKIP, outside CI).

mod discovery_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clap::Parser;
use discovery_support::{eventually, APP, NS, POOL};
use epp::app::Server;
use epp::cli::Cli;
use epp_testkit::kube_api::objects::{inference_pool, pod, terminating};
use epp_testkit::kube_api::{inference_pools, FakeKubeApi, PODS};
use epp_testkit::{envoy_or_skip, http_client, start_envoy_on_free_ports, SimPod};
use serde_json::json;

const MODEL: &str = "food-review";
/// Each pod's address; all serve the pool's one target port.
const PODS_AT: [(&str, &str); 3] = [("a", "127.0.0.2"), ("b", "127.0.0.3"), ("c", "127.0.0.4")];
/// Requests in flight at any time.
const WORKERS: usize = 3;

/// One pod's model server, on `ip:port` (port 0: any); replies carry `x-sim-replica: <name>-<port>`.
fn sim_pod(name: &str, ip: &str, port: u16) -> SimPod {
    let mut options = epp_sim::ServeOptions::new(MODEL);
    options.host = ip.to_string();
    options.port = port;
    options.name_prefix = name.to_string();
    options.time_scale = 20.0;
    SimPod::start(options)
}

/// What one request saw.
#[derive(Debug, Clone)]
struct Outcome {
    worker: usize,
    epoch: usize,
    status: u16,
    /// The pod that served it (from `x-sim-replica`), if any did.
    pod: Option<String>,
}

/// The steady stream of completions through Envoy.
struct Load {
    epoch: Arc<AtomicUsize>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(url: String) -> Self {
        let epoch = Arc::new(AtomicUsize::new(0));
        let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..WORKERS)
            .map(|worker| {
                let (url, epoch, outcomes, stop) =
                    (url.clone(), Arc::clone(&epoch), Arc::clone(&outcomes), Arc::clone(&stop));
                tokio::spawn(async move {
                    let client = http_client();
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let started_in = epoch.load(Ordering::SeqCst);
                        let tag = format!("w{worker} n{n}");
                        let outcome = completion(&client, &url, worker, started_in, &tag).await;
                        lock(&outcomes).push(outcome);
                    }
                })
            })
            .collect();
        Self { epoch, outcomes, stop, workers }
    }

    /// Starts the next epoch (call it once epp's datastore shows the step) and waits until no request
    /// of an earlier epoch is in flight; returns its number. A request is routed after it starts, so one
    /// of epoch `e` was routed while epp knew the pool of epoch `e`, or of `e + 1` when the datastore
    /// changed before the test saw it; the drain keeps it from straddling more than that.
    async fn next_epoch(&self) -> usize {
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.drain_before(epoch).await;
        epoch
    }

    fn outcomes(&self) -> Vec<Outcome> {
        lock(&self.outcomes).clone()
    }

    /// The pods that served requests of `epoch`.
    fn served_in(&self, epoch: usize) -> BTreeSet<String> {
        self.outcomes().into_iter().filter(|o| o.epoch == epoch).filter_map(|o| o.pod).collect()
    }

    /// Waits until every worker has finished a request started in `epoch` or later: workers send one
    /// request at a time, so no request of an earlier epoch is still in flight.
    async fn drain_before(&self, epoch: usize) {
        eventually("the earlier epochs' requests have finished", || {
            let done: BTreeSet<usize> =
                self.outcomes().iter().filter(|o| o.epoch >= epoch).map(|o| o.worker).collect();
            done.len() == WORKERS
        })
        .await;
    }

    /// Waits until `count` requests of `epoch` have finished.
    async fn wait_for(&self, epoch: usize, count: usize) {
        eventually(&format!("{count} requests of epoch {epoch}"), || {
            self.outcomes().iter().filter(|o| o.epoch == epoch).count() >= count
        })
        .await;
    }

    async fn stop(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::SeqCst);
        for worker in self.workers {
            worker.await.expect("a load worker panicked");
        }
        lock(&self.outcomes).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One short completion with a prompt no other request shares; a transport error counts as status 0.
async fn completion(client: &reqwest::Client, url: &str, worker: usize, epoch: usize, tag: &str) -> Outcome {
    let body =
        json!({"model": MODEL, "prompt": format!("{tag}: {}", rand::random::<u64>()), "max_tokens": 3});
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .send()
        .await;
    let Ok(response) = sent else { return Outcome { worker, epoch, status: 0, pod: None } };
    let status = response.status().as_u16();
    let replica = response.headers().get("x-sim-replica").and_then(|v| v.to_str().ok()).map(String::from);
    // Read the whole body: a reply cut short by a dying server is a failure too.
    let status = if response.bytes().await.is_ok() { status } else { 0 };
    let pod = replica.and_then(|r| r.rsplit_once('-').map(|(name, _)| name.to_string()));
    Outcome { worker, epoch, status, pod }
}

/// epp's endpoint names now, sorted.
fn endpoint_names(epp: &Server) -> Vec<String> {
    let mut names: Vec<String> = epp.datastore.endpoints().iter().map(|e| e.name.clone()).collect();
    names.sort();
    names
}

async fn wait_for_endpoints(epp: &Server, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|p| format!("{p}-rank-0")).collect();
    eventually(&format!("epp's endpoints are {want:?}"), || endpoint_names(epp) == want).await;
}

fn pods(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(std::string::ToString::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_the_pool_moves_traffic_and_fails_no_request_off_a_removed_pod() {
    let test_name = "scaling_the_pool_moves_traffic_and_fails_no_request_off_a_removed_pod";
    if envoy_or_skip(test_name).is_none() {
        return;
    }
    // Every pod's server on the same port, as a pool's pods share the target port.
    let first = sim_pod(PODS_AT[0].0, PODS_AT[0].1, 0);
    let port = first.addr.port();
    let mut sims: BTreeMap<&str, SimPod> = BTreeMap::from([(PODS_AT[0].0, first)]);
    for (name, ip) in &PODS_AT[1..] {
        sims.insert(name, sim_pod(name, ip, port));
    }
    let ip = |name: &str| PODS_AT.iter().find(|(n, _)| *n == name).map(|(_, ip)| *ip).unwrap_or_default();

    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    api.apply(&inference_pools(epp::discovery::GROUP_V1), NS, inference_pool(POOL, &[APP], &[port]));
    api.apply(PODS, NS, pod("a", ip("a"), &[APP], true));
    let args = epp_testkit::loopback_epp_args().into_iter().chain([
        "--refresh-metrics-interval=20ms".into(),
        "--shutdown-grace-period=200ms".into(),
        format!("--pool-name={POOL}"),
        format!("--pool-namespace={NS}"),
        format!("--kubeconfig={}", kubeconfig.display()),
    ]);
    let epp = Server::start(Cli::parse_from(args)).await.expect("epp starts in InferencePool mode");
    wait_for_endpoints(&epp, &["a"]).await;
    let vars = [
        ("EXTPROC_PORT", epp.grpc_addr.port().to_string()),
        ("HEALTH_PORT", epp.health_addr.port().to_string()),
        (epp_testkit::PLAINTEXT_EXTPROC.0, epp_testkit::PLAINTEXT_EXTPROC.1.to_string()),
    ];
    let envoy = start_envoy_on_free_ports("envoy-full-duplex.yaml", &vars);
    let url = envoy.url("/v1/completions");

    // Epoch 0: the pool is {a}. Wait for the first success (Envoy health-checks epp first).
    let client = http_client();
    let mut warm = 0;
    loop {
        warm += 1;
        if completion(&client, &url, 0, 0, &format!("warm {warm}")).await.status == 200 {
            break;
        }
        assert!(warm < 600, "no request through Envoy succeeded after epp synced");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let load = Load::start(url);
    eventually("a serves", || load.served_in(0).contains("a")).await;

    // Scale up: b and c join; traffic spreads onto them.
    api.apply(PODS, NS, pod("b", ip("b"), &[APP], true));
    api.apply(PODS, NS, pod("c", ip("c"), &[APP], true));
    wait_for_endpoints(&epp, &["a", "b", "c"]).await;
    let up = load.next_epoch().await;
    eventually("the new pods b and c get traffic", || {
        let served = load.served_in(up);
        served.contains("b") && served.contains("c")
    })
    .await;

    // b turns unready: no new request goes to it (its server still finishes what it has).
    api.apply(PODS, NS, pod("b", ip("b"), &[APP], false));
    wait_for_endpoints(&epp, &["a", "c"]).await;
    let unready = load.next_epoch().await;
    eventually("a and c serve", || load.served_in(unready).is_superset(&pods(&["a", "c"]))).await;

    // Graceful scale-down of c, as Kubernetes does it: terminating first (epp drops it), then, once its
    // requests are done, the server exits and the pod object goes.
    api.apply(PODS, NS, terminating(pod("c", ip("c"), &[APP], true)));
    wait_for_endpoints(&epp, &["a"]).await;
    let terminating_epoch = load.next_epoch().await;
    if let Some(mut c) = sims.remove("c") {
        c.kill();
    }
    assert!(api.delete(PODS, NS, "c"));
    let deleted = load.next_epoch().await;
    load.wait_for(deleted, 10).await;

    // b is ready again, then a is killed with its pod at once (a crash): requests already sent to a may
    // fail; none started after epp dropped a may.
    api.apply(PODS, NS, pod("b", ip("b"), &[APP], true));
    wait_for_endpoints(&epp, &["a", "b"]).await;
    let back = load.next_epoch().await;
    eventually("b serves again", || load.served_in(back).contains("b")).await;
    if let Some(mut a) = sims.remove("a") {
        a.kill();
    }
    assert!(api.delete(PODS, NS, "a"));
    wait_for_endpoints(&epp, &["b"]).await;
    let crashed = load.next_epoch().await;
    load.wait_for(crashed, 10).await;

    let outcomes = load.stop().await;
    let allowed: BTreeMap<usize, BTreeSet<String>> = BTreeMap::from([
        (0, pods(&["a"])),
        (up, pods(&["a", "b", "c"])),
        (unready, pods(&["a", "c"])),
        (terminating_epoch, pods(&["a"])),
        (deleted, pods(&["a"])),
        (back, pods(&["a", "b"])),
        (crashed, pods(&["b"])),
    ]);
    let mut failed_on_crash = 0;
    for (i, o) in outcomes.iter().enumerate() {
        // Requests of the epoch in which a was killed may have been on a: the only failures allowed.
        if o.epoch == back && o.status != 200 {
            failed_on_crash += 1;
            continue;
        }
        assert_eq!(o.status, 200, "request {i} of epoch {} failed: {o:?}", o.epoch);
        let mut pool = allowed.get(&o.epoch).cloned().unwrap_or_default();
        pool.extend(allowed.get(&(o.epoch + 1)).into_iter().flatten().cloned());
        let served = o.pod.as_deref().unwrap_or_default();
        assert!(
            pool.contains(served),
            "request {i} of epoch {} went to {served:?}, not in {pool:?}",
            o.epoch
        );
    }
    eprintln!(
        "{} requests through Envoy across {} pool states; {failed_on_crash} failed, all started before epp \
         had dropped the crashed pod",
        outcomes.len(),
        allowed.len()
    );
    drop(envoy);
    epp.shutdown().await;
}
