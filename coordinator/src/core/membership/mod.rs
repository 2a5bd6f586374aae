//! Membership requests: Join (`join.rs`, validated in `validate.rs`), Heartbeat
//! (`heartbeat.rs`), Leave and Relinquish (`leave.rs`), and the binding of members to
//! connections (`connections.rs`); here, the answers and events they share.

mod connections;
mod heartbeat;
mod join;
mod leave;
mod validate;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{ApiKey, ErrorCode, ExpelReason, Response};

use super::group::{Ctx, Group, Refusal};
use super::{refuse, ConnId, Coordinator, Event, Output, Quota};

impl Coordinator {
    /// The error for a request naming a member that is not in the group.
    pub(in crate::core) fn member_gone(
        group: Option<&Group>,
        key: ApiKey,
        member_id: &str,
    ) -> Response {
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

    /// A frame for `group` arrived on `conn`. Members of the group that talked over
    /// `conn` and were expelled for silence were alive: a process on their connection
    /// speaks (typically rejoining after reading its expulsion). Each such expulsion is
    /// a proven false expulsion ([`Group::heard_from_expelled`]). Costs O(members bound
    /// to `conn`); only Joins ask.
    pub(in crate::core) fn heard_on(&mut self, now: Instant, conn: ConnId, group: &str) {
        let Some(bound) = self.bound.get(&conn) else {
            return;
        };
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let gone: Vec<Arc<str>> = bound
            .iter()
            .filter(|(in_group, member)| **in_group == *group && !g.members.contains_key(member))
            .map(|(_, member)| member.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        let (groups, mut ctx) = self.parts(now);
        if let Some(g) = groups.get_mut(group) {
            for member in gone {
                g.heard_from_expelled(&mut ctx, &member);
            }
        }
    }

    /// Refuses a request that would take `quota` past its limit, and says so.
    pub(in crate::core) fn quota_refused(
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

/// The event telling that a request on `group` went past `quota`.
pub(in crate::core) fn quota_event(group: &str, quota: Quota) -> Output {
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

/// The heartbeat interval suggested for a lease timeout (the session timeout unless the
/// member asked for a shorter lease): a third of it, so a lease (and so a session)
/// survives two lost beats.
fn heartbeat_interval_ms(lease: Duration) -> u32 {
    u32::try_from(lease.as_millis() / 3)
        .unwrap_or(u32::MAX)
        .max(1)
}
