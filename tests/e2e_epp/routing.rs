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
    for template in [FULL_DUPLEX, BUFFERED] {
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
