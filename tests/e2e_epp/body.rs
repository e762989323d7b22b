//! Bodies through Envoy and epp: forwarded byte for byte, model rewrites on both paths, large prompts,
//! bad requests answered by epp, and SSE passed through as it is produced.

use serde_json::{json, Value};

use crate::*;
use epp_testkit::*;

/// Not what serde_json would write: odd whitespace, `model` not first, an integer above 2^64.
const RAW_COMPLETION: &str = "{ \"prompt\" : \"keep   my\\tspacing\",\n  \"max_tokens\":5,\"model\" :  \
                              \"food-review\", \"seed\": 123456789012345678901234567890 }";

/// The backend that served the last request must have received exactly `expected`.
async fn assert_upstream_body(client: &reqwest::Client, port: u16, expected: &str, context: &str) -> Value {
    let upstream = backend_last_request(client, port).await.expect("backend saw the request");
    assert_eq!(upstream["body"], expected, "{context}: body must arrive byte for byte");
    assert_eq!(upstream["body_len"], expected.len(), "{context}");
    assert_content_length_matches(&upstream, expected.len(), context);
    upstream
}

/// A `content-length` that reached the backend must be the length of the body that reached it. (Envoy
/// drops it in full-duplex mode and forwards the body chunked; in buffered mode it keeps the one epp set.)
fn assert_content_length_matches(upstream: &Value, body_len: usize, context: &str) {
    let headers = &upstream["headers"];
    match headers.get("content-length").and_then(Value::as_str) {
        Some(length) => assert_eq!(length, body_len.to_string(), "{context}: upstream headers {headers}"),
        None => assert_eq!(headers["transfer-encoding"], "chunked", "{context}: upstream headers {headers}"),
    }
}

#[tokio::test]
async fn unchanged_body_arrives_byte_for_byte_in_both_modes() {
    let test_name = "unchanged_body_arrives_byte_for_byte_in_both_modes";
    for template in [FULL_DUPLEX, BUFFERED] {
        let Some(stack) = stack_with(test_name, template, 1, &[]) else { return };
        let client = http_client();

        let response = post_raw(&client, &stack.url("/v1/completions"), RAW_COMPLETION, &[]).await;

        assert_eq!(response.status(), 200, "{template}");
        assert_eq!(read_json(response).await["model"], MODEL, "{template}");
        assert_upstream_body(&client, stack.backends.ports[0], RAW_COMPLETION, template).await;
    }
}

/// `x-gateway-model-name-rewrite` changes only the model's bytes upstream; in full-duplex mode (the only
/// one where epp sees the response body) the client gets its own model name back.
#[tokio::test]
async fn model_rewrite_header_rewrites_the_request_and_restores_the_response_model() {
    let test_name = "model_rewrite_header_rewrites_the_request_and_restores_the_response_model";
    let rewritten = RAW_COMPLETION.replace("\"food-review\"", "\"other\"");
    for template in [FULL_DUPLEX, BUFFERED] {
        let Some(stack) = stack_with(test_name, template, 1, &[]) else { return };
        let client = http_client();

        let response = post_raw(
            &client,
            &stack.url("/v1/completions"),
            RAW_COMPLETION,
            &[("x-gateway-model-name-rewrite", "other")],
        )
        .await;

        assert_eq!(response.status(), 200, "{template}");
        let body = read_json(response).await;
        let upstream = assert_upstream_body(&client, stack.backends.ports[0], &rewritten, template).await;
        assert!(upstream["headers"].get("x-gateway-model-name-rewrite").is_some(), "not a control header");
        let expected_model = if template == FULL_DUPLEX { MODEL } else { "other" };
        assert_eq!(body["model"], expected_model, "{template}: {body}");

        // Streamed: every SSE event names a model, and each is restored on its own.
        let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true});
        let response = post_raw(
            &client,
            &stack.url("/v1/chat/completions"),
            serde_json::to_vec(&chat).unwrap(),
            &[("x-gateway-model-name-rewrite", "other")],
        )
        .await;
        let events = sse_data(&read_text(response).await);
        let upstream = backend_last_request(&client, stack.backends.ports[0]).await.expect("backend saw it");
        assert!(upstream["body"].as_str().is_some_and(|b| b.contains("\"model\":\"other\"")), "{upstream}");
        assert_eq!(events.len(), 5 + 1, "{template}: {events:?}");
        for event in events.iter().filter(|e| *e != "[DONE]") {
            let event: Value = serde_json::from_str(event).unwrap();
            assert_eq!(event["model"], expected_model, "{template}: {event}");
        }
    }
}

/// Envoy sends a big body in many chunks (and, in full-duplex mode, drops Content-Length and forwards it
/// chunked); epp must collect it all and send all of it on.
#[tokio::test]
async fn one_megabyte_prompt_reaches_the_backend_intact_through_full_duplex() {
    let test_name = "one_megabyte_prompt_reaches_the_backend_intact_through_full_duplex";
    let Some(stack) = stack_with(test_name, FULL_DUPLEX, 1, &[]) else { return };
    let client = http_client();
    let words: String = (0..1 << 20).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let body = serde_json::to_string(&json!({"model": MODEL, "prompt": words, "max_tokens": 5})).unwrap();

    let response = post_raw(&client, &stack.url("/v1/completions"), body.clone(), &[]).await;

    assert_eq!(response.status(), 200);
    let upstream = backend_last_request(&client, stack.backends.ports[0]).await.expect("backend saw it");
    assert_eq!(upstream["body_len"], body.len());
    assert_content_length_matches(&upstream, body.len(), "1 MB prompt");
    assert!(
        upstream["body"] == body.as_str(),
        "body differs (len {} vs {})",
        upstream["body_len"],
        body.len()
    );
}

