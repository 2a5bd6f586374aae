//! rollcall's group coordinator.
//!
//! - [`core`]: the deterministic, sans-IO state machine (groups, members, clocks,
//!   rebalances, offsets).
//! - `server`: the tokio shell that serves the core over TCP.
//! - `cluster` (feature `cluster`): slots owned through etcd and their state kept
//!   there, for several coordinators sharing the groups.

#![forbid(unsafe_code)]

pub mod cli;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod core;
pub mod server;
pub mod store;
