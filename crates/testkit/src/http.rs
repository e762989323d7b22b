//! Async HTTP helpers for tests (reqwest, built without its `json` feature, so bodies go through
//! serde_json by hand), plus helpers for epp-test-backend's admin and debug endpoints.
//!
//! They panic on transport errors on purpose: in a test an unreachable process is a failure, and the
//! panic message names the URL.

use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

/// A client that ignores proxy environment variables (tests only talk to 127.0.0.1).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("build reqwest client")
}

/// POSTs `body` as JSON.
pub async fn post_json(client: &reqwest::Client, url: &str, body: &Value) -> reqwest::Response {
    post_raw(client, url, serde_json::to_vec(body).expect("serialize JSON"), &[]).await
}

/// POSTs exactly these bytes (content-type application/json) with extra `headers`.
pub async fn post_raw(
    client: &reqwest::Client,
    url: &str,
    body: impl Into<reqwest::Body>,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client.post(url).header(CONTENT_TYPE, "application/json").body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

pub async fn get(client: &reqwest::Client, url: &str) -> reqwest::Response {
    client.get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// The body of `response` parsed as JSON (panics with the raw body if it is not JSON).
pub async fn read_json(response: reqwest::Response) -> Value {
    let url = response.url().to_string();
    let bytes = response.bytes().await.unwrap_or_else(|e| panic!("read body of {url}: {e}"));
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{url}: body is not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
}

pub async fn read_text(response: reqwest::Response) -> String {
    let url = response.url().to_string();
    response.text().await.unwrap_or_else(|e| panic!("read body of {url}: {e}"))
}

/// GETs `url`, asserts 200 and returns the JSON body.
pub async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    let response = get(client, url).await;
    assert_eq!(response.status(), 200, "GET {url}");
    read_json(response).await
}

/// A response header as a string, if present and valid UTF-8.
pub fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_string)
}

/// The `data:` payloads of a server-sent-events body, in order (`[DONE]` included).
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines().filter_map(|line| line.strip_prefix("data:")).map(|data| data.trim().to_string()).collect()
}

/// A response's JSON object that carries `usage`: the whole body, or a stream's last chunk before `[DONE]`
/// (vLLM sends it with no choices; llama.cpp puts a streamed completion's usage on its finishing chunk).
/// Panics, naming the body, when there is none.
pub fn usage_object(body: &str, streamed: bool) -> Value {
    let object: Value = if streamed {
        let events = sse_data(body);
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "the stream ends with [DONE]: {body}");
        let last_chunk = &events[events.len().saturating_sub(2)];
        serde_json::from_str(last_chunk).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    } else {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    };
    assert!(object["usage"].is_object(), "no usage: {body}");
    object
}

/// Sets the load an epp-test-backend reports in /metrics (partial update), e.g.
/// `json!({"waiting": 3, "running": 1, "kv": 0.5})`; also `block_size`, `num_gpu_blocks`, `max_lora`,
/// `running_lora` and `waiting_lora` (lists of adapter names). Returns the backend's settings.
pub async fn set_backend_load(client: &reqwest::Client, backend_port: u16, load: &Value) -> Value {
    let url = format!("http://127.0.0.1:{backend_port}/admin/metrics");
    let response = post_json(client, &url, load).await;
    assert_eq!(response.status(), 200, "POST {url} {load}");
    read_json(response).await
}

/// What the backend last received on `/v1/*`: `{method, path, headers, body, body_len, request_count}`,
/// or `None` if it has received nothing yet.
pub async fn backend_last_request(client: &reqwest::Client, backend_port: u16) -> Option<Value> {
    let url = format!("http://127.0.0.1:{backend_port}/debug/last-request");
    let response = get(client, &url).await;
    if response.status() == 404 {
        return None;
    }
    assert_eq!(response.status(), 200, "GET {url}");
    Some(read_json(response).await)
}

/// A backend's /metrics text, as epp scrapes it.
pub async fn backend_metrics(client: &reqwest::Client, backend_port: u16) -> String {
    read_text(get(client, &format!("http://127.0.0.1:{backend_port}/metrics")).await).await
}
