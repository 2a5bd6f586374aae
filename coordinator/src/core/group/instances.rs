//! Static instances: every instance that ever joined a group, with its latest
//! incarnation, so that older incarnations are fenced across restarts; and the
//! partitions a departure delay reserves for an instance that went away.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::ExpelReason;

use super::super::timers::TimerKey;
use super::super::{Event, RebalanceCause, ReservationEnd, TopicPartition};
use super::member::checkpoint_interval;
use super::{Ctx, Group, Held, Member, PartitionSet};

/// The latest incarnation of a static instance. Kept (and made durable) after that
/// member leaves or is expelled, so that a request naming any older incarnation is
/// fenced, across restarts and however many replacements there were.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// Incarnations of the instance so far; the latest is number `epoch`.
    pub(crate) epoch: u64,
    /// The latest incarnation's member id.
    pub(crate) member_id: Arc<str>,
    /// The latest incarnation's join token.
    pub(crate) token: u64,
    /// Join tokens of the most recent older incarnations, newest last: a join retried
    /// with one of them (its response was lost, and newer processes have joined since)
    /// comes from a superseded process and is fenced.
    pub(crate) fenced_tokens: Vec<u64>,
}

/// How many superseded join tokens each static instance remembers.
pub(crate) const FENCED_TOKENS: usize = 16;

/// The instance id a static member id names: static member ids are
/// `<instance id>#<unique suffix>`, and suffixes never contain `#`.
pub(crate) fn instance_of(member_id: &str) -> Option<&str> {
    member_id.rfind('#').map(|i| &member_id[..i])
}

impl Group {
    /// The member that is the current incarnation of `instance`, if it is in the group.
    pub(crate) fn instance_member(&self, instance: &str) -> Option<Arc<str>> {
        self.instances
            .get(instance)
            .filter(|i| self.members.contains_key(&i.member_id))
            .map(|i| i.member_id.clone())
    }

    /// Records a new incarnation of `instance` and returns its epoch.
    pub(crate) fn register_instance(
        &mut self,
        instance: &str,
        member_id: Arc<str>,
        token: u64,
    ) -> u64 {
        let (epoch, mut fenced_tokens) = match self.instances.remove(instance) {
            Some(old) => {
                let mut fenced = old.fenced_tokens;
                fenced.push(old.token);
                let excess = fenced.len().saturating_sub(FENCED_TOKENS);
                fenced.drain(..excess);
                (old.epoch + 1, fenced)
            }
            None => (1, Vec::new()),
        };
        fenced_tokens.retain(|t| *t != token);
        self.instances.insert(
            instance.to_owned(),
            Instance {
                epoch,
                member_id,
                token,
                fenced_tokens,
            },
        );
        self.snapshot_dirty = true;
        epoch
    }

    /// Whether a join for `instance` with `token` retries the join of a superseded
    /// incarnation.
    pub(crate) fn token_fenced(&self, instance: &str, token: u64) -> bool {
        self.instances
            .get(instance)
            .is_some_and(|i| i.fenced_tokens.contains(&token))
    }

    /// Why a member id that is not in the group is gone, if known: a static member id
    /// older than its instance's latest incarnation is fenced, whatever else is known.
    pub(crate) fn gone_reason(&self, member_id: &str) -> Option<ExpelReason> {
        if let Some(latest) = instance_of(member_id).and_then(|i| self.instances.get(i)) {
            if &*latest.member_id != member_id {
                return Some(ExpelReason::Fenced);
            }
        }
        self.removed.get(member_id).copied()
    }
}

// -------------------------------------------------------------------------------------
// Departure delay: partitions reserved for a departed instance
// -------------------------------------------------------------------------------------

impl Group {
    /// Static member `member`, just removed because it went away without leaving (its
    /// session, or its lease after its connection closed, ran out): if the group has a
    /// departure delay, what its target gave it is reserved for its instance until the
    /// delay (or its lease, if longer) has run out, and nobody is given it meanwhile.
    /// Returns whether it reserved anything: the others are then not rebalanced.
    pub(crate) fn reserve(&mut self, ctx: &mut Ctx<'_>, member: &Member) -> bool {
        let delay = u64::from(self.config.departure_delay_ms);
        let Some(instance) = member.instance_id.as_deref() else {
            return false;
        };
        if delay == 0 || member.target.is_empty() {
            return false;
        }
        let now = ctx.now;
        let delay = Duration::from_millis(delay);
        let until = member.lease_until.max(now + delay);
        // At most one reservation per instance (its previous one was taken back).
        self.held
            .retain(|h| h.reserved_for.as_deref() != Some(instance));
        let partitions: Vec<TopicPartition> = member.target.iter().copied().collect();
        let count = partitions.len();
        self.held.push(Held {
            until,
            member: member.id.clone(),
            partitions,
            reserved_for: Some(instance.into()),
        });
        let key = TimerKey::Group(self.name.clone());
        ctx.timers.schedule(&mut self.timer_at, until, key);
        self.snapshot_dirty = true;
        self.schedule_reservation_checkpoint(ctx);
        ctx.event(Event::PartitionsReserved {
            group: self.name.to_string(),
            instance_id: instance.to_owned(),
            member_id: member.id.to_string(),
            partitions: count,
            delay: until.saturating_duration_since(now),
        });
        true
    }

