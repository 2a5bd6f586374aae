//! Leave and Relinquish: a member going away, and the process of a member already gone
//! confirming it stopped acting on its partitions.

use std::time::Instant;

use rollcall_protocol::{
    ApiKey, ErrorCode, ExpelReason, LeaveMode, LeaveRequest, RelinquishRequest, Response,
};

use super::super::{refuse, ConnId, Coordinator};

impl Coordinator {
    pub(in crate::core) fn leave(
        &mut self,
        now: Instant,
        _conn: ConnId,
        r: LeaveRequest,
    ) -> Response {
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return Self::member_gone(None, ApiKey::Leave, &r.member_id);
        };
        let Some(id) = group
            .members
            .get_key_value(r.member_id.as_str())
            .map(|(k, _)| k.clone())
        else {
            // The process of a static member removed while away says it is gone for
            // good: the partitions reserved for its instance move now.
            if group.end_reservation_of(&mut ctx, &r.member_id) {
                group.reconcile(&mut ctx);
                return Response::Leave;
            }
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

    /// The process of an expelled (or replaced) member confirms that it stopped acting
    /// on its partitions: those held for it move at once.
    pub(in crate::core) fn relinquish(&mut self, now: Instant, r: RelinquishRequest) -> Response {
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
}
