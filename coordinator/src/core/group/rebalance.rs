//! Rebalancing: a new target assignment per generation, and reconciliation, which moves
//! ownership toward it without ever granting a partition that someone owns or that is
//! held for a removed member.

use std::collections::BTreeSet;
use std::sync::Arc;

use rollcall_protocol::{AssignmentPush, Push, RevokePush};

use super::super::assignor::AssignmentInput;
use super::super::liveness::Transition;
use super::super::timers::TimerKey;
use super::super::{Event, RebalanceCause, TopicPartition};
use super::steering::{capacity_of, Steering};
use super::{Ctx, Group, PartitionSet, PendingRebalance};

impl Group {
    /// Asks for a rebalance. Triggers within the coalescing window share one generation.
    /// An operator's change is one deliberate act, with nothing to coalesce it with: it
    /// runs at the next timer, and takes any rebalance already waiting along with it.
    pub(crate) fn trigger_rebalance(&mut self, ctx: &mut Ctx<'_>, cause: RebalanceCause) {
        let now = ctx.now;
        let window = if cause == RebalanceCause::Operator {
            std::time::Duration::ZERO
        } else {
            ctx.config.rebalance_coalesce
        };
        match &mut self.pending {
            Some(p) => {
                p.due = (now + window).min(p.first + ctx.config.rebalance_coalesce_max);
            }
            None => {
                self.pending = Some(PendingRebalance {
                    first: now,
                    due: now + window,
                    cause,
                });
                // The snapshot says a rebalance is pending: a restart inside the
                // coalescing window must not lose it, whatever asked for it.
                self.snapshot_dirty = true;
            }
        }
        self.schedule_group_timer(ctx);
    }

    /// Computes a new target assignment in a new generation.
    pub(crate) fn rebalance(&mut self, ctx: &mut Ctx<'_>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        self.generation += 1;
        let generation = self.generation;
        // Racks numbered and loads laid out for the assignor: nothing when nothing is
        // declared.
        let steering = self.steering();
        let topics = self.topic_counts();
        let inputs = self.assignor_members(&steering);
        let preferred: Vec<&[u32]> = steering.preferred_racks.iter().map(Vec::as_slice).collect();
        let loads: Vec<&[f64]> = steering.loads.iter().map(Vec::as_slice).collect();
        let targets = ctx.assignor.assign(&AssignmentInput {
            preferred_racks: &preferred,
            loads: &loads,
            policy: self.policy(),
            ..AssignmentInput::new(&topics, &inputs)
        });
        drop((inputs, preferred, loads));
        let mut targets = self.spare_suspects(ctx, targets, &steering);
        // Partitions reserved for a departed instance stay out of every target until
        // it comes back or its delay ends.
        let reserved = self.reserved();
        if !reserved.is_empty() {
            for t in &mut targets {
                t.retain(|tp| !reserved.contains(tp));
            }
        }
        let mut moved = 0;
        self.target_owner.clear();
        for (m, target) in self.members.values_mut().zip(targets) {
            for tp in &target {
                self.target_owner.insert(*tp, m.id.clone());
            }
            let target = PartitionSet::from(target);
            moved += target.difference(&m.owned).count();
            m.target = target;
            m.generation = generation;
            m.assignment_dirty = true;
        }
        // A topic no member subscribes to any more is dropped from the work.
        let first = match self.reconciling {
            Some((since, _)) => since.min(pending.first),
            None => pending.first,
        };
        self.reconciling = Some((first, generation));
        self.snapshot_dirty = true;
        ctx.event(Event::RebalanceStarted {
            group: self.name.to_string(),
            generation,
            cause: pending.cause,
            partitions_moved: moved,
        });
    }

