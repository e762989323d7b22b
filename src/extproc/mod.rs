//! The Envoy side: the `envoy.service.ext_proc.v3.ExternalProcessor` gRPC service, gRPC health, TLS.
//!
//! [`stream`] is the per-request state machine (I/O); [`responses`] builds the protobuf answers (pure);
//! [`envoy_msg`] reads Envoy's messages. They are kept apart so the answers can be unit-tested without a
//! stream, and the stream without Envoy.

mod budget;
pub mod envoy_msg;
pub(crate) mod grpc_health;
pub(crate) mod metrics;
mod protocol;
pub mod responses;
pub mod stream;

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::director::Director;
pub use budget::{BodyBudget, BodyReservation};
pub use metrics::OverheadMetrics;
pub use stream::StreamLimits;

/// The ext_proc service: each incoming stream gets its own [`stream::StreamHandler`] task.
#[derive(Debug, Clone)]
pub struct ExtProcService {
    director: Arc<Director>,
    limits: StreamLimits,
    overhead: Arc<OverheadMetrics>,
    budget: Arc<BodyBudget>,
}

impl ExtProcService {
    pub fn new(director: Arc<Director>, limits: StreamLimits, overhead: Arc<OverheadMetrics>) -> Self {
        let budget = BodyBudget::new(limits.max_buffered_request_bytes);
        Self { director, limits, overhead, budget }
    }

    /// The tonic server wrapper, with message size limits large enough for 64 KiB chunks and big prompts.
    pub fn into_server(self) -> ExternalProcessorServer<Self> {
        ExternalProcessorServer::new(self)
            .max_decoding_message_size(16 << 20)
            .max_encoding_message_size(16 << 20)
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for ExtProcService {
    type ProcessStream = ResponseStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let inbound = request.into_inner();
        // Small buffer: answers are consumed by Envoy as fast as it reads them; back-pressure is wanted.
        let (tx, rx) = mpsc::channel(32);
        let handler = stream::StreamHandler::new(
            self.director.clone(),
            self.overhead.clone(),
            self.limits,
            BodyReservation::new(self.budget.clone()),
            tx,
        );
        tokio::spawn(handler.run(inbound));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
