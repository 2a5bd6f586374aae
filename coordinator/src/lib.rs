//! rollcall's group coordinator.
//!
//! - [`core`]: the deterministic, sans-IO state machine (groups, members, clocks,
//!   rebalances, offsets).
//! - `server`: the tokio shell that serves the core over TCP.

#![forbid(unsafe_code)]

pub mod cli;
pub mod core;
pub mod server;
pub mod store;
