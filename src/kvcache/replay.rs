//! Replay: asking a publisher for the batches a subscriber missed, from its buffer (vLLM's
//! `replay_endpoint`, a ROUTER socket; vllm-project/vllm:vllm/distributed/kv_events.py). The subscriber's
//! DEALER sends `["", start_seq]` and reads `["", topic, seq, payload]` (older vLLM and SGLang send no
//! topic frame) until the end marker, sequence −1. Each batch goes to the caller (the subscriber applies
//! it); a frame that does not parse is counted.
//!
//! Bounded as llm-d bounds it (llm-d/llm-d-router:pkg/kvevents/zmq_subscriber.go): 2 s to connect and
//! between frames, 2 minutes in all, a process-wide cap on concurrent replays.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::time::{timeout, Instant};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::frames::{parse_replay, replay_request, ReplayMessage};

const IDLE: Duration = Duration::from_secs(2);
const TOTAL: Duration = Duration::from_secs(120);

/// Why a replay did not complete.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("replay socket: {0}")]
    Socket(#[from] zeromq::ZmqError),
    #[error("replay timed out")]
    Timeout,
    #[error("replay limiter closed")]
    Closed,
}

/// Asks `address` for every buffered batch from `from` on and hands each to `batch` (topic, seq, payload);
/// `malformed` is called for each frame that is not a replay message.
pub(crate) async fn replay(
    address: &str,
    permits: &Arc<Semaphore>,
    from: u64,
    mut batch: impl FnMut(&[u8], u64, &[u8]),
    mut malformed: impl FnMut(),
) -> Result<(), ReplayError> {
    let _permit = permits.acquire().await.map_err(|_| ReplayError::Closed)?;
    let mut socket = DealerSocket::new();
    timeout(IDLE, socket.connect(address)).await.map_err(|_| ReplayError::Timeout)??;
    let [delimiter, start] = replay_request(from);
    let mut request = ZmqMessage::from(Bytes::from(delimiter));
    request.push_back(Bytes::from(start));
    socket.send(request).await?;
    let deadline = Instant::now() + TOTAL;
    loop {
        let wait = IDLE.min(deadline.saturating_duration_since(Instant::now()));
        let message = timeout(wait, socket.recv()).await.map_err(|_| ReplayError::Timeout)??;
        let frames: Vec<Bytes> = message.into_vec();
        let parts: Vec<&[u8]> = frames.iter().map(Bytes::as_ref).collect();
        match parse_replay(&parts) {
            Ok(ReplayMessage::End) => return Ok(()),
            Ok(ReplayMessage::Batch { topic, seq, payload }) => batch(topic, seq, payload),
            Err(_) => malformed(),
        }
    }
}
