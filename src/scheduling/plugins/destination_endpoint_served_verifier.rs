//! `destination-endpoint-served-verifier`
//! (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/framework/plugins/requestcontrol/test/responsereceived/destination_endpoint_served_verifier.go,
//! kubernetes-sigs/gateway-api-inference-extension:conformance/tests/gateway_destination_endpoint_served.go):
//! copies the endpoint Envoy reports it served the request from into a response header, so conformance tests
//! can check that the gateway honoured the EPP's choice.

use std::sync::Arc;

use super::expect_no_params;
use crate::scheduling::{BuiltPlugin, DispatchInfo, FactoryContext, PluginError, ResponseHook};

pub(crate) const TYPE_NAME: &str = "destination-endpoint-served-verifier";

/// The response header the served endpoint is copied into.
pub(crate) const SERVED_ENDPOINT_HEADER: &str = "x-conformance-test-served-endpoint";

#[derive(Debug, Default, Clone, Copy)]
pub struct DestinationEndpointServedVerifier;

impl ResponseHook for DestinationEndpointServedVerifier {
    fn on_response_headers(
        &self,
        _info: &DispatchInfo,
        _status: Option<u16>,
        served: Option<&str>,
        set_headers: &mut Vec<(String, String)>,
    ) {
        if let Some(served) = served {
            set_headers.push((SERVED_ENDPOINT_HEADER.to_string(), served.to_string()));
        }
    }
}

pub(crate) fn factory(
    name: &str,
    params: Option<&serde_json::Value>,
    _ctx: &FactoryContext,
) -> Result<BuiltPlugin, PluginError> {
    expect_no_params(name, TYPE_NAME, params)?;
    Ok(BuiltPlugin::new(TYPE_NAME, name).response(Arc::new(DestinationEndpointServedVerifier)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::plugins::testing::*;
    use serde_json::json;

    #[test]
    fn copies_served_endpoint() {
        let info = dispatch(&endpoint(1), 1, 2);
        let mut headers = Vec::new();
        DestinationEndpointServedVerifier.on_response_headers(&info, Some(200), None, &mut headers);
        assert!(headers.is_empty());
        DestinationEndpointServedVerifier.on_response_headers(
            &info,
            Some(200),
            Some("10.0.0.1:8000"),
            &mut headers,
        );
        assert_eq!(headers, vec![(SERVED_ENDPOINT_HEADER.to_string(), "10.0.0.1:8000".to_string())]);
    }

    #[test]
    fn rejects_parameters() {
        assert_rejects(factory, json!({"header": "x"}), "header");
        assert_rejects(factory, json!(1), "parameters");
    }
}
