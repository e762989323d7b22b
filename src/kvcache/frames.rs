//! The ZMQ multipart framing around KV-event batches (vllm-project/vllm:vllm/distributed/kv_events.py).
//!
//! - **Live** (PUB → SUB): `[topic, seq, payload]`; `seq` is 8 bytes big-endian, monotonic per publisher
//!   from 0. The topic is vLLM's `--kv-events-config` `topic`, `kv@<pod-ip>:<port>@<model>` by llm-d's
//!   convention, whose last segment names the model.
//! - **Replay** (DEALER → ROUTER): the client sends `["", seq]` and reads `["", topic, seq, payload]` for
//!   every buffered batch from `seq` on, then the end marker whose `seq` is −1. Older vLLM and SGLang omit
//!   the topic frame (`["", seq, payload]`): both forms are accepted (llm-d accepts only the first).

/// `seq` of the replay's end marker: −1 as a signed 8-byte big-endian integer.
pub const REPLAY_END_SEQ: u64 = u64::MAX;

/// A live message, borrowed from its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveMessage<'a> {
    pub topic: &'a [u8],
    pub seq: u64,
    pub payload: &'a [u8],
}

/// One message of a replay stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayMessage<'a> {
    /// A buffered batch; `topic` is empty where the publisher sends none.
    Batch { topic: &'a [u8], seq: u64, payload: &'a [u8] },
    /// The publisher has sent everything it buffered.
    End,
}

/// Why a multipart message is not a KV-event message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("{0} frames (a live message has 3: topic, seq, payload)")]
    LiveFrameCount(usize),
    #[error("{0} frames (a replayed message has 3 or 4: empty, [topic,] seq, payload)")]
    ReplayFrameCount(usize),
    #[error("the replay message does not start with an empty delimiter frame")]
    NoDelimiter,
    #[error("sequence frame of {0} bytes (8 expected)")]
    SeqLength(usize),
}

fn seq(frame: &[u8]) -> Result<u64, FrameError> {
    let bytes: [u8; 8] = frame.try_into().map_err(|_| FrameError::SeqLength(frame.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

/// The request that asks a publisher's replay socket for every batch from `start_seq` on.
pub fn replay_request(start_seq: u64) -> [Vec<u8>; 2] {
    [Vec::new(), start_seq.to_be_bytes().to_vec()]
}

/// Parses a live message.
pub fn parse_live<'a>(frames: &[&'a [u8]]) -> Result<LiveMessage<'a>, FrameError> {
    match *frames {
        [topic, seq_frame, payload] => Ok(LiveMessage { topic, seq: seq(seq_frame)?, payload }),
        _ => Err(FrameError::LiveFrameCount(frames.len())),
    }
}

/// Parses a message read from a replay (DEALER) socket.
pub fn parse_replay<'a>(frames: &[&'a [u8]]) -> Result<ReplayMessage<'a>, FrameError> {
    let (delimiter, rest) = frames.split_first().ok_or(FrameError::ReplayFrameCount(0))?;
    if !delimiter.is_empty() {
        return Err(FrameError::NoDelimiter);
    }
    let (topic, seq_frame, payload) = match *rest {
        [topic, seq_frame, payload] => (topic, seq_frame, payload),
        [seq_frame, payload] => (&[][..], seq_frame, payload),
        _ => return Err(FrameError::ReplayFrameCount(frames.len())),
    };
    match seq(seq_frame)? {
        REPLAY_END_SEQ => Ok(ReplayMessage::End),
        seq => Ok(ReplayMessage::Batch { topic, seq, payload }),
    }
}

/// The model a topic names: its last `@`-separated segment (`kv@10.0.0.1:8000@meta-llama/Llama-3.1-8B`),
/// or `None` for a topic without one.
pub fn topic_model(topic: &[u8]) -> Option<&str> {
    let topic = std::str::from_utf8(topic).ok()?;
    let mut segments = topic.split('@');
    let _prefix = segments.next()?;
    let _address = segments.next()?;
    let model = segments.collect::<Vec<_>>().join("@");
    (!model.is_empty()).then(|| &topic[topic.len() - model.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQ_6: [u8; 8] = [0, 0, 0, 0, 0, 0, 0, 6];

    #[test]
    fn live_messages_have_three_frames() {
        let message = parse_live(&[b"kv-events", &SEQ_6, b"\x93"]).unwrap();
        assert_eq!(message, LiveMessage { topic: b"kv-events", seq: 6, payload: b"\x93" });
        assert_eq!(parse_live(&[&SEQ_6, b"\x93"]), Err(FrameError::LiveFrameCount(2)));
        assert_eq!(parse_live(&[b"t", b"\x06", b"\x93"]), Err(FrameError::SeqLength(1)));
    }

    #[test]
    fn replays_with_and_without_the_topic_frame() {
        let with_topic = parse_replay(&[b"", b"kv@a@m", &SEQ_6, b"\x93"]).unwrap();
        assert_eq!(with_topic, ReplayMessage::Batch { topic: b"kv@a@m", seq: 6, payload: b"\x93" });
        let without = parse_replay(&[b"", &SEQ_6, b"\x93"]).unwrap();
        assert_eq!(without, ReplayMessage::Batch { topic: b"", seq: 6, payload: b"\x93" });
        let end = (-1i64).to_be_bytes();
        assert_eq!(parse_replay(&[b"", b"", &end, b""]), Ok(ReplayMessage::End));
        assert_eq!(parse_replay(&[b"", &end, b""]), Ok(ReplayMessage::End));
        assert_eq!(parse_replay(&[b"x", &SEQ_6, b""]), Err(FrameError::NoDelimiter));
        assert_eq!(parse_replay(&[]), Err(FrameError::ReplayFrameCount(0)));
        assert_eq!(parse_replay(&[b""]), Err(FrameError::ReplayFrameCount(1)));
        assert_eq!(replay_request(6), [Vec::new(), SEQ_6.to_vec()]);
    }

    #[test]
    fn the_topic_names_the_model() {
        assert_eq!(topic_model(b"kv@10.0.0.1:8000@meta-llama/Llama-3.1-8B"), Some("meta-llama/Llama-3.1-8B"));
        assert_eq!(topic_model(b"kv@10.0.0.1:8000@org@model"), Some("org@model"));
        assert_eq!(topic_model(b"kv-events"), None);
        assert_eq!(topic_model(b"kv@10.0.0.1:8000@"), None);
        assert_eq!(topic_model(b"\xff@a@b"), None);
    }
}
