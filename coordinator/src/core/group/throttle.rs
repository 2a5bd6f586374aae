//! Throttled moves: a group may cap the partitions in revocation at once (asked and
//! not yet released), over the group (`GroupConfig::max_revoking`) and per member
//! (`GroupConfig::max_revoking_per_member`). A partition the target moves past the caps
//! waits with its owner, which keeps working on it and is not told yet; it is asked
//! as earlier revocations are released, and its rebalance timeout counts from then.
//!
//! Which go first is deterministic: members take turns (in id order after a full
//! reconciliation, then round robin), each asked for its lowest partitions first, a
//! share of the room at a time. The queue of members with revocations waiting lets an
//! acknowledgement ask the next ones without looking at every member. Every cap is at
//! least one and a revocation asked is released or expels its member within a
//! rebalance timeout, so the waves always move on.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::Group;

/// The group's revocations in progress, when capped.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// Partitions asked and not yet released, over the group's members.
    pub(crate) asked: usize,
    /// Members with revocations waiting: how many wait, and whether the member is in
    /// `queue` (a member at its own cap leaves the queue until it releases one).
    waiting: HashMap<Arc<str>, Waiting>,
    /// Members whose turn it is next to be asked, when there is room.
    queue: VecDeque<Arc<str>>,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    count: usize,
    queued: bool,
}

impl Throttle {
    /// Revocations waiting, over the group.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.values().map(|w| w.count).sum()
    }
}

impl Group {
    /// The caps on revocations (group, per member), if any is set; `usize::MAX` for the
    /// one that is not.
    pub(crate) fn revocation_caps(&self) -> Option<(usize, usize)> {
        let cap = |n: u32| if n == 0 { usize::MAX } else { n as usize };
        let c = &self.config;
        (c.max_revoking > 0 || c.max_revoking_per_member > 0)
            .then(|| (cap(c.max_revoking), cap(c.max_revoking_per_member)))
    }

    /// Revocations a cap keeps waiting, over the group.
    pub(crate) fn revocations_waiting(&self) -> usize {
        self.throttle.as_ref().map_or(0, |t| t.waiting())
    }

    /// Caps are off: nothing waits for room.
    pub(crate) fn forget_waiting(&mut self) {
        self.throttle = None;
    }

    /// A full reconciliation with caps: every member's revocations brought up to its
    /// target (released or given back ones dropped), counted again, and the room the
    /// caps leave shared among the members with revocations waiting, in id order.
    /// Returns nothing: the caller pushes each member's revoke set if it changed.
    pub(crate) fn plan_revocations(&mut self, now: Instant, caps: (usize, usize)) {
        let t = self.throttle.get_or_insert_with(Box::default);
        t.asked = 0;
        t.waiting.clear();
        t.queue.clear();
        for m in self.members.values_mut() {
            m.prune_revocations();
            t.asked += m.revoking_since.len();
            let count = m.revocations_waiting();
            if count > 0 {
                t.waiting.insert(
                    m.id.clone(),
                    Waiting {
                        count,
                        queued: true,
                    },
                );
                t.queue.push_back(m.id.clone());
            }
        }
        self.ask_waiting(now, caps);
    }

    /// After member `id` released partitions (or had them given back): its revocations
    /// are counted again, and it waits for its turn if some still wait. O(what it owns).
    pub(crate) fn note_released(&mut self, id: &Arc<str>) {
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        let dropped = m.prune_revocations();
        let count = m.revocations_waiting();
        let t = self.throttle.get_or_insert_with(Box::default);
        t.asked = t.asked.saturating_sub(dropped);
        match (t.waiting.get_mut(id), count) {
            (Some(_), 0) => {
                // Left in the queue, if it is there: its turn finds nothing and passes.
                t.waiting.remove(id);
            }
            (Some(w), count) => {
                w.count = count;
                if !w.queued {
                    w.queued = true;
                    t.queue.push_back(id.clone());
                }
            }
            (None, 0) => {}
            (None, count) => {
                t.waiting.insert(
                    id.clone(),
                    Waiting {
                        count,
                        queued: true,
                    },
                );
                t.queue.push_back(id.clone());
            }
        }
    }

    /// Asks waiting revocations while the caps leave room: members take turns from the
    /// queue, each asked for at most its share of the room (and what its own cap
    /// leaves), lowest partitions first. Returns the members asked for more, in the
    /// order asked (each once). Each turn asks at least one partition or takes a member
    /// off the queue, so this ends.
    pub(crate) fn ask_waiting(&mut self, now: Instant, caps: (usize, usize)) -> Vec<Arc<str>> {
        let (group_cap, member_cap) = caps;
        let mut asked_of: Vec<Arc<str>> = Vec::new();
        loop {
            let t = self.throttle.get_or_insert_with(Box::default);
            let room = group_cap.saturating_sub(t.asked);
            if room == 0 {
                break;
            }
            let Some(id) = t.queue.pop_front() else {
                break;
            };
            let Some(w) = t.waiting.get_mut(&id) else {
                continue;
            };
            if !w.queued {
                continue;
            }
            w.queued = false;
            let Some(m) = self.members.get_mut(&id) else {
                t.waiting.remove(&id);
                continue;
            };
            let own_room = member_cap.saturating_sub(m.revoking_since.len());
            if own_room == 0 {
                // At its own cap: it queues again when it releases one.
                continue;
            }
            let share = room.div_ceil(t.queue.len() + 1).max(1);
            let (asked, still) = m.ask_revocations(now, room.min(own_room).min(share));
            t.asked += asked;
            if asked > 0 && !asked_of.contains(&id) {
                asked_of.push(id.clone());
            }
            if still == 0 {
                t.waiting.remove(&id);
            } else {
                w.count = still;
                if asked < own_room {
                    w.queued = true;
                    t.queue.push_back(id);
                }
            }
        }
        asked_of
    }
}
