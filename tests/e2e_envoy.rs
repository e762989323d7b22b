//! End-to-end tests through a real Envoy (installed by `make envoy`; see crates/testkit).
//!
//! Layout: harness checks first (templates render and validate, Envoy routes to epp-test-backend with no
//! epp involved), then the e2e tests through epp, which use [`epp_testkit::start_stack`]. Without Envoy the
//! tests fail (`EPP_SKIP_MISSING_TOOLS=1` skips them, printing SKIP, outside CI).

use epp_testkit::*;
use serde_json::json;

#[path = "e2e_envoy/readme_tour.rs"]
mod readme_tour;

const TEMPLATES: [&str; 4] =
    ["envoy-full-duplex.yaml", "envoy-buffered.yaml", "envoy-direct.yaml", "envoy-standby.yaml"];

// ---------------------------------------------------------------------------------------------------
// Harness checks (no epp)

#[test]
fn render_template_fills_values_and_defaults_and_leaves_comments() {
    let template = "# keep ${COMMENTED}\na: ${A}\nb: ${B:-dflt} ${A}\n";
    let rendered = render_template(template, &[("A", "1".to_string())]).unwrap();
    assert_eq!(rendered, "# keep ${COMMENTED}\na: 1\nb: dflt 1\n");
    let overridden = render_template("b: ${B:-dflt}", &[("B", "x".to_string())]).unwrap();
    assert_eq!(overridden, "b: x\n");
    assert!(render_template("a: ${MISSING}", &[]).unwrap_err().contains("MISSING"));
}

#[test]
fn envoy_templates_render_and_validate() {
    let Some(envoy) = envoy_or_skip("envoy_templates_render_and_validate") else { return };
    let names = [
        "LISTEN_PORT",
        "ADMIN_PORT",
        "EXTPROC_PORT",
        "BACKEND_PORT",
        "STANDBY_EXTPROC_PORT",
        "STANDBY_HEALTH_PORT",
    ];
    let vars: Vec<(&str, String)> = names.into_iter().map(|name| (name, free_port().to_string())).collect();
    let plaintext: Vec<(&str, String)> =
        vars.iter().cloned().chain([(PLAINTEXT_EXTPROC.0, PLAINTEXT_EXTPROC.1.to_string())]).collect();
    let dir = tempfile::tempdir().unwrap();
    // Each template as shipped (TLS to epp) and in its plaintext variant.
    let renderings = TEMPLATES.iter().flat_map(|t| [(*t, "tls", &vars), (*t, "plaintext", &plaintext)]);
    for (template, variant, vars) in renderings {
        let path = dir.path().join(format!("{variant}-{template}"));
        std::fs::write(&path, render_envoy_template(template, vars)).unwrap();
        let output = std::process::Command::new(&envoy)
            .args(["--mode", "validate", "-l", "error", "-c"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{template} ({variant}) does not validate:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Backend + Envoy (direct route): proves the harness, the backend and the plain proxy path work.
#[tokio::test]
async fn direct_envoy_proxies_completion_to_test_backend() {
    if envoy_or_skip("direct_envoy_proxies_completion_to_test_backend").is_none() {
        return;
    }
    let backends = start_test_backends(1, &[]);
    let envoy =
        start_envoy_on_free_ports("envoy-direct.yaml", &[("BACKEND_PORT", backends.ports[0].to_string())]);
    let client = http_client();
    let raw_body = r#"{"model": "food-review",  "prompt": "hello there world", "max_tokens": 5}"#;

    let response =
        post_raw(&client, &envoy.url("/v1/completions"), raw_body, &[("x-test-marker", "m1")]).await;

    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-backend-id"), Some(backends.id(0)));
    assert_eq!(header(&response, "x-backend-port"), Some(backends.ports[0].to_string()));
    let body = read_json(response).await;
    assert_eq!(body["model"], "food-review");
    assert_eq!(body["usage"], json!({"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}));
    let upstream = backend_last_request(&client, backends.ports[0]).await.expect("backend saw the request");
    assert_eq!(upstream["path"], "/v1/completions");
    assert_eq!(upstream["body"], raw_body, "body must arrive byte-for-byte");
    assert_eq!(upstream["headers"]["x-test-marker"], "m1");
}

#[tokio::test]
async fn direct_envoy_streams_sse_with_usage() {
    if envoy_or_skip("direct_envoy_streams_sse_with_usage").is_none() {
        return;
    }
    let backends = start_test_backends(1, &["--chunks", "4", "--chunk-delay-ms", "5"]);
    let envoy =
        start_envoy_on_free_ports("envoy-direct.yaml", &[("BACKEND_PORT", backends.ports[0].to_string())]);
    let client = http_client();
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true,
        "stream_options": {"include_usage": true}});

    let response = post_json(&client, &envoy.url("/v1/chat/completions"), &request).await;

    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type").as_deref(), Some("text/event-stream"));
    let events = sse_data(&read_text(response).await);
    assert_eq!(events.len(), 4 + 2, "4 content chunks, the usage chunk, [DONE]: {events:?}");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let usage_chunk: serde_json::Value = serde_json::from_str(&events[4]).unwrap();
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 4);
}

// ---------------------------------------------------------------------------------------------------
// E2E through epp: Envoy (full-duplex or buffered) -> epp -> test backends.
// Start with `let Some(stack) = start_stack("<test name>", "envoy-full-duplex.yaml", 3, &[], &[]) else
// { return };`, steer the scheduler with `set_backend_load(&client, stack.backends.ports[i], &json!(..))`
// and send requests to `stack.url("/v1/completions")`; `x-backend-id` says which backend served.

/// More requests in flight than Envoy's default circuit breaker allows a cluster (1,024): each holds an
/// ext_proc stream to epp for its whole life, so the shipped configs raise the ext_proc cluster's limit.
/// With Envoy's default, the requests past 1,024 got a 500 that epp never saw (found by the soak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_1024_requests_in_flight_are_all_served() {
    const REQUESTS: usize = 1_200;
    let name = "more_than_1024_requests_in_flight_are_all_served";
    let Some(stack) = start_stack(name, "envoy-full-duplex.yaml", 2, &[], &[]) else { return };
    let client = http_client();
    let url = stack.url("/v1/completions");
    let body =
        serde_json::to_vec(&json!({"model": "food-review", "prompt": "hello", "max_tokens": 5})).unwrap();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        // The backend holds each request long enough for all of them to be in flight at once.
        requests.spawn(async move {
            post_raw(&client, &url, body, &[("x-test-delay-ms", "5000")]).await.status()
        });
    }
    let mut statuses = std::collections::BTreeMap::new();
    while let Some(status) = requests.join_next().await {
        *statuses.entry(status.expect("request task").as_u16()).or_insert(0usize) += 1;
    }
    assert_eq!(statuses.get(&200), Some(&REQUESTS), "statuses: {statuses:?}");
}
