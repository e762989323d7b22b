//! Model-server telemetry (work in progress).
