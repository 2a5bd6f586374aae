//! What the coordinator's groups hold, as its quotas count it, summed over every core
//! that shares the totals: the server's shards, each the single writer of its own
//! groups, count into one set of counters, so a quota such as `max_groups` holds for
//! the whole coordinator.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::group::Usage;

/// Counters of groups, members, partitions, offsets and metadata bytes over every core
/// sharing them. Each core adds what its groups hold as they change (a group's
/// contribution is brought up to date after every input that touched it), so a check
/// made by one core may miss a change another core is making at that very moment: a
/// quota can be passed by what one request of each other shard adds, never more.
#[derive(Debug, Default)]
pub struct Totals {
    groups: AtomicUsize,
    members: AtomicUsize,
    partitions: AtomicU64,
    offsets: AtomicUsize,
    metadata_bytes: AtomicUsize,
    removals: AtomicUsize,
}

impl Totals {
    /// Groups counted.
    pub fn groups(&self) -> usize {
        self.groups.load(Ordering::Relaxed)
    }

    /// Members counted (a group counts its members, or its static instances if more).
    pub fn members(&self) -> usize {
        self.members.load(Ordering::Relaxed)
    }

    /// Partitions counted (see `CoreConfig::max_partitions`).
    pub fn partitions(&self) -> u64 {
        self.partitions.load(Ordering::Relaxed)
    }

    /// Committed offsets counted.
    pub fn offsets(&self) -> usize {
        self.offsets.load(Ordering::Relaxed)
    }

    /// Commit metadata bytes counted.
    pub fn metadata_bytes(&self) -> usize {
        self.metadata_bytes.load(Ordering::Relaxed)
    }

    /// Removed members remembered over all groups.
    pub fn removals(&self) -> usize {
        self.removals.load(Ordering::Relaxed)
    }

    pub(crate) fn get(&self) -> Usage {
        Usage {
            groups: self.groups(),
            members: self.members(),
            partitions: self.partitions(),
            offsets: self.offsets(),
            metadata_bytes: self.metadata_bytes(),
            removals: self.removals(),
        }
    }

    /// Replaces `old` (what a group was counted for) with `new`.
    pub(crate) fn replace(&self, old: Usage, new: Usage) {
        fn swap_usize(c: &AtomicUsize, old: usize, new: usize) {
            if new > old {
                c.fetch_add(new - old, Ordering::Relaxed);
            } else if old > new {
                c.fetch_sub(old - new, Ordering::Relaxed);
            }
        }
        swap_usize(&self.groups, old.groups, new.groups);
        swap_usize(&self.members, old.members, new.members);
        if new.partitions > old.partitions {
            self.partitions
                .fetch_add(new.partitions - old.partitions, Ordering::Relaxed);
        } else if old.partitions > new.partitions {
            self.partitions
                .fetch_sub(old.partitions - new.partitions, Ordering::Relaxed);
        }
        swap_usize(&self.offsets, old.offsets, new.offsets);
        swap_usize(&self.metadata_bytes, old.metadata_bytes, new.metadata_bytes);
        swap_usize(&self.removals, old.removals, new.removals);
    }
}
