//! A group's members: adding, removing (with the hold of their partitions) and
//! replacing them, and their timers (session, progress and revocation deadlines).

use std::sync::Arc;
use std::time::Instant;

use rollcall_protocol::{AssignmentPush, ExpelReason, ExpelledPush, Push, RevokePush};

use super::super::guards::Hold;
use super::super::liveness::{Beat, Transition, Watch};
use super::super::timers::TimerKey;
use super::super::{ConnId, Event, RebalanceCause, ShadowVerdict, TopicPartition};
use super::member::About;
use super::{Ctx, Expiry, Group, Held, Member, PartitionSet, Timeouts};

impl Group {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_member(
        &self,
        now: Instant,
        id: Arc<str>,
        instance_id: Option<String>,
        client_id: String,
        join_token: u64,
        conn: Option<ConnId>,
        timeouts: Timeouts,
        subscription: Vec<u32>,
    ) -> Member {
        Member {
            id,
            instance_id: instance_id.map(String::into_boxed_str),
            about: Box::new(About {
                client_id: client_id.into_boxed_str(),
                placement: None,
            }),
            join_token,
            conn,
            timeouts,
            subscription: subscription.into_boxed_slice(),
            liveness: Watch::new(
                now,
                timeouts.session(),
                &*self.detector,
                self.shadow.as_deref(),
                &self.fleet,
            ),
            progress: 0,
            progress_deadline: now + timeouts.progress(),
            last_progress_at: now,
            progress_credit_ms: 0,
            progress_credit_at: 0,
            progress_restores: 0,
            noted_at: now,
            restricted: false,
            expel_slot: None,
            generation: self.generation,
            owned: PartitionSet::new(),
            target: PartitionSet::new(),
            revoking_since: Box::default(),
            revoke_pushed: Box::default(),
            released: PartitionSet::new(),
            assignment_dirty: true,
            lease_until: now + timeouts.lease(),
            heard_at: now,
            stood_down: false,
            conn_closed: false,
            since_restore: 0,
            timer_at: None,
        }
    }

    /// Adds a member and schedules its deadlines.
    pub(crate) fn insert_member(&mut self, ctx: &mut Ctx<'_>, mut member: Member) {
        self.tokens.insert(member.join_token, member.id.clone());
        // Owned before the member's first frame here: a restored member's connections
        // ended with the old process, and a replacement's predecessor answers to
        // another member id, so nothing about an earlier ownership can arrive.
        for tp in &member.owned {
            self.owners.insert(*tp, 0);
        }
        let key = TimerKey::Member {
            group: self.name.clone(),
            member: member.id.clone(),
        };
        let next = member.next_deadline();
        ctx.timers.schedule(&mut member.timer_at, next, key);
        self.members.insert(member);
        self.snapshot_dirty = true;
    }

    pub(crate) fn forget(&mut self, id: &Arc<str>, reason: ExpelReason, memory: usize) {
        self.removed.insert(id.clone(), reason);
        self.disproved.remove(id);
        self.removed_order.push_back(id.clone());
        while self.removed_order.len() > memory {
            if let Some(old) = self.removed_order.pop_front() {
                self.removed.remove(&old);
                self.disproved.remove(&old);
            }
        }
    }

    /// A heartbeat arrived from `id`, which is no longer a member. If it was expelled
    /// for silence (its session, or its lease after its connection closed, ran out),
    /// the expulsion was a mistake: the member was alive. The first such heartbeat is
    /// reported and is a surprise for the fleet; if that ends the group's clean spell,
    /// every member is judged again.
    pub(crate) fn heard_from_expelled(&mut self, ctx: &mut Ctx<'_>, id: &str) {
        let Some((id, ExpelReason::SessionExpired)) = self
            .removed
            .get_key_value(id)
            .map(|(id, reason)| (id.clone(), *reason))
        else {
            return;
        };
        if !self.disproved.insert(id.clone()) {
            return;
        }
        let was_clean = self.fleet.clean() >= ctx.config.detector_settings.clean_gaps;
        self.fleet.false_expulsion();
        if was_clean {
            self.rejudge_all();
        }
        ctx.event(Event::FalseExpulsion {
            group: self.name.to_string(),
            member_id: id.to_string(),
            detector: self.detector.kind(),
        });
    }

