//! A group as others see it: a member's description, and the snapshot the store keeps
//! and a restart restores from.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{MemberDescription, MemberDetection};

use super::super::records::{
    GroupSnapshot, HeldSnapshot, InstanceSnapshot, MemberSnapshot, OperatorSnapshot, WaitSnapshot,
};
use super::super::{CoreConfig, DetectorKind, RebalanceCause, TopicPartition};
use super::member::{checkpoint_interval, Revocation, NO_BEAT, UNHEARD};
use super::{duration_ms, Ctx, Group, Held, Instance, Member, Timeouts, Topic};

impl Group {
    /// Member `m` as describe shows it; with `detection` (the coordinator's
    /// configuration), how the detector judges it too.
    pub(crate) fn describe_member(
        &self,
        m: &Member,
        now: Instant,
        detection: Option<&CoreConfig>,
    ) -> MemberDescription {
        let pending_revoke: Vec<TopicPartition> = m.revoking();
        let pending_grant: Vec<TopicPartition> = m.target.difference(&m.owned).copied().collect();
        MemberDescription {
            member_id: m.id.to_string(),
            instance_id: m.instance_id.as_deref().map(str::to_owned),
            client_id: m.about.client_id.to_string(),
            liveness: m.liveness.liveness(now),
            since_heartbeat_ms: duration_ms(now.saturating_duration_since(m.liveness.last_heard())),
            since_progress_ms: duration_ms(now.saturating_duration_since(m.last_progress_at)),
            owned: self.to_wire(&m.owned),
            pending_revoke: self.to_wire(&pending_revoke),
            pending_grant: self.to_wire(&pending_grant),
            detection: detection.map(|config| describe_detection(m, now, config)),
            operator: None,
        }
    }