    /// New member `member` of a static instance joins while partitions are reserved for
    /// the instance: if it is not drained, and its subscription covers them and brings
    /// no topic only it subscribes to beyond them, it is given exactly them, in the group's current
    /// generation, and nobody else's partitions move (no rebalance); returns true. (The
    /// departed member's lease, if it still runs, still holds what it owned.) Otherwise
    /// the reservation ends and the member joins as any other; returns false.
    pub(crate) fn take_reservation(&mut self, ctx: &mut Ctx<'_>, member: &mut Member) -> bool {
        let Some(instance) = member.instance_id.as_deref() else {
            return false;
        };
        let Some(i) = self
            .held
            .iter()
            .position(|h| h.reserved_for.as_deref() == Some(instance) && h.until > ctx.now)
        else {
            return false;
        };
        let reservation = self.held.remove(i);
        self.snapshot_dirty = true;
        let subscribed = |topic: u32| member.subscription.binary_search(&topic).is_ok();
        let covered = reservation.partitions.iter().all(|tp| {
            subscribed(tp.topic)
                && self
                    .topics
                    .get(tp.topic as usize)
                    .is_some_and(|t| tp.partition < t.partitions)
        });
        // A topic only this member subscribes to, with partitions not reserved for it,
        // needs a rebalance to be assigned at all.
        let alone = member.subscription.iter().any(|&t| {
            let topic = &self.topics[t as usize];
            topic.subscribers <= 1
                && reservation
                    .partitions
                    .iter()
                    .filter(|tp| tp.topic == t)
                    .count()
                    < topic.partitions as usize
        });
        // A process of the instance that comes back drained (a drained label it
        // declares) takes nothing back: the reservation ends, and the rebalance its join
        // starts gives the partitions to the others.
        if !covered || alone || self.is_drained(member) {
            ctx.event(Event::ReservationEnded {
                group: self.name.to_string(),
                instance_id: instance.to_owned(),
                partitions: reservation.partitions.len(),
                reason: ReservationEnd::Rejoined,
            });
            return false;
        }
        for tp in &reservation.partitions {
            self.target_owner.insert(*tp, member.id.clone());
        }
        ctx.event(Event::ReservationReturned {
            group: self.name.to_string(),
            instance_id: instance.to_owned(),
            member_id: member.id.to_string(),
            partitions: reservation.partitions.len(),
        });
        member.target = PartitionSet::from(reservation.partitions);
        member.generation = self.generation;
        true
    }

    /// The process of departed member `member_id` left (a Leave naming it after it was
    /// removed): the reservation kept for its instance ends, and a rebalance moves its
    /// partitions. Returns whether there was one.
    pub(crate) fn end_reservation_of(&mut self, ctx: &mut Ctx<'_>, member_id: &str) -> bool {
        let Some(i) = self
            .held
            .iter()
            .position(|h| h.reserved_for.is_some() && &*h.member == member_id)
        else {
            return false;
        };
        let h = self.held.remove(i);
        self.snapshot_dirty = true;
        ctx.event(Event::ReservationEnded {
            group: self.name.to_string(),
            instance_id: h.reserved_for.as_deref().unwrap_or_default().to_owned(),
            partitions: h.partitions.len(),
            reason: ReservationEnd::Left,
        });
        self.trigger_rebalance(ctx, RebalanceCause::Leave);
        true
    }

    /// Ends the reservations whose delay has passed at `now`: their partitions move with
    /// a rebalance. (The caller drops every hold that has run out.)
    pub(crate) fn expire_reservations(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let mut ended = false;
        for h in &self.held {
            if let (Some(instance), true) = (&h.reserved_for, h.until <= now) {
                ctx.event(Event::ReservationEnded {
                    group: self.name.to_string(),
                    instance_id: instance.to_string(),
                    partitions: h.partitions.len(),
                    reason: ReservationEnd::Expired,
                });
                ended = true;
            }
        }
        if ended {
            self.trigger_rebalance(ctx, RebalanceCause::DepartureDelayEnded);
        }
    }

    /// Every partition reserved for a departed instance.
    pub(crate) fn reserved(&self) -> HashSet<TopicPartition> {
        self.held
            .iter()
            .filter(|h| h.reserved_for.is_some())
            .flat_map(|h| h.partitions.iter().copied())
            .collect()
    }

    /// How many partitions are reserved for departed instances.
    pub(crate) fn partitions_reserved(&self) -> usize {
        self.held
            .iter()
            .filter(|h| h.reserved_for.is_some())
            .map(|h| h.partitions.len())
            .sum()
    }
}

impl Group {
    /// How often a group with reservations is snapshotted: an eighth of its departure
    /// delay (of a second, if the delay was switched off meanwhile), as a wait that can
    /// expel a member is (see `checkpoint_interval`).
    fn reservation_checkpoint_interval(&self) -> Duration {
        let delay = Duration::from_millis(u64::from(self.config.departure_delay_ms));
        checkpoint_interval(delay.max(Duration::from_secs(1)), 0)
    }

    /// Sets the next reservation checkpoint, if there is a reservation and none is set.
    pub(crate) fn schedule_reservation_checkpoint(&mut self, ctx: &mut Ctx<'_>) {
        if self.reservation_checkpoint.is_some() || self.partitions_reserved() == 0 {
            return;
        }
        let at = ctx.now + self.reservation_checkpoint_interval();
        self.reservation_checkpoint = Some(at);
        let key = TimerKey::Group(self.name.clone());
        ctx.timers.schedule(&mut self.timer_at, at, key);
    }

    /// The group's timer fired: a reservation checkpoint that is due asks for a
    /// snapshot, and the next one is set while reservations remain.
    pub(crate) fn reservation_checkpoint_due(&mut self, ctx: &mut Ctx<'_>) {
        if self.reservation_checkpoint.is_some_and(|at| at <= ctx.now) {
            self.reservation_checkpoint = None;
            if self.partitions_reserved() > 0 {
                self.snapshot_dirty = true;
                self.schedule_reservation_checkpoint(ctx);
            }
        }
    }

    /// When the next reservation checkpoint is due.
    pub(crate) fn next_reservation_checkpoint(&self) -> Option<Instant> {
        self.reservation_checkpoint
    }
}
