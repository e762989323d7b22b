//! Hand-made starting inputs for each target: real vLLM pages, the shipped configs, requests of every API,
//! SSE and JSON responses, and the ext_proc sequences Envoy sends in both body modes (plus the broken ones
//! the protocol checks refuse). `epp-fuzz-seeds DIR` writes them as `DIR/<target>/seed-NNN`, where
//! libFuzzer starts from them; the replay test runs them too.

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request as Msg, HttpHeaders, ProcessingRequest,
};
use prost::Message;

use crate::frames::*;

const VLLM_V1: &[u8] = include_bytes!("../../../tests/fixtures/vllm-v1-metrics.txt");
const VLLM_V0: &[u8] = include_bytes!("../../../tests/fixtures/vllm-v0-metrics-excerpt.txt");
const CONFIGS: &[&str] = &[
    epp::config::DEFAULT_CONFIG_YAML,
    include_str!("../../../config/conformance.yaml"),
    include_str!("../../../config/default.yaml"),
    include_str!("../../../config/flow-control-autoscaling.yaml"),
    include_str!("../../../config/flow-control.yaml"),
    include_str!("../../../config/gie-integration.yaml"),
    include_str!("../../../config/optimized-baseline.yaml"),
    include_str!("../../../config/static-endpoints.yaml"),
    include_str!("../../../config/weighted-random.yaml"),
];

/// The seeds of the target named `target` (empty for an unknown name).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "metrics_text" => metrics_text(),
        "openai_request" => openai_request(),
        "sse_usage" => sse_usage(),
        "config_loader" => CONFIGS.iter().map(|c| c.as_bytes().to_vec()).collect(),
        "extproc_stream" => extproc_stream(),
        "kv_events" => kv_events(),
        "chat_template" => chat_template(),
        "peer_datagram" => peer_datagram(),
        "byte_words" => byte_words(),
        _ => Vec::new(),
    }
}

/// Chat-like texts for both pre-tokenizers (the first byte picks): contractions, digits, runs of spaces
/// before words and line ends, an added token, accented, CJK and emoji text.
fn byte_words() -> Vec<Vec<u8>> {
    let texts = [
        "Hello, world! It's 2026; we've 3,141 items.",
        "<|im_end|>\nsystem\n  You are terse.  \n\n<|im_end|>user\n caf\u{e9} \u{4e2d}\u{6587} \u{1f35c}\t x=y+1 \r\n",
        "DON'T   stop 'til 12345 the   thing  \n",
    ];
    texts.iter().flat_map(|t| [0u8, 1].map(|pick| [&[pick][..], t.as_bytes()].concat())).collect()
}

/// A placement (IPv4 and IPv6) and a first-token message.
fn peer_datagram() -> Vec<Vec<u8>> {
    use epp::kvcache::{encode_peer, PeerMessage};
    let messages = [
        PeerMessage::Placed {
            dispatch: 7,
            endpoint: ([10, 0, 0, 1], 8000).into(),
            keys: vec![1, u64::MAX, 3],
        },
        PeerMessage::Placed {
            dispatch: 8,
            endpoint: "[fd00::1]:8000".parse().unwrap_or(([0; 4], 0).into()),
            keys: vec![],
        },
        PeerMessage::Served { dispatch: 7 },
    ];
    messages
        .iter()
        .map(|m| {
            let mut out = Vec::new();
            encode_peer(m, 42, 9, &mut out);
            out
        })
        .collect()
}

/// Chat bodies of every shape the in-process template renders or leaves to render, for each template.
fn chat_template() -> Vec<Vec<u8>> {
    let bodies = [
        r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":" a b "},{"type":"text","text":""}],"name":"ann"}],"add_generation_prompt":false}"#,
        r#"{"messages":[{"role":"assistant","content":null},{"role":"user","content":"x y"}],"tools":null}"#,
        r#"{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}"#,
        r#"{"messages":[{"role":"tool","content":"r","tool_call_id":"1"}]}"#,
        r#"{"messages":[]}"#,
    ];
    (0..4u8)
        .flat_map(|selector| bodies.iter().map(move |body| [&[selector][..], body.as_bytes()].concat()))
        .collect()
}

