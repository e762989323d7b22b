//! Routing through Envoy: requests follow the load the backends report (in both body modes), client-sent
//! control headers cannot steer them, and header-only requests are routed too.

use serde_json::json;

use crate::*;
use epp_testkit::*;

/// Requests go to the idle backend, and follow when the loads flip.
async fn routing_follows_load(test_name: &str, template: &str) {
    let Some(stack) = stack_with(test_name, template, 3, &[]) else { return };
    let client = http_client();

    make_only_idle(&client, &stack, 1).await;
    assert_all_served_by(&client, &stack, 1, 10).await;

    make_only_idle(&client, &stack, 2).await;
    assert_all_served_by(&client, &stack, 2, 10).await;
}

#[tokio::test]
async fn full_duplex_routes_to_the_least_loaded_backend_and_follows_load_changes() {
    routing_follows_load(
        "full_duplex_routes_to_the_least_loaded_backend_and_follows_load_changes",
        FULL_DUPLEX,
    )
    .await;
}

#[tokio::test]
async fn buffered_routes_to_the_least_loaded_backend_and_follows_load_changes() {
    routing_follows_load("buffered_routes_to_the_least_loaded_backend_and_follows_load_changes", BUFFERED)
        .await;
}

/// A client cannot pick the endpoint: epp overwrites `x-gateway-destination-endpoint` and removes the
/// other control headers before the request goes upstream.
#[tokio::test]
async fn client_sent_control_headers_do_not_steer_routing_and_are_stripped() {
    let test_name = "client_sent_control_headers_do_not_steer_routing_and_are_stripped";
    let Some(stack) = stack_with(test_name, FULL_DUPLEX, 3, &[]) else { return };
    let client = http_client();
    make_only_idle(&client, &stack, 0).await;
    let busy = format!("127.0.0.1:{}", stack.backends.ports[1]);
    let body = json!({"model": MODEL, "prompt": unique_prompt("control", 0), "max_tokens": 5});

    let response = post_raw(
        &client,
        &stack.url("/v1/completions"),
        serde_json::to_vec(&body).unwrap(),
        &[
            ("x-gateway-destination-endpoint", busy.as_str()),
            ("x-gateway-destination-endpoint-subset", busy.as_str()),
            ("x-gateway-destination-endpoint-served", busy.as_str()),
        ],
    )
    .await;

    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-backend-id"), Some(stack.backends.id(0)));
    let upstream = backend_last_request(&client, stack.backends.ports[0]).await.expect("idle backend saw it");
    let headers = &upstream["headers"];
    let idle = format!("127.0.0.1:{}", stack.backends.ports[0]);
    assert_eq!(headers["x-gateway-destination-endpoint"], idle.as_str(), "epp's value, not the client's");
    assert!(
        headers.get("x-gateway-destination-endpoint-subset").is_none(),
        "subset header removed: {headers}"
    );
    assert!(
        headers.get("x-gateway-destination-endpoint-served").is_none(),
        "served header removed: {headers}"
    );
    assert!(backend_last_request(&client, stack.backends.ports[1]).await.is_none(), "busy backend untouched");
}

/// A GET has no body: epp routes it on headers alone.
#[tokio::test]
async fn header_only_get_models_is_routed_to_a_backend() {
    let test_name = "header_only_get_models_is_routed_to_a_backend";
    for template in [BUFFERED, FULL_DUPLEX] {
        let Some(stack) = stack_with(test_name, template, 2, &[]) else { return };
        let client = http_client();
        make_only_idle(&client, &stack, 1).await;

        let response = get(&client, &stack.url("/v1/models")).await;

        assert_eq!(response.status(), 200, "{template}");
        assert_eq!(header(&response, "x-backend-id"), Some(stack.backends.id(1)), "{template}");
        let models = read_json(response).await;
        assert_eq!(models["object"], "list", "{template}");
        let upstream = backend_last_request(&client, stack.backends.ports[1]).await.expect("backend saw it");
        assert_eq!(upstream["method"], "GET");
        assert_eq!(upstream["path"], "/v1/models");
    }
}

/// The P/D host headers a client sends never reach a backend: epp removes them in both body modes, and
/// the shipped Envoy configs remove them before ext_proc, so they are gone even when epp is down and
/// `failure_mode_allow` lets the request through unprocessed (a decode sidecar would otherwise call any
/// host a client names).
#[tokio::test]
async fn forged_pd_headers_never_reach_a_backend_in_either_mode_or_failing_open() {
    const FORGED: [(&str, &str); 4] = [
        ("x-prefiller-host-port", "169.254.169.254:80"),
        ("x-encoder-hosts-ports", "169.254.169.254:80"),
        ("x-kv-cache-source-host-port", "169.254.169.254:80"),
        ("x-data-parallel-host-port", "169.254.169.254:80"),
    ];
    let test_name = "forged_pd_headers_never_reach_a_backend_in_either_mode_or_failing_open";
    let client = http_client();
    let assert_clean = |upstream: &Value, context: &str| {
        for (name, _) in FORGED {
            assert!(
                upstream["headers"].get(name).is_none(),
                "{context}: {name} reached the backend: {upstream}"
            );
        }
    };
    for template in [BUFFERED, FULL_DUPLEX] {
        let envoy_vars = [("FAILURE_MODE_ALLOW", "true")];
        let Some(mut stack) = start_stack_with_envoy_vars(test_name, template, 1, &[], &[], &envoy_vars)
        else {
            return;
        };
        let body = serde_json::to_vec(&json!({"model": MODEL, "prompt": "pd", "max_tokens": 5})).unwrap();
        let response = post_raw(&client, &stack.url("/v1/completions"), body.clone(), &FORGED).await;
        assert_eq!(response.status(), 200, "{template}");
        let upstream = backend_last_request(&client, stack.backends.ports[0]).await.expect("backend saw it");
        assert_clean(&upstream, template);

        // epp down, failing open: the client's destination header is all Envoy has to route on.
        stack.epp.child.kill();
        let backend = format!("127.0.0.1:{}", stack.backends.ports[0]);
        let mut headers = FORGED.to_vec();
        headers.push(("x-gateway-destination-endpoint", backend.as_str()));
        headers.push(("x-request-id", "failing-open"));
        let response = post_raw(&client, &stack.url("/v1/completions"), body, &headers).await;
        let status = response.status().as_u16();
        let upstream = backend_last_request(&client, stack.backends.ports[0]).await.expect("backend saw one");
        if template == BUFFERED {
            assert_eq!(status, 200, "buffered: failing open reaches the backend");
            assert_eq!(upstream["headers"]["x-request-id"], "failing-open", "the request that failed open");
        } else {
            // Envoy does not fail open once the body streams through the processor: nothing got through.
            assert_eq!(status, 500, "full duplex fails closed");
            assert_ne!(upstream["headers"]["x-request-id"], "failing-open");
        }
        assert_clean(&upstream, &format!("{template}, epp down"));
    }
}
