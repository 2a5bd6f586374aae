//! What the core says an input did: a request's [`Effects`](crate::core::Effects), and
//! the one definition of a member's frame.

use std::time::Duration;

use rollcall_protocol::{
    CommitOffsetsRequest, FetchOffsetsRequest, ListGroupsRequest, OffsetCommit, Request, Response,
};

use super::TestContext;
use crate::core::is_member_traffic;

fn commit(group: &str, member_id: Option<String>) -> Request {
    Request::CommitOffsets(CommitOffsetsRequest {
        group: group.into(),
        member_id,
        generation: 0,
        offsets: vec![OffsetCommit {
            topic: "orders".into(),
            partition: 0,
            offset: 1,
            metadata: String::new(),
        }],
    })
}

/// A member's commit is its frame; an admin commit (no member id) is not, nor is any
/// other request an operator's tool sends. The shell reports the frames it reads by
/// this rule and the core counts the requests it handles by it, so both give the
/// isolation guard the same evidence.
#[test]
fn an_admin_commit_is_not_member_traffic() {
    assert!(is_member_traffic(&commit("g", Some("m".into()))));
    assert!(!is_member_traffic(&commit("g", None)));
    assert!(!is_member_traffic(&Request::ListGroups(
        ListGroupsRequest::default()
    )));
    assert!(!is_member_traffic(&Request::FetchOffsets(
        FetchOffsetsRequest {
            group: "g".into(),
            topics: Vec::new(),
            page: None,
        }
    )));
}

/// An admin commit handled by the core does not end the server's silence, as the
/// isolation guard measures it; a member's frame does.
#[test]
fn an_admin_commit_does_not_end_the_servers_silence() {
    let mut t = TestContext::new();
    let mut m = t.join(1, "g", &[("orders", 2)]);
    t.advance(Duration::from_secs(1));
    t.expect_beat_ok(&mut m);
    t.advance(Duration::from_secs(4));
    let response = t
        .core
        .handle_request(t.now, 9, commit("other", None))
        .response;
    assert!(
        matches!(response, Response::CommitOffsets(_)),
        "{response:?}"
    );
    assert_eq!(
        t.core.guards.server_silence(t.now),
        Duration::from_secs(4),
        "an admin commit counted as a member's frame"
    );
    t.expect_beat_ok(&mut m);
    assert_eq!(t.core.guards.server_silence(t.now), Duration::ZERO);
}
