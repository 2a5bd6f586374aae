//! Keyed timers on one binary heap.
//!
//! Each member or group keeps the earliest instant it has an entry for. Deadlines that
//! only move later (session and progress deadlines renewed by heartbeats) therefore
//! cost nothing on the heartbeat path: when the old entry fires, its owner re-checks
//! its real deadlines and schedules itself again. A deadline that moves earlier (an
//! adaptive detector's thresholds shrinking) schedules a new entry. Entries whose owner
//! is gone, or that an earlier entry superseded, are dropped when they fire.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

/// What a timer entry is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A member's session, progress or revocation deadline.
    Member { group: Arc<str>, member: Arc<str> },
    /// A group's pending rebalance or a release of held partitions.
    Group(Arc<str>),
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64, TimerKey)>>,
    seq: u64,
}

impl Timers {
    /// Schedules `key` at `at` unless its owner already has an entry at or before `at`
    /// (`scheduled` is the owner's record of its earliest entry, updated here).
    pub(crate) fn schedule(&mut self, scheduled: &mut Option<Instant>, at: Instant, key: TimerKey) {
        if matches!(*scheduled, Some(s) if s <= at) {
            return;
        }
        *scheduled = Some(at);
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, key)));
    }

    /// The earliest entry's instant.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Removes and returns the earliest entry if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, TimerKey)> {
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= now => {
                self.heap.pop().map(|Reverse((at, _, key))| (at, key))
            }
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
