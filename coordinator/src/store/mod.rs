//! Durable state behind a small trait.
//!
//! The core produces [`Record`]s; the shell hands them to a [`Store`], which makes them
//! durable in one transaction per call. At start the shell loads a [`RestoredState`]
//! and gives it to the core.
//!
//! # The seam a cluster needs
//!
//! - **Fenced writes.** Every write carries the writer's [`FencingToken`]
//!   ([`Store::write_fenced`], and [`GroupCommitter::submit_fenced`] for a batch's
//!   records). A store shared by several coordinators refuses a write whose token is
//!   older than the latest it accepted for the same groups, so a deposed owner cannot
//!   overwrite its successor. [`RedbStore`] and [`MemoryStore`] have one writer (one
//!   process holds the file), so they accept any token and ignore it; a single
//!   coordinator writes with [`FencingToken::SOLE`].
//! - **One shard's groups.** [`Store::load_groups`] loads only the groups a predicate
//!   accepts (those hashing to one shard), so a core can adopt a shard at runtime
//!   (`Coordinator::restore`, with the same rules as a restart) and hand it back
//!   (`Coordinator::release`, whose last snapshots reach the store before the next owner
//!   loads).
//! - **Per-group generation floors.** A deleted group's largest generation is kept under
//!   its own id ([`RestoredState::floors`]), not folded into one number for the whole
//!   store, so a shard's groups carry their floors with them. The one number earlier
//!   stores kept is still read ([`RestoredState::generation_floor`]) and put under
//!   every group.
//!
//! - [`RedbStore`]: the durable store, one redb file in the data directory.
//! - [`MemoryStore`]: an in-memory store for tests, which counts its writes.
//! - [`GroupCommitter`]: a writer thread that makes the records of many concurrent
//!   callers durable together, one [`Store::write`] (one fsync) per batch.
//!
//! # Retention
//!
//! Every store remembers, per group, since when it has been idle and empty (the rule is
//! written once, in [`retention`]; a store supplies the table):
//!
//! - a snapshot with no members marks the group empty from that moment, unless it is
//!   already marked (it stays empty since the earlier time);
//! - a snapshot with members clears the mark;
//! - an offset commit to a group that is marked, or that has no snapshot at all (offsets
//!   committed without group membership), marks it from that moment, so offsets that are
//!   still being committed are never purged.
//!
//! [`Store::expired_groups`] names every group marked for longer than the retention; it
//! only reads. A [`Record::GroupDeleted`] written like any other record removes a group's
//! offsets, snapshot and mark. The server never deletes on the store's word alone: it
//! asks each group's shard, whose core knows whether a member has joined since, and the
//! core's deletion record reaches the store in order with that shard's other records.
//! [`Store::purge_expired`] combines the two for callers that are the store's only
//! writer.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use self::retention::deletions;

use crate::core::{Record, RestoredState};

pub mod group_commit;
pub mod memory;
pub mod redb;
pub mod retention;
pub(crate) mod snapshot_json;

#[cfg(test)]
mod tests;

pub use self::group_commit::{CommitterStats, GroupCommitter};
pub use self::memory::MemoryStore;
pub use self::redb::RedbStore;

/// Wall clock the stores read to date when a group became empty. Injectable so that
/// retention can be tested without waiting.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The system wall clock.
pub fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// Why the store failed.
///
/// Cloneable, so that one failed batch write can be reported to every caller whose
/// records were in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store file could not be opened, or its contents are not a valid store.
    #[error("cannot open store {path}: {reason}")]
    Open {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The store holds data that does not decode.
    #[error("store {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A write or read failed.
    #[error("store i/o failed: {0}")]
    Io(String),
    /// The writer that makes records durable has stopped, so nothing more can be written.
    #[error("store writer has stopped")]
    Closed,
    /// A store shared by several coordinators refused the write: the writer no longer
    /// owns `slot` (another coordinator claimed it, or the writer's lease expired), so
    /// it must stop acting for the slot's groups.
    #[error("write refused: this coordinator no longer owns slot {slot}")]
    Fenced {
        /// The slot whose ownership was lost.
        slot: u32,
    },
}

/// Called once with the result of a write begun by [`Store::write_then`].
pub type WriteDone = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// An owner's fencing token: it grows with every change of owner of a set of groups,
/// so a store shared by several coordinators can refuse the writes of an owner that was
/// replaced (see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token of a coordinator that owns every group of its store alone.
    pub const SOLE: Self = Self(0);
}

/// Durable storage of offsets and group snapshots.
pub trait Store: Debug + Send + Sync {
    /// Everything stored: every group's last snapshot and every offset.
    fn load(&self) -> Result<RestoredState, StoreError>;

    /// What [`Self::load`] would return about the groups `keep` accepts (one shard's),
    /// with the floor under every group. The default loads everything and filters; a
    /// store may skip what it need not decode.
    fn load_groups(&self, keep: &dyn Fn(&str) -> bool) -> Result<RestoredState, StoreError> {
        let mut state = self.load()?;
        state.retain(keep);
        Ok(state)
    }

    /// Makes `records` durable, all or nothing, before returning.
    fn write(&self, records: &[Record]) -> Result<(), StoreError>;

    /// [`Self::write`] on behalf of the owner holding `token`. A store with one writer
    /// (the default, and [`RedbStore`] and [`MemoryStore`]) accepts any token and
    /// ignores it: nobody else can write to it. A store shared by several owners
    /// refuses a write whose token is older than the latest it accepted for the same
    /// groups.
    fn write_fenced(&self, token: FencingToken, records: &[Record]) -> Result<(), StoreError> {
        let _ = token;
        self.write(records)
    }

    /// How many writes begun with [`Self::write_then`] may be under way at once. 1, the
    /// default, means each ends before the next begins: a store on one disk gains
    /// nothing from more (redb writes one transaction at a time).
    fn writes_in_flight(&self) -> usize {
        1
    }

    /// Begins writing `records` as [`Self::write_fenced`] does, and calls `done` with
    /// the result once they are durable (or failed). The default writes before
    /// returning.
    ///
    /// A store that allows more than one write under way ([`Self::writes_in_flight`])
    /// must make the writes take effect as if one after the other, in the order they
    /// were begun: a later write is never overwritten by an earlier one, and what a
    /// write derives from the stored state (a group's retention mark or floor) is what
    /// the earlier ones leave. A write may end before an earlier one; the caller
    /// releases answers in order.
    fn write_then(self: Arc<Self>, token: FencingToken, records: Vec<Record>, done: WriteDone) {
        done(self.write_fenced(token, &records));
    }

    /// Names of the groups that have had no members for longer than `retention`, in
    /// name order. Changes nothing.
    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError>;

    /// Removes the offsets and snapshots of groups that have had no members for longer
    /// than `retention` ([`Self::expired_groups`], then one [`Self::write`] of
    /// [`Record::GroupDeleted`] records), and returns their names.
    ///
    /// The two steps are not one transaction, so this is only for a caller that is the
    /// store's only writer (tests, offline maintenance). A running server instead lets
    /// each group's core decide; see the module documentation.
    fn purge_expired(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        let expired = self.expired_groups(retention)?;
        if !expired.is_empty() {
            self.write(&deletions(&expired))?;
        }
        Ok(expired)
    }
}
