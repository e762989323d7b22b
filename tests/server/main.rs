//! The real epp server over loopback sockets, no Kubernetes: the ext_proc protocol and its request and
//! response paths driven as Envoy drives them (gRPC client in the test), flow control, the exposition and
//! its bounds, the route probe (also through a real Envoy), and the operational surface (health, drain).
//! One test binary for all of them, so the product is linked once; each module says what it covers.

#[path = "../grpc_support/mod.rs"]
mod grpc_support;

mod extproc_protocol;
mod extproc_request;
mod extproc_response;
mod flow_control;
mod metrics_bounds;
mod metrics_exposition;
mod metrics_port_tls;
mod route_probe;
mod server_ops;