    /// The group's durable state at `now`.
    pub(crate) fn snapshot(&self, now: Instant) -> GroupSnapshot {
        let remaining = |until: Instant| duration_ms(until.saturating_duration_since(now));
        let pairs = |tps: &mut dyn Iterator<Item = &TopicPartition>| -> Vec<(u32, u32)> {
            tps.map(|tp| (tp.topic, tp.partition)).collect()
        };
        let mut instances: Vec<InstanceSnapshot> = self
            .instances
            .iter()
            .map(|(instance_id, i)| InstanceSnapshot {
                instance_id: instance_id.clone(),
                epoch: i.epoch,
                member_id: i.member_id.to_string(),
                join_token: i.token,
                fenced_tokens: i.fenced_tokens.clone(),
            })
            .collect();
        instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        GroupSnapshot {
            group: self.name.to_string(),
            generation: self.generation,
            topics: self
                .topics
                .iter()
                .map(|t| (t.name.clone(), t.partitions))
                .collect(),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.id.to_string(),
                    instance_id: m.instance_id.as_deref().map(str::to_owned),
                    client_id: m.about.client_id.to_string(),
                    join_token: m.join_token,
                    session_timeout_ms: m.timeouts.session_ms,
                    progress_timeout_ms: m.timeouts.progress_ms,
                    rebalance_timeout_ms: m.timeouts.rebalance_ms,
                    lease_timeout_ms: m.timeouts.lease_ms,
                    subscription: m.subscription.to_vec(),
                    generation: m.generation,
                    owned: pairs(&mut m.owned.iter()),
                    target: pairs(&mut m.target.iter()),
                    lease_remaining_ms: Some(remaining(m.lease_until)),
                    stood_down: m.stood_down,
                    released: pairs(&mut m.released.iter()),
                    restricted: m.restricted,
                    progress: Some(progress_wait(m, now)),
                    revoking: m
                        .revoking_since
                        .iter()
                        .map(|r| {
                            let wait = WaitSnapshot {
                                counter: 0,
                                waited_ms: duration_ms(now.saturating_duration_since(r.since)),
                                credit_ms: duration_ms(r.credit),
                                restores: u32::from(r.restores),
                            };
                            ((r.tp.topic, r.tp.partition), wait)
                        })
                        .collect(),
                })
                .collect(),
            held: self
                .held
                .iter()
                // A reservation whose delay just passed is kept (with nothing left)
                // until a reconciliation ends it with its rebalance: a restore in
                // between ends it then, instead of forgetting its partitions.
                .filter(|h| h.until > now || h.reserved_for.is_some())
                .map(|h| HeldSnapshot {
                    remaining_ms: remaining(h.until),
                    member_id: h.member.to_string(),
                    partitions: pairs(&mut h.partitions.iter()),
                    reserved_for: h.reserved_for.as_deref().map(str::to_owned),
                })
                .collect(),
            rebalance_pending: self.pending.as_ref().map(|p| p.cause.as_str().to_owned()),
            detector: self.detector.kind().as_str().to_owned(),
            instances,
            operator: Some(self.operator_snapshot())
                .filter(|o| !o.is_empty())
                .map(Box::new),
        }
    }

    /// The operator's durable state of the group.
    fn operator_snapshot(&self) -> OperatorSnapshot {
        OperatorSnapshot {
            config: (!self.config.is_default()).then_some(self.config),
            // Only those of members still here, or of static instances (which may come
            // back): a dynamic member that is gone never does.
            drained_members: self
                .drained_members
                .iter()
                .filter(|d| self.members.contains_key(d) || self.instances.contains_key(&***d))
                .map(|m| m.to_string())
                .collect(),
            drained_labels: self.drained_labels.iter().map(|l| l.to_string()).collect(),
            placements: self
                .members
                .values()
                .filter_map(|m| {
                    let p = m.about.placement.as_deref()?;
                    Some((
                        m.id.to_string(),
                        p.label.to_string(),
                        p.rack.to_string(),
                        p.capacity,
                    ))
                })
                .collect(),
            preferred_racks: self
                .topics
                .iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    let racks = t.preferred_racks.as_deref()?;
                    Some((i as u32, racks.iter().map(|r| r.to_string()).collect()))
                })
                .collect(),
        }
    }

    /// Restores what [`Self::operator_snapshot`] recorded (before the members are
    /// inserted: `placements` are looked up as they are).
    fn restore_operator(&mut self, o: &OperatorSnapshot) {
        self.config = o.config.unwrap_or_default();
        self.drained_members = o
            .drained_members
            .iter()
            .map(|m| m.as_str().into())
            .collect();
        self.drained_labels = o.drained_labels.iter().map(|l| l.as_str().into()).collect();
        for (topic, racks) in &o.preferred_racks {
            if let Some(t) = self.topics.get_mut(*topic as usize) {
                if racks.len() == t.partitions as usize {
                    t.preferred_racks = Some(racks.iter().map(|r| r.as_str().into()).collect());
                }
            }
        }
    }

    /// The group's durable state at `now`, taken to be written: its members' waits are
    /// recorded as of `now`, so their next checkpoints count from there.
    pub(crate) fn take_snapshot(&mut self, now: Instant) -> GroupSnapshot {
        let snapshot = self.snapshot(now);
        for m in self.members.values_mut() {
            m.noted_at = m.noted_at.max(now);
        }
        snapshot
    }

    /// Rebuilds a group from its snapshot. Every member gets a fresh session from `now`;
    /// holds and leases run for what they had left when the snapshot was taken, counted
    /// again from `now`; a rebalance that was pending is asked for again. The waits that
    /// can expel a member (for progress, for each revocation) resume with what they had
    /// counted when the snapshot was taken (see [`resume_waits`]). Returns the group, and
    /// whether it must be snapshotted again at once: a wait it carried over is recorded
    /// with the restore counted, so that the next restore halves its checkpoint interval
    /// again.
    pub(crate) fn restore(ctx: &mut Ctx<'_>, snapshot: GroupSnapshot) -> (Self, bool) {
        let now = ctx.now;
        let mut group = Self::new(Arc::from(snapshot.group.as_str()), 0, ctx.config);
        if let Some(kind) = DetectorKind::parse(&snapshot.detector) {
            group.set_detector(kind, ctx.config);
        }
        group.generation = snapshot.generation;
        for (name, partitions) in snapshot.topics {
            let idx = group.topics.len() as u32;
            group.topic_index.insert(name.clone(), idx);
            group.topics.push(Topic {
                name,
                partitions,
                subscribers: 0,
                preferred_racks: None,
            });
        }
        let operator = snapshot.operator.unwrap_or_default();
        group.restore_operator(&operator);
        let topic_count = group.topics.len() as u32;
        let tp = |(topic, partition): &(u32, u32)| TopicPartition {
            topic: *topic,
            partition: *partition,
        };
        for i in snapshot.instances {
            group.instances.insert(
                i.instance_id,
                Instance {
                    epoch: i.epoch,
                    member_id: Arc::from(i.member_id.as_str()),
                    token: i.join_token,
                    fenced_tokens: i.fenced_tokens,
                },
            );
        }
        let mut carried = false;
        for ms in snapshot.members {
            let subscription: Vec<u32> = ms
                .subscription
                .iter()
                .copied()
                .filter(|&t| t < topic_count)
                .collect();
            for &t in &subscription {
                group.topics[t as usize].subscribers += 1;
            }
            let mut member = group.new_member(
                now,
                Arc::from(ms.member_id.as_str()),
                ms.instance_id,
                ms.client_id,
                ms.join_token,
                None,
                Timeouts {
                    session_ms: ms.session_timeout_ms,
                    progress_ms: ms.progress_timeout_ms,
                    rebalance_ms: ms.rebalance_timeout_ms,
                    // Snapshots from before lease timeouts: the lease was the session.
                    lease_ms: match ms.lease_timeout_ms {
                        0 => ms.session_timeout_ms,
                        lease => lease.min(ms.session_timeout_ms),
                    },
                },
                subscription,
            );
            member.generation = ms.generation;
            if let Some((_, label, rack, capacity)) =
                operator.placements.iter().find(|p| p.0 == ms.member_id)
            {
                member.about.placement = super::Placement::boxed(label, rack, *capacity);
            }
            carried |= resume_waits(&mut member, now, ms.progress, &ms.revoking, &tp);
            // Heartbeats renew the lease without a snapshot: any lease promised before
            // the restart ends within a lease timeout of it, or later if a longer one
            // was promised before a rejoin shortened the timeout.
            member.lease_until = if ms.stood_down {
                now
            } else {
                let remaining = Duration::from_millis(ms.lease_remaining_ms.unwrap_or(0));
                member.lease_until.max(now + remaining)
            };
            member.stood_down = ms.stood_down;
            member.since_restore = UNHEARD | NO_BEAT;
            // A snapshot written before instances were recorded: the member is its
            // instance's latest incarnation.
            if let Some(instance) = &member.instance_id {
                if !group.instances.contains_key(&**instance) {
                    group.instances.insert(
                        instance.to_string(),
                        Instance {
                            epoch: 1,
                            member_id: member.id.clone(),
                            token: member.join_token,
                            fenced_tokens: Vec::new(),
                        },
                    );
                }
            }
            // A partition claimed twice (impossible unless the file was edited) stays
            // with the first claimant.
            member.owned = ms
                .owned
                .iter()
                .map(tp)
                .filter(|tp| !group.owners.contains_key(tp))
                .collect();
            member.target = ms.target.iter().map(tp).collect();
            member.released = ms.released.iter().map(tp).collect();
            // Its share was cut while it was suspect: it is suspect again until its
            // on-time beats bring it back, and with them the rebalance that restores
            // its share (a restored member is otherwise alive, and only reconciled).
            if ms.restricted {
                member.restricted = true;
                member.liveness.suspect_from(now);
            }
            for t in &member.target {
                group.target_owner.insert(*t, member.id.clone());
            }
            group.insert_member(ctx, member);
        }
        for h in snapshot.held {
            let until = now + Duration::from_millis(h.remaining_ms);
            let partitions: Vec<TopicPartition> = h.partitions.iter().map(tp).collect();
            group.held.push(Held {
                until,
                member: Arc::from(h.member_id.as_str()),
                partitions,
                reserved_for: h.reserved_for.map(String::into_boxed_str),
            });
        }
        group.schedule_reservation_checkpoint(ctx);
        group.recount_footprint();
        if group.members.values().any(|m| m.owned != m.target) {
            group.reconciling = Some((now, group.generation));
        }
        if let Some(cause) = snapshot.rebalance_pending {
            let cause = RebalanceCause::parse(&cause).unwrap_or(RebalanceCause::Join);
            group.trigger_rebalance(ctx, cause);
        }
        group.snapshot_dirty = false;
        group.reconcile(ctx);
        group.snapshot_dirty = false;
        (group, carried)
    }
}

