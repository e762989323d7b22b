//! Envoy ext_proc server (work in progress).
