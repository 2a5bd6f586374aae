//! What an input did, as the core says it: a request's [`Effects`], and the one rule
//! for which frames are a member's ([`is_member_traffic`]).

use rollcall_protocol::{CommitOffsetsRequest, Request, Response};

#[cfg(doc)]
use super::Coordinator;

/// What one request did, as [`Coordinator::handle_request`] returns it: its answer, and
/// what the shell needs to know to send it.
#[derive(Debug)]
#[must_use]
pub struct Effects {
    /// The answer to the request.
    pub response: Response,
    /// Whether the request changed durable state: the next [`Coordinator::take_records`]
    /// returns records for it, and the response stands only once they are durable (if
    /// they cannot be made durable, the answer is `storage_failure`). Exact, not
    /// inferred: a group changed again before its snapshot was taken counts too.
    pub wrote: bool,
    /// The member a Join admitted (group, member id). Once the answer has left, the
    /// shell tells [`Coordinator::answers_released`], and its session counts from then.
    pub joined: Option<(String, String)>,
}

/// Whether `request` is a member's frame: what the isolation guard takes as evidence
/// that the coordinator can hear its members. The core counts the requests it handles
/// by it, and the shell the frames it reads on every connection
/// ([`Coordinator::observe_traffic`]), so both report the same evidence.
///
/// Join, Heartbeat, Heartbeats, Leave, and a commit that names a member. Not an admin
/// commit (no member id), nor any request of an operator's tool (ListGroups,
/// DescribeGroup, FetchOffsets, TraceGroup), nor Relinquish (sent by the process of a
/// member that is gone). An operator's tool often runs beside the coordinator (on its
/// host, or in its network), so its frames arriving says nothing about whether the
/// members' frames can: counted, one script committing offsets during a partition that
/// cut the members off would end the isolation hold and expel every member the
/// partition silenced. Not counted, the worst case is the guard's own bound (a silence
/// held for at most one more expel threshold while a tool is heard).
pub fn is_member_traffic(request: &Request) -> bool {
    matches!(
        request,
        Request::Join(_)
            | Request::Heartbeat(_)
            | Request::Heartbeats(_)
            | Request::Leave(_)
            | Request::CommitOffsets(CommitOffsetsRequest {
                member_id: Some(_),
                ..
            })
    )
}
