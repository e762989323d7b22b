//! Request-path parsing costs on the body size the Go EPP struggles with (220 KB prompts, GIE #2928:
//! ≈ 6 ms parse, 286 ms total per request). epp's budget is ≤ 2 ms for the whole parse.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use epp::request::{
    parse_request, parse_request_with_serde, rewrite_response_model, splice_model, UsageScanner,
};

const TARGET_BYTES: usize = 220 * 1024;

/// Prose with the escapes and non-ASCII text real prompts carry: quotes, backslashes, newlines, tabs,
/// `\u` escapes, accented Latin, CJK and emoji.
fn prompt_text(bytes: usize) -> String {
    const LINES: [&str; 6] = [
        "The quick brown fox jumps over the lazy dog; \\\"quoted\\\" text follows.\\n",
        "Code: fn main() { println!(\\\"{}\\\", a\\\\b); }\\n\\t- item\\n",
        "Caf\u{e9} cr\u{e8}me br\u{fb}l\u{e9}e, na\u{ef}ve r\u{e9}sum\u{e9} \\u00e9\\u00e8.\\n",
        "\u{4f60}\u{597d}\u{4e16}\u{754c}\u{ff0c}\u{8fd9}\u{662f}\u{4e00}\u{4e2a}\u{6d4b}\u{8bd5}\u{3002}\\n",
        "Emoji \u{1F600}\u{1F680} and surrogate escapes \\ud83d\\ude00 in the stream.\\n",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.\\n",
    ];
    let mut text = String::with_capacity(bytes + 128);
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(LINES[i % LINES.len()]);
        i += 1;
    }
    text
}

fn chat_body() -> Vec<u8> {
    let system = prompt_text(2 * 1024);
    let user = prompt_text(TARGET_BYTES - 2 * 1024 - 300);
    format!(
        r#"{{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":"{user}"}}],"stream":true,"stream_options":{{"include_usage":true}},"max_completion_tokens":512,"temperature":0.7,"top_p":0.95}}"#
    )
    .into_bytes()
}

fn completions_body() -> Vec<u8> {
    let prompt = prompt_text(TARGET_BYTES - 200);
    format!(r#"{{"model":"meta-llama/Llama-3.1-8B","prompt":"{prompt}","max_tokens":128,"temperature":0}}"#)
        .into_bytes()
}

/// A vLLM chat stream: 199 token chunks and a final usage chunk, then `[DONE]`.
fn sse_chunks() -> Vec<Vec<u8>> {
    let mut chunks: Vec<Vec<u8>> = (0..199)
        .map(|i| {
            format!(
                "data: {{\"id\":\"chatcmpl-8f1c2a\",\"object\":\"chat.completion.chunk\",\"created\":1739400043,\
                 \"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{{\"index\":0,\"delta\":\
                 {{\"content\":\" token{i}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            )
            .into_bytes()
        })
        .collect();
    chunks.push(
        b"data: {\"id\":\"chatcmpl-8f1c2a\",\"object\":\"chat.completion.chunk\",\"created\":1739400043,\
          \"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[],\"usage\":{\"prompt_tokens\":55000,\
          \"total_tokens\":55199,\"completion_tokens\":199}}\n\ndata: [DONE]\n\n"
            .to_vec(),
    );
    chunks
}

fn bench_parse(c: &mut Criterion) {
    let chat = chat_body();
    let completions = completions_body();
    let mut group = c.benchmark_group("parse_request");
    group.throughput(Throughput::Bytes(chat.len() as u64));
    group.bench_function("chat_220KB", |b| {
        b.iter(|| parse_request("/v1/chat/completions", black_box(&chat)).map(|p| p.prefix_span.len()));
    });
    group.throughput(Throughput::Bytes(completions.len() as u64));
    group.bench_function("completions_220KB", |b| {
        b.iter(|| parse_request("/v1/completions", black_box(&completions)).map(|p| p.prefix_span.len()));
    });
    // serde_json alone: what a body the fast walk declines costs, and what the walk replaced.
    group.throughput(Throughput::Bytes(chat.len() as u64));
    group.bench_function("chat_220KB_serde_json", |b| {
        b.iter(|| {
            parse_request_with_serde("/v1/chat/completions", black_box(&chat)).map(|p| p.prefix_span.len())
        });
    });
    group.finish();
}

fn bench_splice(c: &mut Criterion) {
    let chat = chat_body();
    let span = match parse_request("/v1/chat/completions", &chat) {
        Ok(parsed) => parsed.model_span,
        Err(e) => panic!("benchmark body must parse: {e}"),
    };
    let mut group = c.benchmark_group("splice_model");
    group.throughput(Throughput::Bytes(chat.len() as u64));
    group.bench_function("chat_220KB", |b| {
        b.iter(|| splice_model(black_box(&chat), span.clone(), "llama-3.1-8b-lora-finance").len());
    });
    group.finish();
}

fn bench_response(c: &mut Criterion) {
    let chunks = sse_chunks();
    let total: usize = chunks.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group("response_stream");
    group.throughput(Throughput::Bytes(total as u64));
    group.bench_function("usage_scanner_200_chunks", |b| {
        b.iter(|| {
            let mut scanner = UsageScanner::new();
            for chunk in &chunks {
                scanner.feed(black_box(chunk));
            }
            scanner.usage()
        });
    });
    group.bench_function("rewrite_model_200_chunks", |b| {
        b.iter(|| {
            let mut rewritten = 0;
            for chunk in &chunks {
                let out =
                    rewrite_response_model(black_box(chunk), "meta-llama/Llama-3.1-8B-Instruct", "llama");
                rewritten += out.map_or(0, |o| o.len());
            }
            rewritten
        });
    });
    group.finish();
}

criterion_group!(benches, bench_parse, bench_splice, bench_response);
criterion_main!(benches);
