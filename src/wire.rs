//! The wire contract's names, in one place: the headers and Envoy metadata keys through which the
//! gateway, clients and epp talk. Each is the Go EPP's, so a gateway configured for it works with epp
//! unchanged (kubernetes-sigs/gateway-api-inference-extension:pkg/epp/metadata/consts.go). This module imports nothing: every layer may use it.

/// Envoy dynamic-metadata namespace of the routing answer (read by the gateway's load balancer).
pub const DESTINATION_NAMESPACE: &str = "envoy.lb";
/// The chosen `ip:port[,fallbacks]`: a request header upstream and a key in [`DESTINATION_NAMESPACE`].
pub const DESTINATION_KEY: &str = "x-gateway-destination-endpoint";
/// Per-endpoint scores of the decision (with `--emit-endpoint-scores`), in [`DESTINATION_NAMESPACE`].
pub const SCORES_KEY: &str = "x-gateway-destination-endpoint-scores";
/// The endpoint Envoy reports it actually served the request from, in [`DESTINATION_NAMESPACE`].
pub const SERVED_KEY: &str = "x-gateway-destination-endpoint-served";
/// Fallback endpoints, a header some gateways and older EPPs use; epp lists fallbacks in
/// [`DESTINATION_KEY`] itself, so a client copy is only ever a steering attempt.
pub const FALLBACK_KEY: &str = "x-gateway-destination-endpoint-fallback";
/// Metadata namespace and key of the gateway's subset hint (which endpoints a request may use).
pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
pub const SUBSET_KEY: &str = "x-gateway-destination-endpoint-subset";

/// Headers a client must not be able to set: they steer routing, so epp removes them before the request
/// goes upstream (the Go EPP only avoids echoing them; they still reached the model server).
pub const CONTROL_HEADERS: &[&str] = &[DESTINATION_KEY, SERVED_KEY, SUBSET_KEY, SCORES_KEY, FALLBACK_KEY];

/// P/D disaggregation (llm-d/llm-d-router:pkg/common/routing/common.go): the prefill pod's `ip:port`, which
/// the decode pod's sidecar calls for the prefill leg.
pub const PREFILLER_HEADER: &str = "x-prefiller-host-port";
/// The encode pods' `ip:port` list (E/P/D).
pub const ENCODERS_HEADER: &str = "x-encoder-hosts-ports";
/// A peer holding more of the prompt's cache, for the sidecar to pull from.
pub const KV_CACHE_SOURCE_HEADER: &str = "x-kv-cache-source-host-port";
/// Data-parallel rank selection by port (deprecated upstream).
pub const DATA_PARALLEL_HEADER: &str = "x-data-parallel-host-port";
/// Headers that name hosts a decode sidecar will call: epp removes every client copy on every request,
/// and sets the ones its own decision needs.
pub const PD_HEADERS: &[&str] =
    &[PREFILLER_HEADER, ENCODERS_HEADER, KV_CACHE_SOURCE_HEADER, DATA_PARALLEL_HEADER];
/// RFC 7240 `Prefer`; `if-available` asks for a decode pod only if its cache holds the prompt (else 412),
/// llm-d's conditional decode.
pub const PREFER_HEADER: &str = "prefer";

/// Why epp refused a request (llm-d/llm-d-router:pkg/common/error/error.go), on every 429 and 503 it
/// answers itself: `rejected-saturated`, `rejected-no-endpoints`, `rejected-ttl-expired`,
/// `rejected-shutting-down`.
pub const DROPPED_REASON_HEADER: &str = "x-llm-d-request-dropped-reason";

/// The request id; epp generates one (and sets it upstream) when the client sent none.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The InferenceObjective name, mapped to a priority by the `objectives` config.
pub const OBJECTIVE_HEADER: &str = "x-gateway-inference-objective";
/// The flow-control fairness id.
pub const FAIRNESS_HEADER: &str = "x-gateway-inference-fairness-id";
/// The fairness id of a request that names none.
pub const DEFAULT_FAIRNESS_ID: &str = "default-flow";
/// The model to send the request to instead of the body's `model`.
pub const MODEL_REWRITE_HEADER: &str = "x-gateway-model-name-rewrite";
/// The conformance tests' endpoint selection (`header-based-testing-filter`).
pub const TEST_SELECTION_HEADER: &str = "test-epp-endpoint-selection";
