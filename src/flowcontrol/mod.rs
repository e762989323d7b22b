//! Admission and flow control (work in progress).
