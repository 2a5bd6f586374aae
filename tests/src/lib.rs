//! End-to-end test helpers.
#![forbid(unsafe_code)]
