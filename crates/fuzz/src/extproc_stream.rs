//! The ext_proc stream handler fed arbitrary message sequences ([`frames`](crate::frames)), in process: the
//! real `StreamHandler` over a real `Director` (default profile, endpoint health on, two endpoints), with
//! small body limits so that the per-stream limit and the global buffer budget are reachable.
//!
//! Invariants beyond "no panic" and "the handler returns once the messages end":
//! - a stream that ends with an error status sends nothing after it;
//! - nothing leaks: when the stream is over, no request is counted running and no body byte is held
//!   against the global budget — whatever the sequence was.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingResponse;
use epp::config;
use epp::datastore::{Datastore, Endpoint, EndpointTelemetry};
use epp::director::{Director, DirectorMetrics, DirectorOptions};
use epp::extproc::stream::StreamHandler;
use epp::extproc::{BodyBudget, BodyReservation, OverheadMetrics, StreamLimits};
use epp::flowcontrol::Admission;
use epp::health::{HealthMonitor, HealthSettings};
use epp::metrics::MetricsRegistry;
use epp::scheduling::{FactoryContext, NoopObserver, PluginMetrics, Registry};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tonic::Status;

use crate::frames;

/// Small enough that fuzz inputs (a few KiB) cross them.
const LIMITS: StreamLimits = StreamLimits { max_request_body: 2048, max_buffered_request_bytes: 1024 };

struct Harness {
    runtime: Runtime,
    director: Arc<Director>,
    overhead: Arc<OverheadMetrics>,
    budget: Arc<BodyBudget>,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let datastore = Arc::new(Datastore::new("fuzz"));
        let metrics = MetricsRegistry::new("fuzz");
        let ctx = FactoryContext::new(datastore.clone(), PluginMetrics::register(&metrics));
        let loaded =
            config::load_default(&Registry::with_builtins(), &ctx).expect("the default config loads");
        let addrs: [SocketAddr; 2] = [([10, 0, 0, 1], 8000).into(), ([10, 0, 0, 2], 8000).into()];
        datastore.set_endpoints(addrs.iter().map(|a| Endpoint::new(a.to_string(), *a)).collect());
        for (i, ep) in datastore.endpoints().iter().enumerate() {
            ep.update_telemetry(EndpointTelemetry {
                waiting_queue_size: i as u64,
                update_time: Some(Instant::now()),
                ..Default::default()
            });
        }
        let options = DirectorOptions { parse_bodies: true, ..Default::default() };
        let director = Director::new(
            datastore,
            Arc::new(loaded.pipeline),
            Admission::default(),
            DirectorMetrics::register(&metrics),
            Arc::new(NoopObserver),
            options,
        )
        .with_health(HealthMonitor::new(HealthSettings::default(), &metrics));
        Harness {
            runtime,
            director: Arc::new(director),
            overhead: OverheadMetrics::register(&metrics),
            budget: BodyBudget::new(LIMITS.max_buffered_request_bytes),
        }
    })
}

pub fn run(data: &[u8]) {
    let answers = answers(data);
    if let Some(at) = answers.iter().position(Result::is_err) {
        assert_eq!(at + 1, answers.len(), "answers were sent after the stream's error status");
    }
    let h = harness();
    assert_eq!(h.director.metrics().running_requests(), 0, "a request is still counted running");
    assert_eq!(h.budget.used(), 0, "body bytes are still held against the global budget");
}

/// Runs the stream the frames in `data` stand for; returns what epp answered, in order.
pub fn answers(data: &[u8]) -> Vec<Result<ProcessingResponse, Status>> {
    let h = harness();
    let messages = frames::decode(data);
    let (tx, mut rx) = mpsc::channel(32);
    let handler = StreamHandler::new(
        h.director.clone(),
        h.overhead.clone(),
        LIMITS,
        BodyReservation::new(h.budget.clone()),
        tx,
    );
    h.runtime.block_on(async {
        let drain = async {
            let mut answers = Vec::new();
            while let Some(answer) = rx.recv().await {
                answers.push(answer);
            }
            answers
        };
        let ((), answers) = tokio::join!(handler.run(futures::stream::iter(messages)), drain);
        answers
    })
}
