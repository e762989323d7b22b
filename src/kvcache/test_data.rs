//! The real vLLM 0.32 KV-event payloads the kvcache tests decode (tests/fixtures/vllm-real-kv-events.txt:
//! each payload in hex, then as vLLM's own decoder printed it).

/// Each captured payload's bytes, with the JSON line that follows it.
pub(crate) fn real_vllm_frames() -> Vec<(Vec<u8>, serde_json::Value)> {
    let text = include_str!("../../tests/fixtures/vllm-real-kv-events.txt");
    let mut frames = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(hex) = line.strip_prefix("# payload hex: ") {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            let json = serde_json::from_str(lines.next().expect("the JSON line")).expect("JSON");
            frames.push((bytes, json));
        }
    }
    frames
}

/// The captured payloads' bytes alone.
pub(crate) fn real_vllm_payloads() -> Vec<Vec<u8>> {
    real_vllm_frames().into_iter().map(|(payload, _)| payload).collect()
}