/// Real vLLM 0.32 batches (tests/fixtures/vllm-real-kv-events.txt), as payloads and as live and replayed
/// messages.
fn kv_events() -> Vec<Vec<u8>> {
    let text = include_str!("../../../tests/fixtures/vllm-real-kv-events.txt");
    let payloads = text.lines().filter_map(|line| line.strip_prefix("# payload hex: ")).map(|hex| {
        (0..hex.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Vec<u8>>()
    });
    let mut seeds = Vec::new();
    for (seq, payload) in payloads.enumerate() {
        let seq = (seq as u64).to_be_bytes();
        seeds.push(crate::kv_events::join_frames(&[b"kv@127.0.0.1:8000@smol", &seq, &payload]));
        seeds.push(crate::kv_events::join_frames(&[b"", &seq, &payload]));
        seeds.push([&[0u8][..], &payload].concat());
    }
    seeds
}

fn metrics_text() -> Vec<Vec<u8>> {
    vec![
        VLLM_V1.to_vec(),
        VLLM_V0.to_vec(),
        b"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{engine=\"0\"} 3\nsglang:token_usage 0.5\n"
            .to_vec(),
        b"vllm:num_requests_waiting{a=\"x\\\"y\\\\z\\n\"} NaN 1700000000000\nvllm:kv_cache_usage_perc +Inf\n"
            .to_vec(),
        b"vllm:lora_requests_info{running_lora_adapters=\"a,b\",waiting_lora_adapters=\"\",max_lora=\"2\"} 1\n"
            .to_vec(),
    ]
}

fn with_path(selector: u8, body: &str) -> Vec<u8> {
    let mut v = vec![selector];
    v.extend_from_slice(body.as_bytes());
    v
}

fn openai_request() -> Vec<Vec<u8>> {
    vec![
        with_path(0, r#"{"model":"m","prompt":"hello world","max_tokens":16,"stream":true}"#),
        with_path(0, r#"{"model":"m","prompt":[1,2,3],"cache_salt":"s"}"#),
        with_path(
            1,
            r#"{"model":"llama\/3\u00e9","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":5}"#,
        ),
        with_path(2, r#"{"model":"e","input":["a","b"]}"#),
        with_path(3, r#"{"model":"r","input":"x","max_output_tokens":3}"#),
        with_path(4, r#"{"model":"c","items":[{"type":"message"}]}"#),
        with_path(1, r#"{"model":"\ud800","messages":[]}"#),
        with_path(5, r#"  {"model" : "m" , "messages" : [ {"role":"system","content":"s"} ] }  "#),
        // Strings longer than the parse's 64-byte blocks, escapes and backslash runs across their edges.
        with_path(
            1,
            &format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"{}\\\"\u00e9\n{}"}}],"x":[-0.5e+3,true,null,{{}}]}}"#,
                "a".repeat(59),
                "\\u00e9\\\\".repeat(40)
            ),
        ),
        with_path(0, &format!(r#"{{"model":"m","prompt":"{}"}}"#, "b\\\\".repeat(70))),
    ]
}

fn sse_usage() -> Vec<Vec<u8>> {
    let sse = concat!(
        "data: {\"id\":\"1\",\"model\":\"served-model\",\"choices\":[{\"text\":\"a\"}]}\n\n",
        "data: {\"id\":\"1\",\"model\":\"served-model\",\"choices\":[],",
        "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\r\n\r\n",
        "data: [DONE]\n\n"
    );
    let json = r#"{"model":"served-model","usage":{"input_tokens":5,"output_tokens":2e30,"input_tokens_details":{"cached_tokens":-1}}}"#;
    let framed = |flags: u8, cuts: &[u8], body: &str| {
        let mut v = vec![flags, cuts.len() as u8];
        v.extend_from_slice(cuts);
        v.extend_from_slice(body.as_bytes());
        v
    };
    vec![
        framed(1 | 4, &[40, 90, 200], sse),
        framed(2, &[128], sse),
        framed(4, &[10, 100], json),
        framed(0, &[], json),
    ]
}

const COMPLETION: &[u8] = br#"{"model":"m","prompt":"hello world","max_tokens":4}"#;
const CHAT_STREAM: &[u8] = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn post(path: &str) -> Vec<(&str, &str)> {
    vec![(":method", "POST"), (":path", path), ("content-type", "application/json"), ("x-request-id", "r1")]
}

fn duplex() -> Frames {
    // FULL_DUPLEX_STREAMED (4) both ways.
    Frames::new().frame(CONFIG, &[4, 4])
}

fn extproc_stream() -> Vec<Vec<u8>> {
    let ok = [(":status", "200"), ("content-type", "application/json")];
    let sse = [(":status", "200"), ("content-type", "text/event-stream")];
    let usage = br#"{"model":"m","usage":{"prompt_tokens":3,"completion_tokens":4}}"#;
    let raw_headers = ProcessingRequest {
        request: Some(Msg::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap {
                headers: vec![HeaderValue {
                    key: ":path".into(),
                    raw_value: b"/v1/models".to_vec(),
                    ..Default::default()
                }],
            }),
            end_of_stream: true,
            ..Default::default()
        })),
        ..Default::default()
    }
    .encode_to_vec();
    let sequences = vec![
        // A completion, routed and answered with usage.
        duplex()
            .headers(REQUEST_HEADERS, 0, &post("/v1/completions"))
            .flagged(REQUEST_BODY, END_OF_STREAM, COMPLETION)
            .headers(RESPONSE_HEADERS, 0, &ok)
            .flagged(RESPONSE_BODY, END_OF_STREAM, usage),
        // A streamed chat in two body chunks, SSE back, served-endpoint metadata.
        duplex()
            .headers(REQUEST_HEADERS, 0, &post("/v1/chat/completions"))
            .flagged(REQUEST_BODY, 0, &CHAT_STREAM[..20])
            .flagged(REQUEST_BODY, END_OF_STREAM, &CHAT_STREAM[20..])
            .flagged(METADATA, SERVED, b"10.0.0.1:8000")
            .headers(RESPONSE_HEADERS, 0, &sse)
            .flagged(RESPONSE_BODY, 0, b"data: {\"choices\":[]}\n\n")
            .flagged(RESPONSE_BODY, END_OF_STREAM, b"data: [DONE]\n\n"),
        // BUFFERED (2) with a subset hint, a 503 back.
        Frames::new()
            .frame(CONFIG, &[2, 2])
            .headers(REQUEST_HEADERS, STRING_VALUES, &post("/v1/completions"))
            .flagged(METADATA, 0, b"10.0.0.2:8000,10.0.0.9")
            .flagged(REQUEST_BODY, END_OF_STREAM, COMPLETION)
            .headers(RESPONSE_HEADERS, END_OF_STREAM, &[(":status", "503")]),
        // Trailers end the body; response trailers end the response.
        duplex()
            .headers(REQUEST_HEADERS, 0, &post("/v1/completions"))
            .flagged(REQUEST_BODY, 0, COMPLETION)
            .frame(REQUEST_TRAILERS, &[])
            .headers(RESPONSE_HEADERS, 0, &ok)
            .flagged(RESPONSE_BODY, 0, usage)
            .frame(RESPONSE_TRAILERS, &[]),
        // A GET routed on its headers; a raw protobuf headers message.
        duplex().headers(REQUEST_HEADERS, END_OF_STREAM, &[(":method", "GET"), (":path", "/v1/models")]),
        Frames::new().frame(RAW, &raw_headers),
        // Broken: a body before headers, headers twice, garbage protobuf, a body over the limit, a bad hint.
        duplex().flagged(REQUEST_BODY, END_OF_STREAM, COMPLETION),
        duplex().headers(REQUEST_HEADERS, 0, &post("/v1/completions")).headers(
            REQUEST_HEADERS,
            0,
            &post("/v1/completions"),
        ),
        duplex().headers(REQUEST_HEADERS, 0, &post("/v1/completions")).frame(RAW, &[0xff, 0xff, 0xff]),
        duplex()
            .headers(REQUEST_HEADERS, 0, &post("/v1/completions"))
            .flagged(REQUEST_BODY, 0, &[b' '; 1500])
            .flagged(REQUEST_BODY, END_OF_STREAM, &[b' '; 1500]),
        duplex()
            .headers(REQUEST_HEADERS, 0, &post("/v1/completions"))
            .flagged(METADATA, NON_STRING_ENTRY, b"pod-a")
            .flagged(REQUEST_BODY, END_OF_STREAM, COMPLETION),
        // An empty POST body, Envoy's local reply before routing, an unknown body mode.
        duplex().headers(REQUEST_HEADERS, END_OF_STREAM, &post("/v1/completions")),
        duplex().headers(REQUEST_HEADERS, 0, &post("/v1/completions")).headers(
            RESPONSE_HEADERS,
            END_OF_STREAM,
            &[(":status", "413")],
        ),
        Frames::new().frame(CONFIG, &[5, 1]).headers(REQUEST_HEADERS, 0, &post("/v1/completions")).flagged(
            REQUEST_BODY,
            END_OF_STREAM,
            COMPLETION,
        ),
    ];
    sequences.into_iter().map(Frames::into_bytes).collect()
}
