//! Membership requests: Join (with its validation, rejoins and static replacement),
//! Heartbeat and Leave, and the binding of members to connections.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use rollcall_protocol::{
    ApiKey, ErrorCode, ExpelReason, HeartbeatRequest, HeartbeatResponse, HeartbeatResult,
    HeartbeatsRequest, HeartbeatsResponse, JoinRequest, JoinResponse, LeaveMode, LeaveRequest,
    RelinquishRequest, Response, MAX_BEATS,
};

use super::group::{Ctx, Group, Member, Refusal, Timeouts};
use super::liveness::Beat;
use super::{refuse, ConnId, Coordinator, Event, Output, Quota, RebalanceCause, TopicPartition};
use super::{DetectorKind, MAX_MEMBER_ID_BYTES, MAX_NAME_BYTES};

impl Coordinator {
    pub(super) fn validate_join(&self, r: &JoinRequest) -> Result<Timeouts, Response> {
        let bad = |code, msg: String| Err(refuse(ApiKey::Join, code, msg));
        let c = &self.config;
        if r.group.is_empty() || r.group.len() > MAX_NAME_BYTES {
            return bad(
                ErrorCode::InvalidRequest,
                format!("group id must be 1 to {MAX_NAME_BYTES} bytes"),
            );
        }
        if r.join_token == 0 {
            return bad(
                ErrorCode::InvalidRequest,
                "join token must be nonzero".into(),
            );
        }
        let too_long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_NAME_BYTES);
        if r.client_id.len() > MAX_NAME_BYTES || too_long(&r.instance_id) {
            return bad(
                ErrorCode::InvalidRequest,
                format!("client and instance ids are at most {MAX_NAME_BYTES} bytes"),
            );
        }
        if r.member_id
            .as_ref()
            .is_some_and(|id| id.len() > MAX_MEMBER_ID_BYTES)
        {
            return bad(
                ErrorCode::InvalidRequest,
                format!("member ids are at most {MAX_MEMBER_ID_BYTES} bytes"),
            );
        }
        if r.instance_id.as_deref() == Some("") {
            return bad(
                ErrorCode::InvalidRequest,
                "instance id must not be empty".into(),
            );
        }
        if r.subscription.is_empty() {
            return bad(
                ErrorCode::InvalidRequest,
                "subscription must name at least one topic".into(),
            );
        }
        if !r.detector.is_empty() {
            if let Err(e) = r.detector.parse::<DetectorKind>() {
                return bad(ErrorCode::InvalidRequest, e.to_string());
            }
        }
        let mut names: Vec<&str> = Vec::with_capacity(r.subscription.len());
        for t in &r.subscription {
            if t.topic.is_empty() || t.topic.len() > MAX_NAME_BYTES {
                return bad(
                    ErrorCode::InvalidRequest,
                    format!("topic names must be 1 to {MAX_NAME_BYTES} bytes"),
                );
            }
            if t.partitions == 0 {
                return bad(
                    ErrorCode::InvalidRequest,
                    format!("topic {:?} must have at least one partition", t.topic),
                );
            }
            names.push(&t.topic);
        }
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return bad(
                ErrorCode::InvalidRequest,
                "subscription names a topic twice".into(),
            );
        }
        let session = Duration::from_millis(u64::from(r.session_timeout_ms));
        if session < c.min_session_timeout || session > c.max_session_timeout {
            return bad(
                ErrorCode::InvalidSessionTimeout,
                format!(
                    "session timeout {session:?} is outside the coordinator's bounds {:?}..={:?}",
                    c.min_session_timeout, c.max_session_timeout
                ),
            );
        }
        let progress = Duration::from_millis(u64::from(r.progress_timeout_ms));
        if progress.is_zero() || progress > c.max_progress_timeout {
            return bad(
                ErrorCode::InvalidRequest,
                format!(
                    "progress timeout {progress:?} must be above zero and at most {:?}",
                    c.max_progress_timeout
                ),
            );
        }
        let rebalance = Duration::from_millis(u64::from(r.rebalance_timeout_ms));
        if rebalance.is_zero() || rebalance > c.max_rebalance_timeout {
            return bad(
                ErrorCode::InvalidRequest,
                format!(
                    "rebalance timeout {rebalance:?} must be above zero and at most {:?}",
                    c.max_rebalance_timeout
                ),
            );
        }
        let lease = match r.lease_timeout_ms {
            0 => session,
            ms => Duration::from_millis(u64::from(ms)),
        };
        if lease < c.min_session_timeout || lease > session {
            return bad(
                ErrorCode::InvalidSessionTimeout,
                format!(
                    "lease timeout {lease:?} must be at least {:?} and at most the session timeout {session:?}",
                    c.min_session_timeout
                ),
            );
        }
        // Each was checked above as the Duration of these milliseconds.
        Ok(Timeouts {
            session_ms: r.session_timeout_ms,
            progress_ms: r.progress_timeout_ms,
            rebalance_ms: r.rebalance_timeout_ms,
            lease_ms: match r.lease_timeout_ms {
                0 => r.session_timeout_ms,
                ms => ms,
            },
        })
    }

    pub(super) fn join(&mut self, now: Instant, conn: ConnId, r: JoinRequest) -> Response {
        let timeouts = match self.validate_join(&r) {
            Ok(t) => t,
            Err(resp) => return resp,
        };
        let subscription: Vec<(String, u32)> = r
            .subscription
            .iter()
            .map(|t| (t.topic.clone(), t.partitions))
            .collect();
        // Static member ids name their instance, so a request from any older
        // incarnation can be fenced from the id alone (see `Group::gone_reason`).
        let member_id = Arc::<str>::from(match &r.instance_id {
            Some(instance) => format!(
                "{instance}#{}{}{}",
                self.config.member_id_prefix, self.next_member, self.config.member_id_suffix
            ),
            None => format!(
                "{}{}{}",
                self.config.member_id_prefix, self.next_member, self.config.member_id_suffix
            ),
        });
        let max_members = self.config.max_members_per_group;
        // A rejoin naming a member that is gone is told so (a stale incarnation of a
        // static instance is fenced): the member's partitions are lost, and it joins
        // again afresh, or gives up if fenced.
        if let Some(old) = &r.member_id {
            let group = self.groups.get(r.group.as_str());
            let known = group.is_some_and(|g| g.members.contains_key(old.as_str()));
            if !known {
                return Self::member_gone(group, ApiKey::Join, old);
            }
        }
        let max_groups = self.config.max_groups;
        if !self.groups.contains_key(r.group.as_str()) && self.totals.groups() >= max_groups {
            return self.quota_refused(
                ApiKey::Join,
                &r.group,
                Quota::Groups,
                ErrorCode::TooManyGroups,
                format!("the coordinator has its maximum of {max_groups} groups; group {:?} cannot be created", r.group),
            );
        }
        let others = self.usage_besides(&r.group);
        let partition_room = self.config.max_partitions.saturating_sub(others.partitions);
        let max_total_members = self.config.max_members;
        let floor = self.floor_of(&r.group);
        let (groups, mut ctx) = self.parts(now);
        let config = ctx.config;
        let group = groups
            .entry(Arc::from(r.group.as_str()))
            .or_insert_with_key(|name| Group::new(name.clone(), floor, config));
        // The first member chooses the group's detector; later joins must agree.
        if let Some(kind) = DetectorKind::parse(&r.detector) {
            if group.members.is_empty() {
                group.set_detector(kind, config);
            } else if group.detector.kind() != kind {
                return refuse(
                    ApiKey::Join,
                    ErrorCode::InvalidRequest,
                    format!(
                        "group {:?} judges its members with the {} detector; the join asks for {kind}",
                        r.group,
                        group.detector.kind()
                    ),
                );
            }
        }

        // A rejoin naming a live member, or a retried join (same token, and the same
        // instance, client and subscription: a token that merely collides with another
        // member's is not that member): same member. A rejoin naming a live member
        // with another instance id is refused: joined anew, it would leave the named
        // member in the group, holding its partitions until its session ran out.
        let existing = match &r.member_id {
            Some(id) => match (group.members.get_key_value(id.as_str()), &r.instance_id) {
                (Some((_, m)), Some(instance))
                    if m.instance_id.as_deref() != Some(instance.as_str()) =>
                {
                    return refuse(
                        ApiKey::Join,
                        ErrorCode::InconsistentMember,
                        match &m.instance_id {
                            Some(own) => {
                                format!("member {id:?} is instance {own:?}, not {instance:?}")
                            }
                            None => format!("member {id:?} has no instance id, not {instance:?}"),
                        },
                    );
                }
                (found, _) => found.map(|(k, _)| k.clone()),
            },
            None => group
                .tokens
                .get(&r.join_token)
                .filter(|id| {
                    group.members.get(id).is_some_and(|m| {
                        m.instance_id.as_deref() == r.instance_id.as_deref()
                            && *m.client_id == *r.client_id
                            && group.subscription_is(m, &subscription)
                    })
                })
                .cloned(),
        };
        if let Some(id) = existing {
            let resp = Self::rejoin(
                group,
                &mut ctx,
                conn,
                &id,
                &subscription,
                timeouts,
                partition_room,
            );
            return resp;
        }

        if let Some(instance) = &r.instance_id {
            // A join retried by a process whose incarnation newer ones have superseded
            // (its response was lost meanwhile): it must not take the instance back.
            if r.member_id.is_none() && group.token_fenced(instance, r.join_token) {
                return refuse(
                    ApiKey::Join,
                    ErrorCode::FencedInstance,
                    format!("a newer process took instance id {instance:?} since this join was first sent"),
                );
            }
        }
        let replacing = r
            .instance_id
            .as_ref()
            .and_then(|i| group.instance_member(i));
        let replaced = replacing.as_ref().and_then(|id| group.members.get(id));
        if let Err(refusal) =
            group.check_subscription(&subscription, ctx.config, replaced, partition_room)
        {
            return refusal_response(&mut ctx, &r.group, refusal);
        }
        if replacing.is_none() {
            if group.members.len() >= max_members {
                ctx.outputs
                    .push_back(quota_event(&r.group, Quota::GroupMembers));
                return refuse(
                    ApiKey::Join,
                    ErrorCode::GroupFull,
                    format!(
                        "group {:?} has its maximum of {max_members} members",
                        r.group
                    ),
                );
            }
            // The group counts its members, or its static instances if more.
            let new_instance = r
                .instance_id
                .as_ref()
                .is_some_and(|i| !group.instances.contains_key(i));
            let before = group.usage().members;
            let after =
                (group.members.len() + 1).max(group.instances.len() + usize::from(new_instance));
            if after > before && others.members + after > max_total_members {
                ctx.outputs.push_back(quota_event(&r.group, Quota::Members));
                return refuse(
                    ApiKey::Join,
                    ErrorCode::TooManyMembers,
                    format!(
                        "the coordinator has its maximum of {max_total_members} members over all groups"
                    ),
                );
            }
        }
        self.next_member += 1;
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return refuse(ApiKey::Join, ErrorCode::Internal, "group vanished");
        };
        let old_subscription = replacing
            .as_ref()
            .map(|old| group.unsubscribe_for_replacement(old));
        let topics = group.subscribe(&subscription);
        let subscription_changed = old_subscription.is_some_and(|old| old != topics);
        if let Some(instance) = &r.instance_id {
            group.register_instance(instance, member_id.clone(), r.join_token);
        }
        let member = group.new_member(
            now,
            member_id.clone(),
            r.instance_id.clone(),
            r.client_id.clone(),
            r.join_token,
            Some(conn),
            timeouts,
            topics,
        );
        match replacing {
            Some(old) => {
                group.replace_member(&mut ctx, &old, member, subscription_changed);
            }
            None => {
                group.insert_member(&mut ctx, member);
                ctx.outputs.push_back(Output::Event(Event::MemberJoined {
                    group: r.group.clone(),
                    member_id: member_id.to_string(),
                    instance_id: r.instance_id.clone(),
                }));
                group.trigger_rebalance(&mut ctx, RebalanceCause::Join);
            }
        }
        Response::Join(JoinResponse {
            member_id: member_id.to_string(),
            generation: group.generation,
            heartbeat_interval_ms: heartbeat_interval_ms(timeouts.lease()),
        })
    }

    /// A join for a member that is still in the group: rebinds it, applies a changed
    /// subscription (within `partition_room`, what the coordinator's partition quota
    /// leaves the group) or timeouts, and pushes its state again.
    pub(super) fn rejoin(
        group: &mut Group,
        ctx: &mut Ctx<'_>,
        conn: ConnId,
        id: &Arc<str>,
        subscription: &[(String, u32)],
        timeouts: Timeouts,
        partition_room: u64,
    ) -> Response {
        let now = ctx.now;
        if !group.subscription_is(&group.members[id], subscription) {
            if let Err(refusal) = group.check_subscription(
                subscription,
                ctx.config,
                group.members.get(id),
                partition_room,
            ) {
                let name = group.name.clone();
                return refusal_response(ctx, &name, refusal);
            }
            group.unsubscribe_for_replacement(id);
            let topics = group.subscribe(subscription);
            if let Some(m) = group.members.get_mut(id) {
                m.subscription = topics.into_boxed_slice();
            }
            group.snapshot_dirty = true;
            group.trigger_rebalance(ctx, RebalanceCause::Subscription);
        }
        let Some(m) = group.members.get_mut(id) else {
            return refuse(ApiKey::Join, ErrorCode::Internal, "member vanished");
        };
        if m.set_timeouts(timeouts, &*group.detector, group.shadow.as_deref()) {
            // Timeouts decide expiry and holds: a restart must bring the new ones back.
            group.snapshot_dirty = true;
        }
        if m.heard(now) {
            group.snapshot_dirty = true;
        }
        let resumed = m.bind(conn);
        // A shorter timeout can bring a deadline forward.
        group.schedule_member(ctx, id);
        let generation = group.generation;
        group.push_state(ctx, id);
        if resumed {
            group.reconcile(ctx);
        }
        Response::Join(JoinResponse {
            member_id: id.to_string(),
            generation,
            heartbeat_interval_ms: heartbeat_interval_ms(timeouts.lease()),
        })
    }

    /// The error for a request naming a member that is not in the group.
    pub(super) fn member_gone(group: Option<&Group>, key: ApiKey, member_id: &str) -> Response {
        match group.and_then(|g| g.gone_reason(member_id)) {
            Some(ExpelReason::Fenced) => refuse(
                key,
                ErrorCode::FencedInstance,
                format!("member {member_id:?} was fenced: a newer process took its instance id"),
            ),
            Some(ExpelReason::Left) | None => refuse(
                key,
                ErrorCode::UnknownMember,
                format!("member {member_id:?} is not in the group"),
            ),
            Some(reason) => refuse(
                key,
                ErrorCode::MemberExpelled,
                format!("member {member_id:?} was expelled: {}", reason.as_str()),
            ),
        }
    }

    /// Many members' heartbeats: each beat is handled as a Heartbeat alone would be, and
    /// answered in its place.
    pub(super) fn heartbeats(
        &mut self,
        now: Instant,
        conn: ConnId,
        r: HeartbeatsRequest,
    ) -> Response {
        if r.beats.is_empty() || r.beats.len() > MAX_BEATS {
            return refuse(
                ApiKey::Heartbeats,
                ErrorCode::InvalidRequest,
                format!("a Heartbeats request carries 1 to {MAX_BEATS} beats"),
            );
        }
        // A client sends its members' beats in the same order round after round.
        let mut slots = self.beat_slots.remove(&conn).unwrap_or_default();
        slots.resize(r.beats.len(), u32::MAX);
        self.touch_members(&r.beats, &slots);
        let results = r
            .beats
            .into_iter()
            .zip(slots.iter_mut())
            .map(|(beat, slot)| {
                HeartbeatResult::from_response(self.heartbeat_at(now, conn, beat, slot))
            })
            .collect();
        self.beat_slots.insert(conn, slots);
        Response::Heartbeats(HeartbeatsResponse { results })
    }

    /// Loads every beat's member, where it was found last time, before any is handled.
    ///
    /// A renewal's cost is mostly waiting for memory: the member's lines are rarely in
    /// cache (every member of the shard is touched once per heartbeat interval), and
    /// handling beat after beat waits for each member's lines in turn, since the code
    /// between the waits is too long for the processor to run ahead to the next
    /// member. These loops are short enough for it to have many members' lines on
    /// their way at once; handling then finds them in cache. One pass per step of the
    /// chain (group, the roster's entry, the member's lines), so no step waits on a
    /// miss of the one before for the same beat. Safe Rust has no prefetch, so the
    /// loads are real ones whose values are discarded. Measured on 10,000 members in
    /// Heartbeats of 100: a third more renewals per CPU-second (BENCHMARKS.md).
    fn touch_members(&self, beats: &[HeartbeatRequest], slots: &[u32]) {
        let groups: Vec<Option<&Group>> = beats
            .iter()
            .map(|beat| {
                let group = self.groups.get(&*beat.group);
                group.inspect(|g| g.touch())
            })
            .collect();
        let members: Vec<&Member> = groups
            .iter()
            .zip(slots)
            .filter_map(|(g, &slot)| {
                let (id, m) = (*g)?.members.get_index(slot as usize)?;
                // An entry may straddle two lines: the id's length is in its last byte.
                std::hint::black_box(id.len());
                Some(&**m)
            })
            .collect();
        for m in members {
            m.touch();
        }
    }

    pub(super) fn heartbeat(
        &mut self,
        now: Instant,
        conn: ConnId,
        r: HeartbeatRequest,
    ) -> Response {
        let mut slot = u32::MAX;
        self.heartbeat_at(now, conn, r, &mut slot)
    }

    fn heartbeat_at(
        &mut self,
        now: Instant,
        conn: ConnId,
        r: HeartbeatRequest,
        slot: &mut u32,
    ) -> Response {
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(&*r.group) else {
            return Self::member_gone(None, ApiKey::Heartbeat, &r.member_id);
        };
        let group_generation = group.generation;
        let Some(at) = group.members.find(&r.member_id, *slot) else {
            return Self::member_gone(Some(group), ApiKey::Heartbeat, &r.member_id);
        };
        *slot = at as u32;
        let m = group.members.at_mut(at);
        if r.generation > group_generation {
            return refuse(
                ApiKey::Heartbeat,
                ErrorCode::IllegalGeneration,
                format!(
                    "generation {} is newer than the group's {group_generation}",
                    r.generation
                ),
            );
        }
        let returned = m.heard(now);
        if let Some(trace) = &mut group.trace {
            if trace.lapsed(now) {
                group.trace = None;
            } else {
                trace.record(now, &m.id);
            }
        }
        let changes = m.liveness.beat(
            now,
            r.sequence,
            m.timeouts.session(),
            &*group.detector,
            group.shadow.as_deref(),
            ctx.config.detector_settings.recover_beats,
        );
        m.report_progress(now, r.progress);
        // Thresholds that shrank can bring a deadline before the member's timer.
        let earlier = m.timer_at.is_some_and(|t| m.next_deadline() < t);
        let rebound = m.conn != Some(conn);
        let resumed = m.bind(conn);
        let stale = r.generation != m.generation;
        let session_timeout_ms = m.timeouts.session_ms;
        let changed = changes != Beat::default();
        if returned {
            // It had stood down: a restart must not take that back as the last word.
            group.snapshot_dirty = true;
        }
        // The common case ends here: no acknowledgement, same connection, same generation.
        if r.acked_revocations.is_empty() && !rebound && !stale && !returned && !changed {
            let generation = m.generation;
            if earlier {
                let id = m.id.clone();
                group.schedule_member(&mut ctx, &id);
            }
            return Response::Heartbeat(HeartbeatResponse {
                generation,
                session_timeout_ms,
            });
        }
        let id = m.id.clone();
        if earlier {
            group.schedule_member(&mut ctx, &id);
        }
        if changed {
            group.after_beat(&mut ctx, &id, changes);
        }
        let acked: Vec<TopicPartition> = r
            .acked_revocations
            .iter()
            .flat_map(|tps| {
                tps.partitions
                    .iter()
                    .filter_map(|&p| group.resolve(&tps.topic, p))
            })
            .collect();
        // An acknowledgement of a partition the member is no longer asked to release (a
        // newer rebalance withdrew the revocation before it was read): the member has
        // stopped working on it and drops it once this is answered, so its assignment is
        // pushed again, after the answer, and it takes the partition back.
        let withdrawn = group.members.get(&id).is_some_and(|m| {
            acked
                .iter()
                .any(|tp| m.owned.contains(tp) && m.target.contains(tp))
        });
        if rebound || stale || withdrawn {
            group.push_state(&mut ctx, &id);
        }
        group.acknowledge_and_grant(&mut ctx, &id, &acked, r.generation);
        if resumed {
            group.reconcile(&mut ctx);
        }
        let generation = group.members[&id].generation;
        if rebound {
            self.bind(conn, &r.group, &r.member_id);
        }
        self.note_dirty(&r.group);
        Response::Heartbeat(HeartbeatResponse {
            generation,
            session_timeout_ms,
        })
    }

    pub(super) fn leave(&mut self, now: Instant, _conn: ConnId, r: LeaveRequest) -> Response {
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return Self::member_gone(None, ApiKey::Leave, &r.member_id);
        };
        let Some(id) = group
            .members
            .get_key_value(r.member_id.as_str())
            .map(|(k, _)| k.clone())
        else {
            return Self::member_gone(Some(group), ApiKey::Leave, &r.member_id);
        };
        let Some(m) = group.members.get_mut(&id) else {
            return refuse(ApiKey::Leave, ErrorCode::Internal, "member vanished");
        };
        match r.mode {
            // The member stopped acting on everything before it asked: its lease ends
            // now, and its partitions move at once.
            LeaveMode::Released => m.lease_until = now,
            // The application may still be acting: the partitions wait for the lease.
            LeaveMode::Unconfirmed => {}
            // A static member's process stopped acting and goes away; the member stays
            // (no rebalance) until its next process takes over, at once, or its session
            // expires. A dynamic member can never be taken over: it simply leaves.
            LeaveMode::StandDown => {
                if m.instance_id.is_some() {
                    // Its session runs from the stand-down, its lease is over.
                    m.renew_session(now);
                    m.lease_until = now;
                    m.stood_down = true;
                    m.conn = None;
                    m.conn_closed = false;
                    group.snapshot_dirty = true;
                    return Response::Leave;
                }
                m.lease_until = now;
            }
        }
        group.remove_member(&mut ctx, &id, ExpelReason::Left, "left".to_owned());
        group.reconcile(&mut ctx);
        Response::Leave
    }

    /// Connection `conn` closed. Its members may resume on another connection within
    /// their lease; one that does not is expelled when its lease runs out, without
    /// waiting for its session deadline (a crashed process closes its sockets).
    ///
    /// Costs O(members that were bound to `conn`), not O(members).
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) {
        if self.tick(now) {
            self.detect_pause(now);
        }
        let bound = self.bound.remove(&conn).unwrap_or_default();
        self.beat_slots.remove(&conn);
        let (groups, mut ctx) = self.parts(now);
        for (group, member) in bound {
            let Some(g) = groups.get_mut(&group) else {
                continue;
            };
            let Some(m) = g.members.get_mut(&member) else {
                continue;
            };
            if m.conn == Some(conn) {
                m.conn = None;
                m.conn_closed = true;
                g.schedule_member(&mut ctx, &member);
            }
        }
    }

    /// The process of an expelled (or replaced) member confirms that it stopped acting
    /// on its partitions: those held for it move at once.
    pub(super) fn relinquish(&mut self, now: Instant, r: RelinquishRequest) -> Response {
        if r.member_id.is_empty() {
            return refuse(
                ApiKey::Relinquish,
                ErrorCode::InvalidRequest,
                "the member id is empty",
            );
        }
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return refuse(
                ApiKey::Relinquish,
                ErrorCode::UnknownMember,
                "no such group",
            );
        };
        if group.members.contains_key(r.member_id.as_str()) {
            return refuse(
                ApiKey::Relinquish,
                ErrorCode::InvalidRequest,
                "the member is still in the group: leave instead",
            );
        }
        if group.relinquish(&mut ctx, &r.member_id)
            || group.removed.contains_key(r.member_id.as_str())
        {
            Response::Relinquish
        } else {
            refuse(
                ApiKey::Relinquish,
                ErrorCode::UnknownMember,
                "no partitions are held for this member id",
            )
        }
    }

    /// The answers to the Joins of `joined` (group, member id) left the coordinator at
    /// `at`, after their records were durable. A member cannot speak before its answer
    /// reaches it, so its session counts from then: a durable store that is slow to
    /// confirm does not expel the members it has just let in. (The lease is not moved:
    /// it was promised from the request.)
    pub fn answers_released(&mut self, at: Instant, joined: &[(String, String)]) {
        if self.tick(at) {
            self.detect_pause(at);
        }
        for (group, member) in joined {
            let Some(m) = self
                .groups
                .get_mut(group.as_str())
                .and_then(|g| g.members.get_mut(member.as_str()))
            else {
                continue;
            };
            m.renew_session(at);
            // Nor can it have made progress: a member that has reported none yet gets
            // its progress timeout from then too.
            if m.progress == 0 && at > m.last_progress_at {
                m.last_progress_at = at;
                m.progress_deadline = m.progress_deadline.max(at + m.progress_timeout());
            }
        }
    }

    /// Records that `member` of `group` now talks over `conn`.
    pub(super) fn bind(&mut self, conn: ConnId, group: &str, member: &str) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let Some((id, _)) = g.members.get_key_value(member) else {
            return;
        };
        let entry = (g.name.clone(), id.clone());
        let list = self.bound.entry(conn).or_default();
        list.push(entry);
        // A long-lived connection whose members come and go would pile up stale
        // entries; drop them whenever the list doubles.
        if list.len() >= 64 && list.len().is_power_of_two() {
            let groups = &self.groups;
            list.retain(|(group, member)| {
                groups
                    .get(group)
                    .and_then(|g| g.members.get(member))
                    .is_some_and(|m| m.conn == Some(conn))
            });
        }
    }
}

