//! The real-format model-server `/metrics` pages the telemetry tests parse (`tests/fixtures/`, captured
//! from vLLM and llama.cpp; shared with the simulator's exposition test).

/// A fixture page by file name, compiled in so the tests need no working directory.
pub(crate) fn sample_page(name: &str) -> Vec<u8> {
    match name {
        "vllm-v1-metrics.txt" => include_bytes!("../../tests/fixtures/vllm-v1-metrics.txt").to_vec(),
        "vllm-v0-metrics-excerpt.txt" => {
            include_bytes!("../../tests/fixtures/vllm-v0-metrics-excerpt.txt").to_vec()
        }
        "llamacpp-metrics.txt" => include_bytes!("../../tests/fixtures/llamacpp-metrics.txt").to_vec(),
        other => panic!("no fixture page {other} in tests/fixtures"),
    }
}