    /// A suspect member keeps what it owns but is given nothing new: partitions the
    /// assignor gave it beyond what it owns go to another member subscribing to their
    /// topic that is not suspect, takes grants and is not drained: one in the partition's preferred
    /// rack if there is one, and of those the one with the fewest partitions per unit
    /// of capacity after taking it (ties by member order). If there is none, they stay
    /// with the suspect and wait for it to recover. `targets` are in member order;
    /// members whose target was cut are marked for a rebalance when they recover.
    fn spare_suspects(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut targets: Vec<Vec<TopicPartition>>,
        steering: &Steering,
    ) -> Vec<Vec<TopicPartition>> {
        let now = ctx.now;
        let mut suspect = Vec::with_capacity(self.members.len());
        for m in self.members.values_mut() {
            // Silent past its threshold but its timer has not fired yet: it is suspect
            // from now on, as the timer would have made it (so only on-time beats bring
            // it back, and the cut below earns it its recovery rebalance).
            if let Some(Transition::Suspected { silence }) = m.liveness.check(now) {
                ctx.event(Event::MemberSuspected {
                    group: self.name.to_string(),
                    member_id: m.id.to_string(),
                    silence,
                    expel_after: m.liveness.thresholds().expel_after,
                });
            }
            let is_suspect = m.liveness.is_suspect(now);
            // A member that is not suspect gets its whole share from this target.
            m.restricted &= is_suspect;
            suspect.push(is_suspect);
        }
        if !suspect.contains(&true) {
            return targets;
        }
        let takers: Vec<usize> = self
            .members
            .values()
            .enumerate()
            // A drained member is given nothing, not even what a suspect cannot take.
            .filter(|(i, m)| !suspect[*i] && m.takes_grants(now) && !self.is_drained(m))
            .map(|(i, _)| i)
            .collect();
        let subscriptions: Vec<&[u32]> = self.members.values().map(|m| &*m.subscription).collect();
        let capacities: Vec<u64> = self
            .members
            .values()
            .map(|m| u64::from(capacity_of(m)))
            .collect();
        let mut cut = vec![false; targets.len()];
        for (i, m) in self.members.values().enumerate() {
            if !suspect[i] {
                continue;
            }
            let (keep, extra): (Vec<TopicPartition>, Vec<TopicPartition>) =
                targets[i].iter().partition(|tp| m.owned.contains(tp));
            let mut kept_back = Vec::new();
            for tp in extra {
                let subscribes = |t: &usize| subscriptions[*t].binary_search(&tp.topic).is_ok();
                // Fewest partitions per unit of capacity after taking this one.
                let fewest = |targets: &[Vec<TopicPartition>],
                              it: &mut dyn Iterator<Item = usize>| {
                    it.min_by(|&a, &b| {
                        let after = |t: usize| targets[t].len() as u64 + 1;
                        (after(a) * capacities[b]).cmp(&(after(b) * capacities[a]))
                    })
                };
                let home = steering.preferred(tp.topic, tp.partition);
                let taker = home
                    .and_then(|rack| {
                        fewest(
                            &targets,
                            &mut takers
                                .iter()
                                .copied()
                                .filter(subscribes)
                                .filter(|&t| steering.rack_of(t) == rack),
                        )
                    })
                    .or_else(|| fewest(&targets, &mut takers.iter().copied().filter(subscribes)));
                match taker {
                    Some(t) => {
                        targets[t].push(tp);
                        cut[i] = true;
                    }
                    None => kept_back.push(tp),
                }
            }
            targets[i] = keep;
            targets[i].extend(kept_back);
        }
        for (m, cut) in self.members.values_mut().zip(cut) {
            m.restricted |= cut;
        }
        for t in &mut targets {
            t.sort_unstable();
        }
        targets
    }

