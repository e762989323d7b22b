//! Where endpoints come from, through the real epp server: file discovery, and Kubernetes discovery,
//! InferenceObjective/InferenceModelRewrite, leader election and the chart's RBAC rules against the test
//! kit's fake API server (crates/testkit/src/kube_api), through the real kube-rs client. One test binary
//! for all of them, so the product is linked once; each module says what it covers.

#[path = "../discovery_support/mod.rs"]
mod discovery_support;
#[path = "../grpc_support/mod.rs"]
mod grpc_support;

mod file;
mod kube;
mod leader_election;
mod metrics_auth;
mod objectives;
mod rbac;
mod server;
