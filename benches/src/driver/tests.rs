use super::*;

#[test]
fn a_heartbeats_answer_is_split_into_lone_answers() {
    use rollcall_protocol::{HeartbeatResponse, HeartbeatsResponse};
    let results = vec![
        HeartbeatResult {
            code: ErrorCode::None,
            generation: 3,
            session_timeout_ms: 10_000,
            message: String::new(),
        },
        HeartbeatResult {
            code: ErrorCode::MemberExpelled,
            generation: 0,
            session_timeout_ms: 0,
            message: "gone".into(),
        },
    ];
    let answer = Response::Heartbeats(HeartbeatsResponse { results });
    assert_eq!(
        split_answer(2, answer.clone()),
        [
            Response::Heartbeat(HeartbeatResponse {
                generation: 3,
                session_timeout_ms: 10_000,
            }),
            Response::error(ApiKey::Heartbeat as u16, ErrorCode::MemberExpelled, "gone"),
        ]
    );
    // Another length, or an answer to the whole request, is every beat's answer.
    assert_eq!(split_answer(3, answer.clone()), vec![answer; 3]);
    let refused = Response::error(ApiKey::Heartbeats as u16, ErrorCode::InvalidRequest, "x");
    assert_eq!(split_answer(2, refused.clone()), vec![refused; 2]);
}

#[test]
fn members_per_connection_defaults() {
    assert_eq!(default_members_per_conn(100, 15_000), 1);
    assert_eq!(default_members_per_conn(5_000, 15_000), 1);
    assert_eq!(default_members_per_conn(10_000, 15_000), 1);
    assert_eq!(default_members_per_conn(100_000, 15_000), 7);
    assert_eq!(default_members_per_conn(100_000, 9_000), 12);
}