    /// Moves the group toward its target: asks owners to release partitions that move,
    /// grants free partitions to their targets, pushes what changed. A partition is never
    /// granted while another member owns it or while it is held for an expelled member.
    pub(crate) fn reconcile(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let before = self.held.len();
        self.expire_reservations(ctx);
        self.held.retain(|h| h.until > now);
        if self.held.len() != before {
            self.snapshot_dirty = true;
        }
        let held: BTreeSet<TopicPartition> = self
            .held
            .iter()
            .flat_map(|h| h.partitions.iter().copied())
            .collect();
        // With caps, the revocations asked are planned for the whole group first (the
        // grants below never change what a member must release).
        let caps = self.revocation_caps();
        match caps {
            Some(caps) => self.plan_revocations(now, caps),
            // Caps lifted: everything that waited is asked below.
            None => self.forget_waiting(),
        }

        let ids: Vec<Arc<str>> = self.members.keys().cloned().collect();
        let mut all_settled = self.pending.is_none();
        for id in &ids {
            // Grants: target partitions nobody owns and nobody holds.
            let Some(m) = self.members.get(id) else {
                continue;
            };
            // A member whose process stood down or whose connection closed takes nothing
            // new (see `Member::takes_grants`).
            let grants: Vec<TopicPartition> = if !m.takes_grants(now) {
                Vec::new()
            } else {
                m.target
                    .difference(&m.owned)
                    .filter(|tp| !self.owners.contains_key(tp) && !held.contains(tp))
                    .copied()
                    .collect()
            };
            let generation = m.generation;
            for tp in &grants {
                self.owners.insert(*tp, generation);
            }
            let Some(m) = self.members.get_mut(id) else {
                continue;
            };
            if !grants.is_empty() {
                m.owned.extend(grants);
                m.assignment_dirty = true;
                self.snapshot_dirty = true;
            }
            if m.owned != m.target {
                all_settled = false;
            }
            // Revocations: owned partitions that are no longer in the target, each
            // waited for from when it was first asked.
            if caps.is_none() {
                m.note_revocations(now);
            }
            let revoking: Vec<TopicPartition> = m.revoking_since.iter().map(|r| r.tp).collect();
            if let Some(deadline) = m.revoke_deadline() {
                let key = TimerKey::Member {
                    group: self.name.clone(),
                    member: id.clone(),
                };
                ctx.timers.schedule(&mut m.timer_at, deadline, key);
            }
            let m = &self.members[id];
            if m.assignment_dirty {
                let push = Push::Assignment(AssignmentPush {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    generation: m.generation,
                    partitions: self.to_wire(&m.owned),
                });
                ctx.push(m.conn, push);
            }
            // A revoke set that changed is pushed again, including when it became empty
            // because a newer target gave the partitions back: the member must hear that
            // it keeps them.
            if *revoking != *m.revoke_pushed {
                let push = Push::Revoke(RevokePush {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    generation: m.generation,
                    partitions: self.to_wire(&revoking),
                });
                ctx.push(m.conn, push);
            }
            let m = self.members.get_mut(id).expect("member exists");
            m.assignment_dirty = false;
            m.revoke_pushed = revoking.into_boxed_slice();
        }
        if all_settled {
            if let Some((since, generation)) = self.reconciling.take() {
                if !self.members.is_empty() {
                    ctx.event(Event::RebalanceCompleted {
                        group: self.name.to_string(),
                        generation,
                        duration: now.saturating_duration_since(since),
                    });
                }
            }
        }
        self.schedule_group_timer(ctx);
    }

