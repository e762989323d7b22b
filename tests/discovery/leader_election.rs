//! Two real epp servers with `--ha-enable-leader-election` against the fake API server (which serves the
//! Lease with resourceVersion conflicts, 409, as the real one does): exactly one is ready while both stay
//! live; when the leader dies without releasing (aborted) the other takes over once the lease expires;
//! when the leader shuts down gracefully it releases the Lease and the other takes over at its next retry
//! — with a one-hour lease, so nothing but the release explains it. Every step polls for the expected
//! state with a generous bound; nothing is timed.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use epp::app::Server;
use epp::cli::Cli;
use epp_testkit::kube_api::{FakeKubeApi, LEASES};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const NS: &str = "llm";
const POOL: &str = "vllm-pool";
/// The Lease upstream's EPP would use for this pool (so an epp and a Go EPP of one pool never both lead).
const LEASE: &str = "epp-llm-vllm-pool.gateway-api-inference-extension.sigs.k8s.io";
/// How long a step may take to show (generous: these machines are shared; nothing is timed).
const BOUND: Duration = Duration::from_secs(60);

/// Lease timings for a test: (lease duration, renew deadline); the retry period is 100 ms.
struct Timings(&'static str, &'static str);

async fn replica(name: &str, kubeconfig: &Path, timings: &Timings) -> Server {
    let args = epp_testkit::loopback_epp_args().into_iter().chain([
        "--shutdown-grace-period=200ms".into(),
        // Static endpoints: readiness then depends on leadership alone.
        "--endpoints=127.0.0.1:9".into(),
        format!("--pool-name={POOL}"),
        format!("--pool-namespace={NS}"),
        format!("--pod-name={name}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--ha-enable-leader-election".into(),
        format!("--ha-lease-duration={}", timings.0),
        format!("--ha-renew-deadline={}", timings.1),
        "--ha-retry-period=100ms".into(),
    ]);
    Server::start(Cli::parse_from(args)).await.expect("epp starts with leader election")
}

/// The status of health service `service` on `epp`.
async fn status(epp: &Server, service: &str) -> i32 {
    let Ok(channel) = tonic::transport::Channel::from_shared(format!("http://{}", epp.health_addr)) else {
        return -1;
    };
    let Ok(channel) = channel.connect().await else { return -1 };
    let request = HealthCheckRequest { service: service.into() };
    HealthClient::new(channel).check(request).await.map_or(-1, |r| r.into_inner().status)
}

/// Ready as the gateway and the kubelet see it: readiness and the ext_proc health service both serving.
async fn ready(epp: &Server) -> bool {
    let serving = ServingStatus::Serving as i32;
    status(epp, "readiness").await == serving
        && status(epp, "envoy.service.ext_proc.v3.ExternalProcessor").await == serving
}

async fn live(epp: &Server) -> bool {
    status(epp, "liveness").await == ServingStatus::Serving as i32
}

/// The Lease's holder, "" when released or absent.
fn holder(api: &FakeKubeApi) -> String {
    let lease = api.store().get(LEASES, NS, LEASE);
    lease.and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string)).unwrap_or_default()
}

fn transitions(api: &FakeKubeApi) -> i64 {
    api.store().get(LEASES, NS, LEASE).and_then(|l| l["spec"]["leaseTransitions"].as_i64()).unwrap_or(-1)
}

/// How many calls the replicas made on the Lease so far.
fn lease_calls(api: &FakeKubeApi) -> usize {
    api.requests().iter().filter(|r| r.contains(LEASE)).count()
}

/// Polls `check` until it holds; fails the test after [`BOUND`].
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let polled = tokio::time::timeout(BOUND, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(polled.await.is_ok(), "never happened: {what}");
}

/// Exactly one of `a`, `b` is ready, it holds the Lease, and both are live: the leader's index.
async fn exactly_one_leader(api: &FakeKubeApi, replicas: [(&str, &Server); 2]) -> usize {
    let [(name_a, a), (name_b, b)] = replicas;
    until("one replica leads", || async { ready(a).await || ready(b).await }).await;
    // A few more rounds of both campaigns: never two ready at once.
    let settled = lease_calls(api) + 10;
    until("both campaign on", || async { lease_calls(api) >= settled }).await;
    let (ready_a, ready_b) = (ready(a).await, ready(b).await);
    assert!(ready_a != ready_b, "exactly one ready: a={ready_a} b={ready_b}");
    assert!(live(a).await && live(b).await, "liveness serves on leader and follower alike");
    let leader = if ready_a { name_a } else { name_b };
    assert!(holder(api).starts_with(&format!("{leader}_")), "{leader} holds the lease: {}", holder(api));
    usize::from(ready_b)
}

#[tokio::test]
async fn a_follower_takes_over_when_the_leader_dies() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    let timings = Timings("3s", "2s");
    let a = replica("replica-a", &kubeconfig, &timings).await;
    let b = replica("replica-b", &kubeconfig, &timings).await;
    let leader = exactly_one_leader(&api, [("replica-a", &a), ("replica-b", &b)]).await;
    assert_eq!(transitions(&api), 0, "the first leader created the lease");

    // The leader dies: nothing releases its Lease, so the follower waits out the lease duration.
    let (dead, survivor, survivor_name) = if leader == 0 { (a, b, "replica-b") } else { (b, a, "replica-a") };
    dead.abort();
    until("the follower becomes ready", || ready(&survivor)).await;
    assert!(holder(&api).starts_with(&format!("{survivor_name}_")), "new holder: {}", holder(&api));
    assert_eq!(transitions(&api), 1, "one change of holder");
    survivor.shutdown().await;
    assert_eq!(holder(&api), "", "the survivor released the lease at shutdown");
}

#[tokio::test]
async fn graceful_shutdown_hands_the_lease_over_at_once() {
    let api = FakeKubeApi::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");
    // A one-hour lease: within the poll bound only a release lets the follower in.
    let timings = Timings("1h", "30s");
    let a = replica("replica-a", &kubeconfig, &timings).await;
    until("a leads", || ready(&a)).await;
    let b = replica("replica-b", &kubeconfig, &timings).await;
    let leader = exactly_one_leader(&api, [("replica-a", &a), ("replica-b", &b)]).await;
    assert_eq!(leader, 0, "a, first, leads");

    a.shutdown().await;
    until("b takes over after a's release", || ready(&b)).await;
    assert!(holder(&api).starts_with("replica-b_"), "b holds the lease: {}", holder(&api));
    b.shutdown().await;
}
