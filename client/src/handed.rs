//! What a member handle has told the application about revocations, and what the
//! application has answered: the [`Member`](crate::Member) side of the events'
//! contract.
//!
//! Events are built by the connection task from what it knows when it builds them, and
//! the application takes them later. An acknowledgement made in between releases a
//! partition that an event already queued may still list as held: a `Resumed` built
//! when a heartbeat was answered, while the application was still committing before
//! acknowledging. Handing that event out as it was built would tell the application to
//! act again on a partition it has just given up, and which the coordinator may already
//! have granted to another member. So each event is trimmed, as it is handed out, of the
//! partitions the application released since: they are no longer the member's (see
//! [`Event`]'s contract) until an `Assigned` it takes grants them again.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{Event, LostReason, TopicPartition};

/// A member handle's record of the revocations it handed out and the partitions the
/// application released.
#[derive(Debug, Default)]
pub(crate) struct Handed {
    /// For each partition a `RevokeRequested` given to the application named and that
    /// it has not acknowledged since, that event's generation: an acknowledgement
    /// answers the requests the application was given, not one still on its way to it.
    asked: BTreeMap<TopicPartition, u32>,
    /// Partitions the application acknowledged and no `Assigned` taken since granted
    /// again: no event handed out from now on lists them as held. At most every
    /// partition the member was ever asked for; emptied when the membership ends.
    released: BTreeSet<TopicPartition>,
}

impl Handed {
    /// `event` is being handed to the application: records what it asks, and trims from
    /// it the partitions the application released after it was built.
    pub(crate) fn hand_out(&mut self, event: &mut Event) {
        match event {
            Event::RevokeRequested {
                partitions,
                generation,
            } => {
                partitions.retain(|tp| !self.released.contains(tp));
                for tp in partitions.iter() {
                    self.asked.insert(tp.clone(), *generation);
                }
            }
            Event::Assigned { partitions, .. } => {
                for tp in partitions.iter() {
                    self.released.remove(tp);
                }
            }
            Event::Lost { partitions, reason } => {
                partitions.retain(|tp| !self.released.contains(tp));
                for tp in partitions.iter() {
                    self.asked.remove(tp);
                }
                if *reason != LostReason::Reassigned {
                    // The membership ended: nothing is held, nothing can be released.
                    self.asked.clear();
                    self.released.clear();
                }
            }
            Event::Suspended { partitions } | Event::Resumed { partitions } => {
                partitions.retain(|tp| !self.released.contains(tp));
            }
            Event::Fatal(_) => {
                self.asked.clear();
                self.released.clear();
            }
        }
    }

    /// The application acknowledges `partitions`: those a `RevokeRequested` it was given
    /// asked for, with that request's generation, to send to the coordinator. The
    /// others are ignored.
    pub(crate) fn acknowledge(
        &mut self,
        partitions: impl IntoIterator<Item = TopicPartition>,
    ) -> Vec<(TopicPartition, u32)> {
        partitions
            .into_iter()
            .filter_map(|tp| {
                let generation = self.asked.remove(&tp)?;
                self.released.insert(tp.clone());
                Some((tp, generation))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