    /// Releases partitions a member acknowledged and grants each onward to the member
    /// the target gives it to, pushing only to the members whose assignment changed.
    /// The incremental twin of [`Self::reconcile`] for the hottest path of a rebalance:
    /// it costs O(partitions acknowledged), not O(members).
    pub(crate) fn acknowledge_and_grant(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        acked: &[TopicPartition],
        generation: u32,
    ) {
        if !self.acknowledge(id, acked, generation) {
            return;
        }
        let held_any = !self.held.is_empty();
        // Each grant is recorded in `owners` at once (a partition acknowledged twice is
        // granted once) and added to its member's set with the member's other grants.
        let mut grants: Vec<(Arc<str>, TopicPartition)> = Vec::new();
        for tp in acked {
            if self.owners.contains_key(tp) {
                continue;
            }
            if held_any && self.held.iter().any(|h| h.partitions.contains(tp)) {
                continue;
            }
            let Some(to) = self.target_owner.get(tp) else {
                continue;
            };
            let Some(m) = self.members.get(to) else {
                continue;
            };
            if m.takes_grants(ctx.now) && m.target.contains(tp) && !m.owned.contains(tp) {
                self.owners.insert(*tp, m.generation);
                grants.push((to.clone(), *tp));
            }
        }
        grants.sort_unstable();
        for one_member in grants.chunk_by(|a, b| a.0 == b.0) {
            let Some(m) = self.members.get_mut(&one_member[0].0) else {
                continue;
            };
            m.owned.extend(one_member.iter().map(|(_, tp)| *tp));
            m.assignment_dirty = true;
        }
        let mut changed: Vec<Arc<str>> = vec![id.clone()];
        changed.extend(grants.into_iter().map(|(to, _)| to));
        changed.sort();
        changed.dedup();
        // With caps, what it released makes room for revocations that wait: asked now,
        // of the members whose turn it is (not of every member).
        let caps = self.revocation_caps();
        let asked_of = match caps {
            Some(caps) => {
                self.note_released(id);
                self.ask_waiting(ctx.now, caps)
            }
            None => Vec::new(),
        };
        for member in &changed {
            let Some(m) = self.members.get_mut(member) else {
                continue;
            };
            // What it released no longer waits (a later revocation keeps its own start).
            if caps.is_none() {
                m.note_revocations(ctx.now);
            }
            if m.revoking_since.is_empty() {
                m.revoke_pushed = Box::default();
            }
            m.assignment_dirty = false;
            let push = Push::Assignment(AssignmentPush {
                group: self.name.to_string(),
                member_id: member.to_string(),
                generation: m.generation,
                partitions: self.to_wire(&self.members[member].owned),
            });
            ctx.push(self.members[member].conn, push);
        }
        for member in &asked_of {
            let Some(m) = self.members.get(member) else {
                continue;
            };
            let revoking: Vec<TopicPartition> = m.revoking_since.iter().map(|r| r.tp).collect();
            let push = Push::Revoke(RevokePush {
                group: self.name.to_string(),
                member_id: member.to_string(),
                generation: m.generation,
                partitions: self.to_wire(&revoking),
            });
            ctx.push(m.conn, push);
            if let Some(m) = self.members.get_mut(member) {
                m.revoke_pushed = revoking.into_boxed_slice();
            }
            // Its newest revocations are waited for from now.
            self.schedule_member(ctx, member);
        }
        let unsettled = changed
            .iter()
            .filter_map(|id| self.members.get(id))
            .any(|m| m.owned != m.target);
        if !unsettled {
            self.check_settled(ctx);
        }
    }

    /// Emits `RebalanceCompleted` once every member holds exactly its target.
    pub(crate) fn check_settled(&mut self, ctx: &mut Ctx<'_>) {
        if self.reconciling.is_none() || self.pending.is_some() {
            return;
        }
        if self.members.values().all(|m| m.owned == m.target) {
            if let Some((since, generation)) = self.reconciling.take() {
                ctx.event(Event::RebalanceCompleted {
                    group: self.name.to_string(),
                    generation,
                    duration: ctx.now.saturating_duration_since(since),
                });
            }
        }
    }

    /// Releases partitions a member acknowledged in a frame of member generation
    /// `generation`. Only partitions it owns, no longer targets and was granted no
    /// later than `generation` are released; anything else in the list is ignored (an
    /// acknowledgement from before a grant is about an earlier ownership).
    pub(crate) fn acknowledge(
        &mut self,
        id: &Arc<str>,
        acked: &[TopicPartition],
        generation: u32,
    ) -> bool {
        let Some(m) = self.members.get(id) else {
            return false;
        };
        let mut gone: Vec<TopicPartition> = acked
            .iter()
            .filter(|tp| {
                !m.target.contains(tp) && m.owned.contains(tp) && self.granted_by(tp, generation)
            })
            .copied()
            .collect();
        if gone.is_empty() {
            return false;
        }
        let Some(m) = self.members.get_mut(id) else {
            return false;
        };
        // In one pass over the member's sets, however many were acknowledged.
        gone.sort_unstable();
        gone.dedup();
        m.owned.remove_sorted(&gone);
        for tp in &gone {
            self.owners.remove(tp);
        }
        m.released.extend(gone);
        m.assignment_dirty = true;
        self.snapshot_dirty = true;
        true
    }
}
