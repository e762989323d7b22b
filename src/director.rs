//! Request orchestration (work in progress).