    /// Makes sure the member's timer fires by its earliest deadline.
    pub(crate) fn schedule_member(&mut self, ctx: &mut Ctx<'_>, id: &Arc<str>) {
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        let key = TimerKey::Member {
            group: self.name.clone(),
            member: id.clone(),
        };
        // Never in the past: a deadline that already passed is judged now.
        let next = m.next_deadline().max(ctx.now);
        ctx.timers.schedule(&mut m.timer_at, next, key);
    }

    /// Removes a member. Its partitions are held until its lease has run out
    /// ([`Member::lease_until`]); a member that left after releasing everything ended
    /// its lease itself, so its partitions move at once.
    pub(crate) fn remove_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        reason: ExpelReason,
        message: String,
    ) {
        let Some(member) = self.members.remove(id) else {
            return;
        };
        if self.tokens.get(&member.join_token) == Some(id) {
            self.tokens.remove(&member.join_token);
        }
        self.unsubscribe(&member.subscription);
        let owned: Vec<TopicPartition> = member.owned.iter().copied().collect();
        for tp in &owned {
            self.owners.remove(tp);
        }
        self.hold(ctx, &member, owned);
        let reserved = reason == ExpelReason::SessionExpired && self.reserve(ctx, &member);
        self.forget(id, reason, ctx.config.expelled_memory);
        if reason != ExpelReason::Left {
            ctx.push(
                member.conn,
                Push::Expelled(ExpelledPush {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    reason,
                    message,
                }),
            );
        }
        ctx.event(Event::MemberRemoved {
            group: self.name.to_string(),
            member_id: id.to_string(),
            reason,
        });
        self.snapshot_dirty = true;
        if reserved {
            // The others keep their targets: the member's wait for it.
            return;
        }
        let cause = if reason == ExpelReason::Left {
            RebalanceCause::Leave
        } else {
            RebalanceCause::Expulsion
        };
        self.trigger_rebalance(ctx, cause);
    }

    /// Member `id` was just drained: its target keeps only what it owns (those move off
    /// it with the rebalance that follows), so that nothing new is granted to it before
    /// that rebalance, by a reconcile or by an acknowledgement that frees a partition its
    /// old target gave it. The partitions dropped wait, unowned, for that rebalance.
    pub(crate) fn hold_back_drained(&mut self, id: &str) {
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        let dropped: Vec<TopicPartition> = m.target.difference(&m.owned).copied().collect();
        if dropped.is_empty() {
            return;
        }
        m.target.remove_sorted(&dropped);
        for tp in &dropped {
            if self.target_owner.get(tp).is_some_and(|o| &**o == id) {
                self.target_owner.remove(tp);
            }
        }
        self.snapshot_dirty = true;
    }

    /// Replaces a static member by a new process under a new member id: it takes over
    /// the old member's target and generation without a rebalance; the old id is fenced.
    ///
    /// The old process may still be acting on its partitions (a replacement does not
    /// prove the old process is dead), so they are held until its lease has run out and
    /// granted to the replacement then. An old process that stood down (or whose lease
    /// is over) hands them over at once, which keeps planned restarts instant.
    pub(crate) fn replace_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        old_id: &Arc<str>,
        mut new: Member,
        subscription_changed: bool,
    ) -> bool {
        let Some(old) = self.members.remove(old_id) else {
            return false;
        };
        self.unsubscribe(&old.subscription);
        if self.tokens.get(&old.join_token) == Some(old_id) {
            self.tokens.remove(&old.join_token);
        }
        for tp in &old.target {
            self.target_owner.insert(*tp, new.id.clone());
        }
        for tp in &old.owned {
            self.owners.remove(tp);
        }
        if old.lease_until > ctx.now && !old.owned.is_empty() {
            let held: Vec<TopicPartition> = old.owned.iter().copied().collect();
            self.hold(ctx, &old, held);
        } else {
            new.owned = old.owned;
        }
        new.target = old.target;
        new.generation = old.generation;
        // The replacement gets its own rebalance timeout for anything it must release.
        new.revoking_since = Box::default();
        new.assignment_dirty = true;
        self.forget(old_id, ExpelReason::Fenced, ctx.config.expelled_memory);
        ctx.push(
            old.conn,
            Push::Expelled(ExpelledPush {
                group: self.name.to_string(),
                member_id: old_id.to_string(),
                reason: ExpelReason::Fenced,
                message: "a newer process joined with the same instance id".to_owned(),
            }),
        );
        ctx.event(Event::MemberReplaced {
            group: self.name.to_string(),
            old_member_id: old_id.to_string(),
            new_member_id: new.id.to_string(),
            instance_id: new.instance_id.as_deref().unwrap_or_default().to_owned(),
        });
        self.insert_member(ctx, new);
        if subscription_changed {
            self.trigger_rebalance(ctx, RebalanceCause::Subscription);
        }
        self.reconcile(ctx);
        true
    }

    /// Pushes the member's full state again (after a rebind or a generation mismatch).
    pub(crate) fn push_state(&mut self, ctx: &mut Ctx<'_>, id: &Arc<str>) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let assignment = Push::Assignment(AssignmentPush {
            group: self.name.to_string(),
            member_id: id.to_string(),
            generation: m.generation,
            partitions: self.to_wire(&m.owned),
        });
        let revoking = match self.revocation_caps() {
            // What it was asked, not what waits.
            Some(_) => m.revoking_since.iter().map(|r| r.tp).collect(),
            None => m.revoking(),
        };
        let revoke = (!revoking.is_empty()).then(|| {
            Push::Revoke(RevokePush {
                group: self.name.to_string(),
                member_id: id.to_string(),
                generation: m.generation,
                partitions: self.to_wire(&revoking),
            })
        });
        let conn = m.conn;
        ctx.push(conn, assignment);
        if let Some(revoke) = revoke {
            ctx.push(conn, revoke);
        }
    }

    /// Holds `partitions`, taken from `member`, until its lease has run out (nothing if
    /// it already has).
    fn hold(&mut self, ctx: &mut Ctx<'_>, member: &Member, partitions: Vec<TopicPartition>) {
        let until = member.lease_until;
        if until > ctx.now && !partitions.is_empty() {
            self.held.push(Held {
                until,
                member: member.id.clone(),
                partitions,
                reserved_for: None,
            });
            let key = TimerKey::Group(self.name.clone());
            ctx.timers.schedule(&mut self.timer_at, until, key);
        }
    }

    /// The process of removed member `id` confirmed that it stopped acting on its
    /// partitions: those held for it are released now. Returns whether any were.
    pub(crate) fn relinquish(&mut self, ctx: &mut Ctx<'_>, id: &str) -> bool {
        let now = ctx.now;
        let mut released = false;
        // A reservation is not a lease: the instance may still come back to it.
        for h in self
            .held
            .iter_mut()
            .filter(|h| &*h.member == id && h.reserved_for.is_none())
        {
            h.until = h.until.min(now);
            released = true;
        }
        if released {
            self.snapshot_dirty = true;
            self.reconcile(ctx);
        }
        released
    }

    // ----------------------------------------------------------------------------------
    // Timers
    // ----------------------------------------------------------------------------------

    /// A member's timer fired: expel it if a deadline passed, otherwise sleep again.
    /// `hold` is a guard's decision to hold the member's expiry (the coordinator asks the
    /// guards before it calls this, for a member with a deadline past).
    pub(crate) fn on_member_timer(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        fired_at: Instant,
        hold: Option<Hold>,
    ) {
        let now = ctx.now;
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        if m.timer_at == Some(fired_at) {
            m.timer_at = None;
        }
        if m.checkpoint_due().is_some_and(|due| due <= now) {
            // A wait has run a checkpoint interval past what the store knows of it.
            m.noted_at = now;
            self.snapshot_dirty = true;
        }
        if let Some(Transition::Suspected { silence }) = m.liveness.check(now) {
            ctx.event(Event::MemberSuspected {
                group: self.name.to_string(),
                member_id: id.to_string(),
                silence,
                expel_after: m.liveness.thresholds().expel_after,
            });
        }
        let session_expired = m.session_deadline() <= now;
        // What the member failed first: a guard may have held it past one deadline
        // until another passed as well.
        let expiry = m.expiry(now);
        if let (Some(_), Some(hold)) = (expiry, hold) {
            let key = TimerKey::Member {
                group: self.name.clone(),
                member: id.clone(),
            };
            ctx.timers.schedule(&mut m.timer_at, hold.recheck_at(), key);
            return;
        }
        let expired = expiry.map(|(expiry, _)| match expiry {
            Expiry::Closed => (
                ExpelReason::SessionExpired,
                format!(
                    "connection closed and not resumed within the lease timeout of {:?}",
                    m.lease_timeout()
                ),
            ),
            Expiry::Silence => (
                ExpelReason::SessionExpired,
                format!(
                    "no heartbeat within {:?} ({} detector, session timeout {:?})",
                    m.liveness.thresholds().expel_after,
                    self.detector.kind(),
                    m.session_timeout()
                ),
            ),
            Expiry::Progress => (
                ExpelReason::ProgressExpired,
                format!(
                    "progress counter stuck at {} for the progress timeout of {:?}",
                    m.progress,
                    m.progress_timeout()
                ),
            ),
            Expiry::Revocation => (
                ExpelReason::RebalanceTimeout,
                format!(
                    "revocation not acknowledged within the rebalance timeout of {:?}",
                    m.rebalance_timeout()
                ),
            ),
        });
        match expired {
            Some((reason, message)) => {
                if session_expired && reason == ExpelReason::SessionExpired {
                    self.shadow_spared(ctx, id);
                }
                let id = id.clone();
                self.remove_member(ctx, &id, reason, message);
                self.reconcile(ctx);
            }
            None => {
                let key = TimerKey::Member {
                    group: self.name.clone(),
                    member: id.clone(),
                };
                let next = m.next_deadline();
                ctx.timers.schedule(&mut m.timer_at, next, key);
            }
        }
    }

    /// Member `id` was expelled for silence: reports it if the shadow detector would
    /// still have waited.
    fn shadow_spared(&self, ctx: &mut Ctx<'_>, id: &Arc<str>) {
        let (Some(shadow), Some(m)) = (&self.shadow, self.members.get(id)) else {
            return;
        };
        let silence = ctx.now.saturating_duration_since(m.liveness.last_heard());
        if m.liveness
            .shadow_thresholds()
            .is_some_and(|t| t.expel_after > silence)
        {
            ctx.event(Event::ShadowVerdict {
                group: self.name.to_string(),
                member_id: id.to_string(),
                detector: shadow.kind(),
                verdict: ShadowVerdict::Spare,
                silence,
            });
        }
    }

    /// What member `id`'s latest heartbeat changed ([`Watch::beat`]): reports it. A
    /// recovered member whose target was cut while it was suspect gets a rebalance;
    /// otherwise what waits for it is granted.
    pub(crate) fn after_beat(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        Beat {
            change,
            shadow,
            gate_closed,
        }: Beat,
    ) {
        if gate_closed {
            self.rejudge_all();
        }
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        match change {
            Some(Transition::Suspected { silence }) => ctx.event(Event::MemberSuspected {
                group: self.name.to_string(),
                member_id: id.to_string(),
                silence,
                expel_after: m.liveness.thresholds().expel_after,
            }),
            Some(Transition::Recovered { suspect_for }) => {
                let restricted = std::mem::take(&mut m.restricted);
                ctx.event(Event::MemberRecovered {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    suspect_for,
                });
                if restricted {
                    self.trigger_rebalance(ctx, RebalanceCause::Recovery);
                } else {
                    self.reconcile(ctx);
                }
            }
            _ => {}
        }
        if let (Some((verdict, silence)), Some(detector)) = (shadow, &self.shadow) {
            ctx.event(Event::ShadowVerdict {
                group: self.name.to_string(),
                member_id: id.to_string(),
                detector: detector.kind(),
                verdict,
                silence,
            });
        }
    }

    /// The group's clean spell ended (a surprise): every member is judged again with
    /// what the fleet shows now. Its thresholds only grow, so no timer has to move
    /// earlier: one that fires before a member's new deadline finds it not expired and
    /// is set again.
    pub(crate) fn rejudge_all(&mut self) {
        let (detector, shadow, fleet) = (&*self.detector, self.shadow.as_deref(), &self.fleet);
        for m in self.members.values_mut() {
            let session = m.timeouts.session();
            m.liveness.rejudge(session, detector, shadow, fleet);
        }
    }

    /// The group's timer fired: run a due rebalance, release held partitions.
    pub(crate) fn on_group_timer(&mut self, ctx: &mut Ctx<'_>, fired_at: Instant) {
        if self.timer_at == Some(fired_at) {
            self.timer_at = None;
        }
        self.reservation_checkpoint_due(ctx);
        if self.pending.as_ref().is_some_and(|p| p.due <= ctx.now) {
            self.rebalance(ctx);
        }
        self.reconcile(ctx);
    }

    pub(crate) fn schedule_group_timer(&mut self, ctx: &mut Ctx<'_>) {
        let mut next = self.pending.as_ref().map(|p| p.due);
        if let Some(at) = self.next_reservation_checkpoint() {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        for h in &self.held {
            next = Some(next.map_or(h.until, |n| n.min(h.until)));
        }
        if let Some(next) = next {
            let key = TimerKey::Group(self.name.clone());
            ctx.timers.schedule(&mut self.timer_at, next, key);
        }
    }
}