/// The event telling that a request on `group` went past `quota`.
pub(super) fn quota_event(group: &str, quota: Quota) -> Output {
    Output::Event(Event::QuotaRefused {
        group: group.to_owned(),
        quota,
    })
}

/// The answer to a join whose subscription was refused, and the event if a quota was
/// the reason.
fn refusal_response(ctx: &mut Ctx<'_>, group: &str, refusal: Refusal) -> Response {
    if let Some(quota) = refusal.quota {
        ctx.outputs.push_back(quota_event(group, quota));
    }
    refuse(ApiKey::Join, refusal.code, refusal.message)
}

impl Coordinator {
    /// Refuses a request that would take `quota` past its limit, and says so.
    pub(super) fn quota_refused(
        &mut self,
        key: ApiKey,
        group: &str,
        quota: Quota,
        code: ErrorCode,
        message: String,
    ) -> Response {
        self.outputs.push_back(quota_event(group, quota));
        refuse(key, code, message)
    }
}

/// The heartbeat interval suggested for a lease timeout (the session timeout unless the
/// member asked for a shorter lease): a third of it, so a lease (and so a session)
/// survives two lost beats.
fn heartbeat_interval_ms(lease: Duration) -> u32 {
    u32::try_from(lease.as_millis() / 3)
        .unwrap_or(u32::MAX)
        .max(1)
}