/// With trailers, Envoy ends the request body with a trailers message instead of `end_of_stream` on the
/// last chunk (FULL_DUPLEX_STREAMED); epp must route then and keep headers → body → trailers order.
/// reqwest cannot send trailers, so this speaks HTTP/1.1 chunked encoding by hand.
#[test]
fn request_with_trailers_is_routed_and_forwarded_in_full_duplex() {
    let test_name = "request_with_trailers_is_routed_and_forwarded_in_full_duplex";
    let envoy_vars = [("HTTP1_TRAILERS", "true")];
    let Some(stack) =
        start_stack_with_envoy_vars(test_name, FULL_DUPLEX, 1, &[], &[FAST_POOL_GAUGES], &envoy_vars)
    else {
        return;
    };
    let body = format!(r#"{{"model":"{MODEL}","prompt":"a request with trailers"}}"#);
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: epp-e2e\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\nx-client-trailer: 1\r\n\r\n",
        body.len()
    );

    // Envoy's ext_proc debug log says whether it really sent a trailers message.
    assert!(stack.envoy.set_log_level("ext_proc", "debug"), "Envoy admin refused /logging");

    let response = raw_http_exchange(stack.envoy.listen_port, &request);

    let trailers_sent =
        wait_until(PROPAGATION_DEADLINE, || stack.envoy.child.logs().contains("Sending trailers message"));
    assert!(trailers_sent, "Envoy sent epp no trailers");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let backend_id = format!("x-backend-id: {}", stack.backends.id(0));
    assert!(response.to_ascii_lowercase().contains(&backend_id), "{response}");
    let (status, upstream) =
        http_get_blocking(stack.backends.ports[0], "/debug/last-request").expect("backend up");
    assert_eq!(status, 200, "backend saw no request");
    let upstream: Value = serde_json::from_str(&upstream).unwrap();
    assert_eq!(upstream["body"], body.as_str());
}

/// Writes `request` to 127.0.0.1:`port` and reads until the server closes the connection.
fn raw_http_exchange(port: u16, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to Envoy");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).expect("set read timeout");
    stream.write_all(request.as_bytes()).expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    response
}

#[tokio::test]
async fn bad_requests_are_answered_by_epp_with_400() {
    let test_name = "bad_requests_are_answered_by_epp_with_400";
    for template in [FULL_DUPLEX, BUFFERED] {
        let Some(stack) = stack_with(test_name, template, 1, &[]) else { return };
        let client = http_client();
        let cases = [
            (
                "{\"model\": \"m\", \"prompt\": ",
                "inference error: BadRequest - error unmarshaling request body",
            ),
            (
                r#"{"prompt": "no model here"}"#,
                "inference error: BadRequest - model not found in request body",
            ),
        ];
        for (request, expected) in cases {
            let response = post_raw(&client, &stack.url("/v1/completions"), request, &[]).await;

            assert_eq!(response.status(), 400, "{template}: {request}");
            assert_eq!(header(&response, "x-backend-id"), None, "{template}: answered by epp, not a backend");
            let text = read_text(response).await;
            assert!(text.starts_with(expected), "{template}: {request}: got {text:?}");
        }
        assert!(backend_last_request(&client, stack.backends.ports[0]).await.is_none(), "{template}");
    }
}

/// Reads an SSE response one body read at a time; returns the `data:` payloads of each read that had any.
async fn sse_reads(mut response: reqwest::Response) -> Vec<Vec<String>> {
    let mut reads = Vec::new();
    let mut pending = String::new();
    while let Some(bytes) = response.chunk().await.expect("read SSE chunk") {
        pending.push_str(std::str::from_utf8(&bytes).expect("SSE is UTF-8"));
        // Only complete events (ending in a blank line) count; a partial one waits for the next read.
        let Some(end) = pending.rfind("\n\n") else { continue };
        let complete: String = pending.drain(..end + 2).collect();
        let events = sse_data(&complete);
        if !events.is_empty() {
            reads.push(events);
        }
    }
    reads
}

/// epp passes each response chunk on as it arrives: the client holds the first event while the backend
/// is still producing the rest (it waits 300ms between chunks).
#[tokio::test]
async fn streamed_sse_reaches_the_client_event_by_event() {
    let test_name = "streamed_sse_reaches_the_client_event_by_event";
    for template in [FULL_DUPLEX, BUFFERED] {
        let Some(stack) = stack_with(test_name, template, 1, &["--chunks", "5", "--chunk-delay-ms", "300"])
        else {
            return;
        };
        let client = http_client();
        let request = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true,
            "stream_options": {"include_usage": true}});

        let response = post_json(&client, &stack.url("/v1/chat/completions"), &request).await;

        assert_eq!(response.status(), 200, "{template}");
        assert_eq!(header(&response, "content-type").as_deref(), Some("text/event-stream"), "{template}");
        let reads = sse_reads(response).await;
        let events: Vec<&String> = reads.iter().flatten().collect();
        assert_eq!(events.len(), 5 + 2, "{template}: 5 content chunks, usage, [DONE]: {reads:?}");
        assert_eq!(events.last().map(|e| e.as_str()), Some("[DONE]"), "{template}");
        assert!(
            !reads[0].iter().any(|e| e == "[DONE]"),
            "{template}: first read already complete: {reads:?}"
        );
        assert!(reads.len() >= 2, "{template}: the whole stream came in one read: {reads:?}");
        let first: Value = serde_json::from_str(&reads[0][0]).unwrap();
        assert_eq!(first["model"], MODEL, "{template}");
    }
}
