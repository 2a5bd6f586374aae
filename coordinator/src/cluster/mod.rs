//! Cluster mode (feature `cluster`): several coordinators share the groups, each group's
//! *slot* owned by one of them at a time through etcd, and everything the store keeps
//! lives in etcd so another coordinator can take a slot over.
//!
//! # Why etcd
//!
//! Replication and agreement on who owns what are etcd's (Raft, leases, compare-and-set
//! transactions, watches); this module only lays keys out and keeps the rules below. The
//! single-process mode (redb, no other service) is untouched by it.
//!
//! # Layout (prefix `/rollcall/<cluster>/`)
//!
//! - `meta/slots`: the slot count, chosen by the first coordinator ([`Etcd::connect`]
//!   creates it with a transaction when absent and otherwise reads it).
//! - `coordinators/<id>`: `{"id","addr"}` put with the coordinator's lease: the live list.
//! - `owners/<slot 5 digits>`: `{"id","addr"}` put with the owner's lease by a
//!   transaction whose compare is "absent" ([`Etcd::claim`]).
//! - `slots/<slot 5 digits>/...`: the slot's groups, as [`EtcdStore`] lays them out.
//!
//! # Invariants
//!
//! - **Only the owner writes.** Every store transaction is conditioned on
//!   `create_revision(owners/<s>) == token` for each slot `s` it touches, so a deposed
//!   coordinator's write fails ([`crate::store::StoreError::Fenced`]) and changes
//!   nothing.
//! - **Token = create revision.** A slot's fencing token is the create revision of its
//!   owner key: etcd's revisions only grow, and a new owner key can only be created
//!   after the old one is gone (released, or expired with its lease), so every owner's
//!   token is larger than every earlier owner's and the compare fails for all of them.
//! - **Stop acting before the lease can expire.** [`Etcd::acting_deadline`] is
//!   `s + ttl - max(ttl / 10, 250 ms)`, where `s` is when this coordinator *sent* the
//!   last keepalive etcd answered with `ttl > 0`. etcd restarts the lease's countdown
//!   when it receives that keepalive, after `s`, so the lease cannot expire (and no
//!   other coordinator can create the owner keys bound to it) before `s + ttl` by
//!   etcd's clock. After the deadline this coordinator acts for no slot.
//!
//!   **Clock assumption:** the rates of this machine's monotonic clock and etcd's
//!   differ by less than the margin: 10 % of the TTL (and at least 250 ms, which also
//!   covers the time to stop acting). No agreement on the time of day is needed; an etcd
//!   leader change only lengthens leases (a new leader renews them all).
//! - **Members' leases lapse first.** A coordinator answers heartbeats only before its
//!   acting deadline, and a new owner restores with today's restore rules (remaining
//!   durations counted again, leases assumed full), so nothing is granted inside a lease
//!   the old owner promised.
//!
//! # Files
//!
//! `etcd.rs` [`Etcd`] (connection, lease and keepalive, claim/release/leave, the view's
//! watch); `plan.rs` the pure [`plan`]; `store.rs` [`EtcdStore`] (the [`crate::store::Store`]
//! in etcd) with `codec.rs` (values), `chunks.rs` (a batch's transactions within
//! etcd's limits) and `known.rs` (the infos it need not read again); `keys.rs` the key
//! names; `testing.rs` a real etcd for tests.

use std::collections::BTreeMap;
use std::time::Duration;

mod chunks;
mod codec;
mod etcd;
mod group_write;
mod inspect;
mod keys;
mod known;
mod pipeline;
mod plan;
mod store;
pub mod testing;

#[cfg(test)]
mod tests;

pub use self::chunks::{MAX_TXN_BYTES, MAX_TXN_OPS};
pub use self::etcd::{acting_window, owned_by, Etcd};
pub use self::inspect::{inspect, ClusterReport, SlotOwner};
pub use self::plan::plan;
pub use self::store::EtcdStore;

/// The default TTL of a coordinator's etcd lease.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

/// The default slot count of a new cluster.
pub const DEFAULT_SLOTS: u32 = 64;

/// How a coordinator joins a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// etcd client endpoints, `host:port` or URLs.
    pub endpoints: Vec<String>,
    /// The cluster's name: its keys live under `/rollcall/<name>/`.
    pub name: String,
    /// This coordinator's id (default: its advertised address).
    pub id: String,
    /// The address clients are sent to for this coordinator's groups.
    pub advertise: String,
    /// The TTL of this coordinator's etcd lease (rounded up to whole seconds).
    pub lease_ttl: Duration,
    /// The slot count if this coordinator creates the cluster; otherwise etcd's is used.
    pub slots: u32,
}

/// Why a cluster operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// etcd could not be reached or refused the request.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The options or what etcd holds make no sense.
    #[error("cluster: {0}")]
    Invalid(String),
    /// The acting deadline has passed: this coordinator acts for no slot.
    #[error("the cluster lease is lost (acting deadline passed)")]
    LeaseLost,
}

/// The live coordinators and the slots' owners, as the last etcd watch event left them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Coordinator id -> advertised address.
    pub coordinators: BTreeMap<String, String>,
    /// Slot -> (owner id, owner address, create revision of the owner key = its token).
    pub owners: BTreeMap<u32, (String, String, u64)>,
}