/// Member `m`'s wait for progress at `now`, as a snapshot records it.
fn progress_wait(m: &Member, now: Instant) -> WaitSnapshot {
    let credit = if m.progress_credit_at == m.progress {
        u64::from(m.progress_credit_ms)
    } else {
        0
    };
    WaitSnapshot {
        counter: m.progress,
        waited_ms: duration_ms(m.progress_waited(now)),
        credit_ms: credit,
        restores: u32::from(m.progress_restores()),
    }
}

/// Resumes the waits a snapshot recorded (`progress`, `revoking`) on restored member `m`
/// at `now`: each one has counted
/// what it had counted when the snapshot was taken, so it runs on for what remained of
/// its timeout, however many restores it has been through. The time between the snapshot
/// and `now` is not counted: the store cannot tell how much of it the coordinator ran (a
/// checkpoint bounds that part, see [`checkpoint_interval`]) and how much it was down
/// (never counted against a member). What isolations gave back stays given, so their cap
/// holds across restores. A snapshot without waits (written before they were kept)
/// starts them afresh, as restores did then.
///
/// Returns whether a wait worth recording again was carried over: a revocation, or a
/// wait for progress that had run at least its checkpoint interval (a member whose
/// counter is stuck). Waits shorter than that are the members' ordinary ones; recording
/// them at every restore would write every group.
fn resume_waits(
    m: &mut Member,
    now: Instant,
    progress: Option<WaitSnapshot>,
    revoking: &[((u32, u32), WaitSnapshot)],
    tp: &dyn Fn(&(u32, u32)) -> TopicPartition,
) -> bool {
    let since = |waited_ms: u64| {
        now.checked_sub(Duration::from_millis(waited_ms))
            .unwrap_or(now)
    };
    let restores = |r: u32| u8::try_from(r.saturating_add(1)).unwrap_or(u8::MAX);
    // A carried revocation waits for the member's first heartbeat no longer than the
    // session the restore gives it.
    let deferred_to = m.session_deadline();
    let mut carried = false;
    if let Some(p) = progress {
        let timeout = m.progress_timeout();
        let waited = Duration::from_millis(p.waited_ms).min(timeout);
        m.progress = p.counter;
        m.progress_deadline = now + (timeout - waited);
        m.last_progress_at = since(p.waited_ms);
        m.progress_credit_ms = u32::try_from(p.credit_ms).unwrap_or(u32::MAX);
        m.progress_credit_at = p.counter;
        m.progress_restores = restores(p.restores);
        carried |= waited >= checkpoint_interval(timeout, 0);
    }
    let mut revoking: Vec<Revocation> = revoking
        .iter()
        .map(|(pair, w)| Revocation {
            tp: tp(pair),
            since: since(w.waited_ms),
            credit: Duration::from_millis(w.credit_ms),
            restores: restores(w.restores),
            deferred_to,
        })
        .collect();
    revoking.sort_by_key(|r| r.tp);
    revoking.dedup_by(|a, b| a.tp == b.tp);
    carried |= !revoking.is_empty();
    m.revoking_since = revoking.into_boxed_slice();
    carried
}

/// How the detector judges `m` at `now`.
fn describe_detection(m: &Member, now: Instant, config: &CoreConfig) -> MemberDetection {
    let w = &m.liveness;
    let a = w.arrivals();
    let t = w.thresholds();
    let ms32 = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    let silence = now.saturating_duration_since(w.last_heard());
    let phi = a.phi(silence, config.detector_settings.min_history);
    MemberDetection {
        in_state_ms: duration_ms(now.saturating_duration_since(w.since())),
        phi_centi: (phi * 100.0).round().clamp(0.0, f64::from(u32::MAX)) as u32,
        suspect_after_ms: ms32(t.suspect_after),
        expel_after_ms: ms32(t.expel_after),
        gaps: a.learned(),
        beats_lost: a.lost(),
        beats_late: a.late(),
        gap_p50_ms: ms32(a.quantile(0.5)),
        gap_p99_ms: ms32(a.quantile(0.99)),
        gap_p999_ms: ms32(a.quantile(0.999)),
        gap_max_ms: ms32(a.longest()),
        expel_basis: None,
    }
}
