//! Heartbeat and Heartbeats: renewing members' sessions and leases, acknowledging
//! revocations, and rebinding members that resumed on another connection.

use std::time::Instant;

use rollcall_protocol::{
    ApiKey, ErrorCode, HeartbeatRequest, HeartbeatResponse, HeartbeatResult, HeartbeatsRequest,
    HeartbeatsResponse, Response, MAX_BEATS,
};

use super::super::group::{Group, Member};
use super::super::liveness::{Beat, Judge};
use super::super::{refuse, ConnId, Coordinator, TopicPartition};

impl Coordinator {
    /// Many members' heartbeats: each beat is handled as a Heartbeat alone would be, and
    /// answered in its place.
    pub(in crate::core) fn heartbeats(
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

    pub(in crate::core) fn heartbeat(
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
        if let Some(bad) = r.loads.iter().find(|l| !l.load.is_finite() || l.load < 0.0) {
            return refuse(
                ApiKey::Heartbeat,
                ErrorCode::InvalidRequest,
                format!(
                    "load {} of {}/{} must be finite and not negative",
                    bad.load, bad.topic, bad.partition
                ),
            );
        }
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(&*r.group) else {
            return Self::member_gone(None, ApiKey::Heartbeat, &r.member_id);
        };
        let group_generation = group.generation;
        let Some(at) = group.members.find(&r.member_id, *slot) else {
            group.heard_from_expelled(&mut ctx, &r.member_id);
            return Self::member_gone(Some(group), ApiKey::Heartbeat, &r.member_id);
        };
        let members = group.members.len();
        *slot = at as u32;
        if !r.loads.is_empty() {
            group.record_loads(at, &r.loads);
            // Rate-limited, and only with load balance: usually a comparison.
            group.consider_loads(&mut ctx);
        }
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
                trace.beat(now, m, conn, r.sequence);
            }
        }
        let judge = Judge {
            detector: &*group.detector,
            shadow: group.shadow.as_deref(),
            settings: &ctx.config.detector_settings,
            members,
        };
        let changes = m.liveness.beat(
            now,
            r.sequence,
            m.timeouts.session(),
            judge,
            &mut group.fleet,
        );
        m.report_progress(now, r.progress);
        // Thresholds that shrank can bring a deadline before the member's timer.
        // So can the first heartbeat since a restore: the member's waits are judged from
        // now on.
        let earlier = m.timer_at.is_some_and(|t| m.next_judgment() < t);
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
}
