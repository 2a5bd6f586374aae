//! rollcall client.
#![forbid(unsafe_code)]
