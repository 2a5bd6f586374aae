//! Pushes from the coordinator: assignments, revocations and expulsions.

use super::*;

impl Membership {
    /// Whether `push` addresses this member.
    pub fn accepts_push(&self, push: &Push) -> bool {
        match push_target(push) {
            Some((group, member)) => {
                group == self.settings.group && self.member_id.as_deref() == Some(member)
            }
            None => false,
        }
    }

    /// Whether `push` may address this member once its pending join is answered.
    pub fn accepts_early_push(&self, push: &Push) -> bool {
        match (&self.phase, push_target(push)) {
            (Phase::Joining(j), Some((group, _))) => {
                j.in_flight.is_some() && group == self.settings.group
            }
            _ => false,
        }
    }

    /// A push accepted by [`Membership::accepts_push`] or
    /// [`Membership::accepts_early_push`].
    pub fn handle_push(&mut self, push: Push, now: Instant) {
        if let Phase::Joining(j) = &mut self.phase {
            if j.in_flight.is_some() && j.early_pushes.len() < MAX_EARLY_PUSHES {
                j.early_pushes.push(push);
            }
            return;
        }
        if !self.accepts_push(&push) {
            return;
        }
        match push {
            Push::Assignment(p) => self.on_assignment(p.generation, from_wire(&p.partitions)),
            Push::Revoke(p) => self.on_revoke(p.generation, from_wire(&p.partitions)),
            Push::Expelled(p) => self.on_expelled(p.reason, p.message, now),
            Push::Shutdown(_) => {}
        }
    }

    pub(super) fn on_assignment(&mut self, generation: u32, full: PartitionSet) {
        self.generation = generation;
        let leaving = self.leaving.is_some();
        let mut added = PartitionSet::new();
        for tp in &full {
            // While leaving, new partitions are not taken up: the leave releases them.
            if !leaving && !self.holdings.contains_key(tp) {
                self.holdings.insert(tp.clone(), Hold::Owned);
                added.insert(tp.clone());
            }
        }
        let mut lost = PartitionSet::new();
        self.holdings.retain(|tp, h| {
            if full.contains(tp) {
                return true;
            }
            if *h != Hold::Released {
                lost.insert(tp.clone());
            }
            false
        });
        let holdings = &self.holdings;
        self.acks_unsent.retain(|tp| holdings.contains_key(tp));
        self.revoke_requested.retain(|tp| holdings.contains_key(tp));
        if !lost.is_empty() {
            self.emit(Event::Lost {
                partitions: lost,
                reason: LostReason::Reassigned,
            });
        }
        if !added.is_empty() {
            self.emit(Event::Assigned {
                partitions: added,
                generation,
            });
        }
    }

    pub(super) fn on_revoke(&mut self, generation: u32, full: PartitionSet) {
        let mut newly = PartitionSet::new();
        self.revoke_requested.clear();
        for tp in full {
            if let Some(h) = self.holdings.get_mut(&tp) {
                if *h == Hold::Owned {
                    *h = Hold::Revoking {
                        announced: generation,
                    };
                    newly.insert(tp.clone());
                }
                self.revoke_requested.insert(tp);
            }
        }
        if !newly.is_empty() {
            self.emit(Event::RevokeRequested {
                partitions: newly,
                generation,
            });
        }
    }

    /// The coordinator ended the membership. Every path reports it `Lost` with a ticket,
    /// so that a Relinquish follows once the application has taken the event.
    pub(super) fn on_expelled(&mut self, reason: ExpelReason, message: String, now: Instant) {
        match reason {
            ExpelReason::Fenced => {
                let old = self.end_membership(LostReason::Fenced);
                self.relinquish_after_lost(old, now);
                self.fail(FatalError::Fenced { message });
            }
            _ if self.leaving.is_some() => {
                if reason != ExpelReason::Left {
                    let old = self.end_membership(LostReason::Expelled(reason));
                    self.relinquish_after_lost(old, now);
                }
                self.finish_leave(Ok(()));
            }
            ExpelReason::ProgressExpired => {
                let old = self.end_membership(LostReason::Expelled(reason));
                self.relinquish_after_lost(old, now);
                self.phase = Phase::AwaitingProgress {
                    since: self.progress,
                };
            }
            _ => {
                let old = self.end_membership(LostReason::Expelled(reason));
                self.relinquish_after_lost(old, now);
                self.rejoin(None, now);
            }
        }
    }
}
