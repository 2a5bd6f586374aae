//! The worked examples in `docs/PROTOCOL.md` are the real encoder's output.
//!
//! Each example in the document is a fenced block whose info string is `hex` and whose
//! first line is `# example: NAME`. Every line holds hex byte pairs, optionally followed
//! by `#` and a comment. For each name this test knows the frame it stands for; it
//! checks that encoding the frame gives exactly the document's bytes and that decoding
//! the document's bytes gives the frame back, so the document cannot drift from the
//! code. It also checks that the document has an example of every request API at every
//! version, of every API's response, of every push and of an error response, so a new
//! message or version cannot be added without one.

use std::collections::{BTreeMap, BTreeSet};

use bytes::BytesMut;
use rollcall_protocol::{
    max_request_version, supported_versions, ApiKey, ApiVersionsRequest, ApiVersionsResponse,
    Arrival, ArrivalKind, AssignmentPush, AuthenticateRequest, AuthenticateResponse, Body,
    CommitOffsetsRequest, CommitOffsetsResponse, CommittedOffset, CoordinatorListing,
    DescribeGroupRequest, DescribeGroupResponse, DetectionSummary, ErrorCode, ExpelBasis,
    ExpelReason, ExpelledPush, FetchOffsetsRequest, FetchOffsetsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, Frame, FrameKind, GroupDetection, GroupListing, GroupState,
    HeartbeatRequest, HeartbeatResponse, HeartbeatResult, HeartbeatsRequest, HeartbeatsResponse,
    JoinRequest, JoinResponse, LeaveMode, LeaveRequest, ListCoordinatorsRequest,
    ListCoordinatorsResponse, ListGroupsRequest, ListGroupsResponse, Liveness, MemberDescription,
    MemberDetection, OffsetCommit, OffsetCursor, Page, PartitionResult, Push, PushKey,
    RelinquishRequest, Request, Response, RevokePush, ShutdownPush, TailCount, TopicPartitions,
    TopicSubscription, TraceGroupRequest, TraceGroupResponse, DEFAULT_MAX_FRAME_SIZE,
    LENGTH_PREFIX_SIZE,
};
use rollcall_protocol::{
    AlterGroupConfigRequest, AlterGroupConfigResponse, DrainRequest, DrainResponse, GroupOperator,
    GroupSettings, JoinPlacement, MemberOperator, PartitionLoad, Reservation, TopicRacks,
};

const DOC: &str = include_str!("../../docs/PROTOCOL.md");

const GROUP: &str = "billing";
const MEMBER: &str = "m-1a2b-7";
const TOPIC: &str = "invoices";
/// The second member of the Heartbeats example, in another group.
const OTHER_GROUP: &str = "ledger";
const OTHER_MEMBER: &str = "m-77c1-2";

fn tps(partitions: &[u32]) -> Vec<TopicPartitions> {
    vec![TopicPartitions {
        topic: TOPIC.into(),
        partitions: partitions.to_vec(),
    }]
}

/// The worked examples' DescribeGroup answer: one member, with the detector's view when
/// `detection` (versions 1 and 2), and `more` as a page gives it (version 2).
fn described(detection: bool, more: Option<bool>) -> Response {
    Response::DescribeGroup(DescribeGroupResponse {
        operator: None,
        group: GROUP.into(),
        state: GroupState::Stable,
        generation: 5,
        assignor: "sticky".into(),
        members: vec![MemberDescription {
            operator: None,
            member_id: MEMBER.into(),
            instance_id: None,
            client_id: "invoicer".into(),
            liveness: Liveness::Alive,
            since_heartbeat_ms: 1_200,
            since_progress_ms: 1_200,
            owned: tps(&[0, 1, 2]),
            pending_revoke: Vec::new(),
            pending_grant: Vec::new(),
            detection: detection.then_some(MemberDetection {
                in_state_ms: 600_000,
                phi_centi: 12,
                suspect_after_ms: 2_310,
                expel_after_ms: 3_620,
                gaps: 240,
                beats_lost: 1,
                beats_late: 0,
                gap_p50_ms: 2_047,
                gap_p99_ms: 2_559,
                gap_p999_ms: 3_071,
                gap_max_ms: 3_100,
                expel_basis: None,
            }),
        }],
        detection: detection.then(|| {
            Box::new(GroupDetection {
                detector: "adaptive".into(),
                shadow: Some("fixed".into()),
                summary: None,
            })
        }),
        more,
    })
}

/// The worked examples' DescribeGroup answer at version 3: the version 2 answer, with
/// what the detector has learned from the group's gaps and the member's expel basis.
fn described_v3() -> Response {
    let Response::DescribeGroup(mut r) = described(true, Some(false)) else {
        unreachable!()
    };
    if let Some(d) = r.members[0].detection.as_mut() {
        d.expel_basis = Some(ExpelBasis::Tail);
    }
    if let Some(d) = r.detection.as_mut() {
        d.summary = Some(DetectionSummary {
            pooled_gaps: 36_000,
            span_ms: 72_000_000,
            clean_gaps: 1_250,
            gap_median_ms: 2_047,
            gap_longest_ms: 3_100,
            longest_centi: 155,
            tail_gaps: 1_536,
            threshold_centi: 150,
            exceedances: 41,
            shape_milli: 120,
            scale_centi: 18,
            loss_runs: 3,
            lost_beats: 4,
            tail: vec![
                TailCount {
                    over_centi: 150,
                    gaps: 41,
                },
                TailCount {
                    over_centi: 200,
                    gaps: 6,
                },
            ],
        });
    }
    Response::DescribeGroup(r)
}

/// The worked examples' DescribeGroup answer at version 4: the version 3 answer, with
/// the group's settings, drains and reservations, and the member's placement, drained
/// state and load.
fn described_v4() -> Response {
    let Response::DescribeGroup(mut r) = described_v3() else {
        unreachable!()
    };
    r.operator = Some(Box::new(GroupOperator {
        config: settings(),
        drained_labels: vec!["host-7".into()],
        reservations: vec![Reservation {
            instance_id: "host-9".into(),
            member_id: "host-9#3".into(),
            partitions: 2,
            remaining_ms: 25_000,
        }],
    }));
    r.members[0].operator = Some(MemberOperator {
        label: "host-1".into(),
        rack: "eu-1a".into(),
        capacity: 2,
        drained: false,
        load: 1_250.5,
    });
    Response::DescribeGroup(r)
}

/// The settings of the AlterGroupConfig example's answer.
fn settings() -> GroupSettings {
    GroupSettings {
        departure_delay_ms: 30_000,
        max_revoking: 200,
        max_revoking_per_member: 0,
        balance: 1,
        churn_budget_permille: 100,
        imbalance_permille: 100,
    }
}

/// The example's join: a first join of a dynamic member, with lease timeout `lease_ms`
/// (0: the session timeout, sent at version 0).
fn join(lease_ms: u32) -> JoinRequest {
    JoinRequest {
        placement: None,
        group: GROUP.into(),
        member_id: None,
        instance_id: None,
        client_id: "invoicer".into(),
        join_token: 0x0123_4567_89ab_cdef,
        subscription: vec![TopicSubscription {
            topic: TOPIC.into(),
            partitions: 3,
        }],
        session_timeout_ms: 10_000,
        progress_timeout_ms: 300_000,
        rebalance_timeout_ms: 60_000,
        lease_timeout_ms: lease_ms,
        detector: String::new(),
    }
}

/// Every example the document shows, by name (in the order the document shows them).
fn examples() -> Vec<(&'static str, Frame)> {
    vec![
        (
            "api-versions-request",
            Frame::request(
                1,
                Request::ApiVersions(ApiVersionsRequest {
                    client_software: "example/1.0".into(),
                    versions: supported_versions(),
                }),
            ),
        ),
        (
            "api-versions-response",
            Frame::response(
                1,
                Response::ApiVersions(ApiVersionsResponse {
                    versions: supported_versions(),
                    max_frame_size: DEFAULT_MAX_FRAME_SIZE as u32,
                }),
            ),
        ),
        (
            "handshake-required-response",
            Frame::response(
                2,
                Response::error(
                    ApiKey::Join as u16,
                    ErrorCode::HandshakeRequired,
                    "send ApiVersions first",
                ),
            ),
        ),
        ("join-request-v0", Frame::request(2, Request::Join(join(0)))),
        (
            "join-request-v1",
            Frame::request(2, Request::Join(join(6_000))),
        ),
        (
            "join-request-v2",
            Frame::request(
                2,
                Request::Join(JoinRequest {
                    detector: "adaptive".into(),
                    ..join(6_000)
                }),
            ),
        ),
        (
            "join-request-v3",
            Frame::request(
                2,
                Request::Join(JoinRequest {
                    detector: "adaptive".into(),
                    placement: Some(Box::new(JoinPlacement {
                        label: "host-1".into(),
                        rack: "eu-1a".into(),
                        capacity: 2,
                        topic_racks: vec![TopicRacks {
                            topic: TOPIC.into(),
                            racks: vec!["eu-1a".into(), "eu-1b".into(), String::new()],
                        }],
                    })),
                    ..join(6_000)
                }),
            ),
        ),
        (
            "join-response",
            Frame::response(
                2,
                Response::Join(JoinResponse {
                    member_id: MEMBER.into(),
                    generation: 4,
                    heartbeat_interval_ms: 3_333,
                }),
            ),
        ),
        (
            "assignment-push",
            Frame::push(Push::Assignment(AssignmentPush {
                group: GROUP.into(),
                member_id: MEMBER.into(),
                generation: 5,
                partitions: tps(&[0, 1, 2]),
            })),
        ),
        (
            "heartbeat-request",
            Frame::request(
                3,
                Request::Heartbeat(HeartbeatRequest {
                    loads: Vec::new(),
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    generation: 5,
                    sequence: 1,
                    progress: 1_500,
                    acked_revocations: Vec::new(),
                }),
            ),
        ),
        (
            "heartbeat-request-v1",
            Frame::request(
                3,
                Request::Heartbeat(HeartbeatRequest {
                    loads: vec![
                        PartitionLoad {
                            topic: TOPIC.into(),
                            partition: 0,
                            load: 1_000.0,
                        },
                        PartitionLoad {
                            topic: TOPIC.into(),
                            partition: 2,
                            load: 250.5,
                        },
                    ],
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    generation: 5,
                    sequence: 2,
                    progress: 3_000,
                    acked_revocations: Vec::new(),
                }),
            ),
        ),
        (
            "heartbeats-request-v1",
            Frame::request(
                3,
                Request::Heartbeats(HeartbeatsRequest {
                    beats: vec![
                        HeartbeatRequest {
                            loads: vec![PartitionLoad {
                                topic: TOPIC.into(),
                                partition: 1,
                                load: 0.5,
                            }],
                            group: GROUP.into(),
                            member_id: MEMBER.into(),
                            generation: 5,
                            sequence: 3,
                            progress: 3_100,
                            acked_revocations: Vec::new(),
                        },
                        HeartbeatRequest {
                            loads: Vec::new(),
                            group: OTHER_GROUP.into(),
                            member_id: OTHER_MEMBER.into(),
                            generation: 2,
                            sequence: 41,
                            progress: 0,
                            acked_revocations: Vec::new(),
                        },
                    ],
                }),
            ),
        ),
        (
            "heartbeat-response",
            Frame::response(
                3,
                Response::Heartbeat(HeartbeatResponse {
                    generation: 5,
                    session_timeout_ms: 10_000,
                }),
            ),
        ),
        (
            "heartbeats-request",
            Frame::request(
                3,
                Request::Heartbeats(HeartbeatsRequest {
                    beats: vec![
                        HeartbeatRequest {
                            loads: Vec::new(),
                            group: GROUP.into(),
                            member_id: MEMBER.into(),
                            generation: 5,
                            sequence: 1,
                            progress: 1_500,
                            acked_revocations: Vec::new(),
                        },
                        HeartbeatRequest {
                            loads: Vec::new(),
                            group: OTHER_GROUP.into(),
                            member_id: OTHER_MEMBER.into(),
                            generation: 2,
                            sequence: 40,
                            progress: 0,
                            acked_revocations: Vec::new(),
                        },
                    ],
                }),
            ),
        ),
        (
            "heartbeats-response",
            Frame::response(
                3,
                Response::Heartbeats(HeartbeatsResponse {
                    results: vec![
                        HeartbeatResult {
                            code: ErrorCode::None,
                            generation: 5,
                            session_timeout_ms: 10_000,
                            message: String::new(),
                        },
                        HeartbeatResult {
                            code: ErrorCode::UnknownMember,
                            generation: 0,
                            session_timeout_ms: 0,
                            message: format!("member {OTHER_MEMBER:?} is not in the group"),
                        },
                    ],
                }),
            ),
        ),
        (
            "commit-offsets-request",
            Frame::request(
                4,
                Request::CommitOffsets(CommitOffsetsRequest {
                    group: GROUP.into(),
                    member_id: Some(MEMBER.into()),
                    generation: 5,
                    offsets: vec![
                        OffsetCommit {
                            topic: TOPIC.into(),
                            partition: 0,
                            offset: 812,
                            metadata: String::new(),
                        },
                        OffsetCommit {
                            topic: TOPIC.into(),
                            partition: 1,
                            offset: 688,
                            metadata: String::new(),
                        },
                    ],
                }),
            ),
        ),
        (
            "commit-offsets-response",
            Frame::response(
                4,
                Response::CommitOffsets(CommitOffsetsResponse {
                    results: [0, 1]
                        .map(|partition| PartitionResult {
                            topic: TOPIC.into(),
                            partition,
                            error: ErrorCode::None,
                        })
                        .to_vec(),
                }),
            ),
        ),
        (
            "fetch-offsets-request",
            Frame::request(
                5,
                Request::FetchOffsets(FetchOffsetsRequest {
                    group: GROUP.into(),
                    topics: vec![TOPIC.into()],
                    page: None,
                }),
            ),
        ),
        (
            "fetch-offsets-response",
            Frame::response(
                5,
                Response::FetchOffsets(FetchOffsetsResponse {
                    offsets: [(0, 812), (1, 688)]
                        .map(|(partition, offset)| CommittedOffset {
                            topic: TOPIC.into(),
                            partition,
                            offset,
                            metadata: String::new(),
                        })
                        .to_vec(),
                    more: None,
                }),
            ),
        ),
        (
            "fetch-offsets-request-v1",
            Frame::request(
                5,
                Request::FetchOffsets(FetchOffsetsRequest {
                    group: GROUP.into(),
                    topics: Vec::new(),
                    page: Some(Page {
                        after: Some(OffsetCursor {
                            topic: TOPIC.into(),
                            partition: 0,
                        }),
                        limit: 1,
                    }),
                }),
            ),
        ),
        (
            "fetch-offsets-response-v1",
            Frame::response(
                5,
                Response::FetchOffsets(FetchOffsetsResponse {
                    offsets: vec![CommittedOffset {
                        topic: TOPIC.into(),
                        partition: 1,
                        offset: 688,
                        metadata: String::new(),
                    }],
                    more: Some(true),
                }),
            ),
        ),
        (
            "list-groups-request",
            Frame::request(6, Request::ListGroups(ListGroupsRequest::default())),
        ),
        (
            "list-groups-response",
            Frame::response(
                6,
                Response::ListGroups(ListGroupsResponse {
                    groups: vec![GroupListing {
                        group: GROUP.into(),
                        state: GroupState::Stable,
                        generation: 5,
                        members: 1,
                    }],
                    more: None,
                }),
            ),
        ),
        (
            "list-groups-request-v1",
            Frame::request(
                6,
                Request::ListGroups(ListGroupsRequest {
                    page: Some(Page {
                        after: Some("audit".into()),
                        limit: 100,
                    }),
                }),
            ),
        ),
        (
            "list-groups-response-v1",
            Frame::response(
                6,
                Response::ListGroups(ListGroupsResponse {
                    groups: vec![GroupListing {
                        group: GROUP.into(),
                        state: GroupState::Stable,
                        generation: 5,
                        members: 1,
                    }],
                    more: Some(false),
                }),
            ),
        ),
        (
            "describe-group-request",
            Frame::request(
                7,
                Request::DescribeGroup(DescribeGroupRequest {
                    operator: false,
                    group: GROUP.into(),
                    detection: false,
                    page: None,
                    summary: false,
                }),
            ),
        ),
        (
            "describe-group-response",
            Frame::response(7, described(false, None)),
        ),
        (
            "describe-group-request-v1",
            Frame::request(
                7,
                Request::DescribeGroup(DescribeGroupRequest {
                    operator: false,
                    group: GROUP.into(),
                    detection: true,
                    page: None,
                    summary: false,
                }),
            ),
        ),
        (
            "describe-group-response-v1",
            Frame::response(7, described(true, None)),
        ),
        (
            "describe-group-request-v2",
            Frame::request(
                7,
                Request::DescribeGroup(DescribeGroupRequest {
                    operator: false,
                    group: GROUP.into(),
                    detection: true,
                    page: Some(Page {
                        after: None,
                        limit: 1,
                    }),
                    summary: false,
                }),
            ),
        ),
        (
            "describe-group-response-v2",
            Frame::response(7, described(true, Some(false))),
        ),
        (
            "describe-group-request-v3",
            Frame::request(
                7,
                Request::DescribeGroup(DescribeGroupRequest {
                    operator: false,
                    group: GROUP.into(),
                    detection: true,
                    page: Some(Page {
                        after: None,
                        limit: 1,
                    }),
                    summary: true,
                }),
            ),
        ),
        (
            "describe-group-response-v3",
            Frame::response(7, described_v3()),
        ),
        (
            "describe-group-request-v4",
            Frame::request(
                7,
                Request::DescribeGroup(DescribeGroupRequest {
                    operator: true,
                    group: GROUP.into(),
                    detection: true,
                    page: Some(Page {
                        after: None,
                        limit: 1,
                    }),
                    summary: true,
                }),
            ),
        ),
        (
            "describe-group-response-v4",
            Frame::response(7, described_v4()),
        ),
        (
            "drain-request",
            Frame::request(
                12,
                Request::Drain(DrainRequest {
                    group: GROUP.into(),
                    member_id: String::new(),
                    label: "host-1".into(),
                    drained: true,
                }),
            ),
        ),
        (
            "drain-response",
            Frame::response(
                12,
                Response::Drain(DrainResponse {
                    members: vec![MEMBER.into()],
                }),
            ),
        ),
        (
            "alter-group-config-request",
            Frame::request(
                13,
                Request::AlterGroupConfig(AlterGroupConfigRequest {
                    group: GROUP.into(),
                    departure_delay_ms: Some(30_000),
                    max_revoking: Some(200),
                    balance: Some(1),
                    ..Default::default()
                }),
            ),
        ),
        (
            "alter-group-config-response",
            Frame::response(
                13,
                Response::AlterGroupConfig(AlterGroupConfigResponse { config: settings() }),
            ),
        ),
        (
            "revoke-push",
            Frame::push(Push::Revoke(RevokePush {
                group: GROUP.into(),
                member_id: MEMBER.into(),
                generation: 6,
                partitions: tps(&[2]),
            })),
        ),
        (
            "heartbeat-request-acking",
            Frame::request(
                8,
                Request::Heartbeat(HeartbeatRequest {
                    loads: Vec::new(),
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    generation: 6,
                    sequence: 9,
                    progress: 14_250,
                    acked_revocations: tps(&[2]),
                }),
            ),
        ),
        (
            "leave-request-v0",
            Frame::request(
                9,
                Request::Leave(LeaveRequest {
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    mode: LeaveMode::Released,
                }),
            ),
        ),
        (
            "leave-request-v1",
            Frame::request(
                9,
                Request::Leave(LeaveRequest {
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    mode: LeaveMode::Unconfirmed,
                }),
            ),
        ),
        ("leave-response", Frame::response(9, Response::Leave)),
        (
            "expelled-push",
            Frame::push(Push::Expelled(ExpelledPush {
                group: GROUP.into(),
                member_id: MEMBER.into(),
                reason: ExpelReason::SessionExpired,
                message: "no heartbeat within the session timeout of 10s".into(),
            })),
        ),
        (
            "member-expelled-response",
            Frame::response(
                10,
                Response::error(
                    ApiKey::Heartbeat as u16,
                    ErrorCode::MemberExpelled,
                    format!("member {MEMBER:?} was expelled: session_expired"),
                ),
            ),
        ),
        (
            "relinquish-request",
            Frame::request(
                11,
                Request::Relinquish(RelinquishRequest {
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                }),
            ),
        ),
        (
            "relinquish-response",
            Frame::response(11, Response::Relinquish),
        ),
        (
            "trace-group-request",
            Frame::request(
                12,
                Request::TraceGroup(TraceGroupRequest {
                    group: GROUP.into(),
                    epoch: 1,
                    cursor: 2,
                    events: false,
                }),
            ),
        ),
        (
            "trace-group-request-v1",
            Frame::request(
                12,
                Request::TraceGroup(TraceGroupRequest {
                    group: GROUP.into(),
                    epoch: 1,
                    cursor: 2,
                    events: true,
                }),
            ),
        ),
        (
            "trace-group-response",
            Frame::response(
                12,
                Response::TraceGroup(TraceGroupResponse {
                    epoch: 1,
                    cursor: 4,
                    dropped: 0,
                    arrivals: vec![
                        Arrival {
                            member_id: MEMBER.into(),
                            at_us: 2_000_412,
                            ..Arrival::default()
                        },
                        Arrival {
                            member_id: MEMBER.into(),
                            at_us: 3_001_077,
                            ..Arrival::default()
                        },
                    ],
                    events: false,
                }),
            ),
        ),
        (
            "trace-group-response-v1",
            Frame::response(
                12,
                Response::TraceGroup(TraceGroupResponse {
                    epoch: 1,
                    cursor: 6,
                    dropped: 0,
                    arrivals: vec![
                        Arrival {
                            member_id: MEMBER.into(),
                            at_us: 2_000_412,
                            sequence: 3,
                            kind: ArrivalKind::Beat,
                            value_us: 0,
                        },
                        Arrival {
                            member_id: String::new(),
                            at_us: 2_962_000,
                            sequence: 0,
                            kind: ArrivalKind::Silence,
                            value_us: 62_000,
                        },
                        Arrival {
                            member_id: MEMBER.into(),
                            at_us: 3_001_077,
                            sequence: 4,
                            kind: ArrivalKind::Beat,
                            value_us: 0,
                        },
                        Arrival {
                            member_id: MEMBER.into(),
                            at_us: 3_418_000,
                            sequence: 0,
                            kind: ArrivalKind::Closed,
                            value_us: 0,
                        },
                    ],
                    events: true,
                }),
            ),
        ),
        (
            "authenticate-request",
            Frame::request(
                13,
                Request::Authenticate(AuthenticateRequest {
                    mechanism: "SCRAM-SHA-256".into(),
                    payload: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
                }),
            ),
        ),
        (
            "authenticate-response",
            Frame::response(
                13,
                Response::Authenticate(AuthenticateResponse {
                    payload: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                              s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
                        .into(),
                    complete: false,
                    principal: String::new(),
                }),
            ),
        ),
        (
            "not-coordinator-response",
            Frame::response(
                14,
                Response::error(
                    ApiKey::Heartbeat as u16,
                    ErrorCode::NotCoordinator,
                    format!("group {GROUP:?} is served by another coordinator"),
                ),
            ),
        ),
        (
            "find-coordinator-request",
            Frame::request(
                15,
                Request::FindCoordinator(FindCoordinatorRequest {
                    group: GROUP.into(),
                }),
            ),
        ),
        (
            "find-coordinator-response",
            Frame::response(
                15,
                Response::FindCoordinator(FindCoordinatorResponse {
                    addr: "10.0.0.2:7070".into(),
                }),
            ),
        ),
        (
            "heartbeat-request-moved",
            Frame::request(
                2,
                Request::Heartbeat(HeartbeatRequest {
                    loads: Vec::new(),
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    generation: 5,
                    sequence: 3,
                    progress: 1_500,
                    acked_revocations: Vec::new(),
                }),
            ),
        ),
        (
            "coordinator-loading-response",
            Frame::response(
                2,
                Response::error(
                    ApiKey::Heartbeat as u16,
                    ErrorCode::CoordinatorLoading,
                    format!("group {GROUP:?} is loading"),
                ),
            ),
        ),
        (
            "heartbeats-not-coordinator-response",
            Frame::response(
                3,
                Response::Heartbeats(HeartbeatsResponse {
                    results: vec![
                        HeartbeatResult {
                            code: ErrorCode::None,
                            generation: 5,
                            session_timeout_ms: 10_000,
                            message: String::new(),
                        },
                        HeartbeatResult {
                            code: ErrorCode::NotCoordinator,
                            generation: 0,
                            session_timeout_ms: 0,
                            message: format!(
                                "group {OTHER_GROUP:?} is served by another coordinator"
                            ),
                        },
                    ],
                }),
            ),
        ),
        (
            "shutdown-push",
            Frame::push(Push::Shutdown(ShutdownPush {
                message: "the coordinator is shutting down; reconnect with backoff".into(),
            })),
        ),
        (
            "list-coordinators-request",
            Frame::request(16, Request::ListCoordinators(ListCoordinatorsRequest)),
        ),
        (
            "list-coordinators-response",
            Frame::response(
                16,
                Response::ListCoordinators(ListCoordinatorsResponse {
                    coordinators: vec![
                        CoordinatorListing {
                            id: "c2".into(),
                            addr: "10.0.0.2:7070".into(),
                        },
                        CoordinatorListing {
                            id: "c3".into(),
                            addr: "10.0.0.3:7070".into(),
                        },
                    ],
                }),
            ),
        ),
    ]
}

/// The document's example blocks, by name.
fn doc_blocks() -> BTreeMap<String, Vec<u8>> {
    let mut blocks = BTreeMap::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```hex" {
            continue;
        }
        let first = lines.next().expect("a hex block has a first line");
        let name = first
            .trim()
            .strip_prefix("# example:")
            .unwrap_or_else(|| panic!("hex block starts with {first:?}, not `# example: NAME`"))
            .trim()
            .to_owned();
        let mut bytes = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            let data = line.split('#').next().unwrap_or("");
            for pair in data.split_whitespace() {
                assert!(
                    pair.len() == 2 && pair.bytes().all(|b| b.is_ascii_hexdigit()),
                    "example {name}: {pair:?} is not a hex byte (two hex digits)"
                );
                let byte = u8::from_str_radix(pair, 16).expect("two hex digits");
                bytes.push(byte);
            }
        }
        assert!(
            blocks.insert(name.clone(), bytes).is_none(),
            "example {name} appears twice"
        );
    }
    blocks
}

fn encode(frame: &Frame) -> Vec<u8> {
    let mut buf = BytesMut::new();
    frame
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .expect("encodes");
    buf.to_vec()
}

/// Prints the examples as hex, one line of 16 bytes at a time, when
/// `PRINT_EXAMPLES` is set: a starting point for a new example block.
#[test]
fn print_examples_on_request() {
    if std::env::var_os("PRINT_EXAMPLES").is_none() {
        return;
    }
    for (name, frame) in examples() {
        println!("# example: {name}");
        for chunk in encode(&frame).chunks(16) {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            println!("{}", hex.join(" "));
        }
        println!();
    }
}

/// Checks one example both ways: its length prefix counts the bytes after it, encoding
/// `frame` gives exactly `shown`, and decoding `shown` gives `frame`.
fn check(frame: &Frame, shown: &[u8]) -> Result<(), String> {
    let Some((prefix, rest)) = shown.split_first_chunk::<LENGTH_PREFIX_SIZE>() else {
        return Err(format!(
            "{} bytes, shorter than a length prefix",
            shown.len()
        ));
    };
    let declared = u32::from_be_bytes(*prefix) as usize;
    if declared != rest.len() {
        return Err(format!(
            "the length prefix says {declared} bytes follow, {} do",
            rest.len()
        ));
    }
    let encoded = encode(frame);
    if encoded != shown {
        let at = encoded
            .iter()
            .zip(shown)
            .position(|(a, b)| a != b)
            .unwrap_or(encoded.len().min(shown.len()));
        return Err(format!(
            "differs from the encoder's output from byte {at} on\n document: {shown:02x?}\n  encoder: {encoded:02x?}"
        ));
    }
    match Frame::decode(rest) {
        Ok(decoded) if decoded == *frame => Ok(()),
        Ok(decoded) => Err(format!("decodes to {decoded:?}")),
        Err(e) => Err(format!("does not decode: {e}")),
    }
}

#[test]
fn the_document_shows_exactly_these_examples() {
    let blocks = doc_blocks();
    let shown: Vec<&str> = blocks.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = examples().iter().map(|(name, _)| *name).collect();
    expected.sort_unstable();
    assert_eq!(shown, expected);
    // An example outside a `hex` block would escape every check.
    assert_eq!(
        DOC.matches("# example:").count(),
        blocks.len(),
        "an `# example:` line outside a hex block"
    );
}

#[test]
fn every_example_is_the_encoders_output_and_decodes_to_its_value() {
    let blocks = doc_blocks();
    let mut failures = Vec::new();
    for (name, frame) in examples() {
        let Some(shown) = blocks.get(name) else {
            continue; // reported by the_document_shows_exactly_these_examples
        };
        if let Err(e) = check(&frame, shown) {
            failures.push(format!("example {name} in docs/PROTOCOL.md: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The check cannot pass a document whose example differs from the encoder's output by
/// one byte, one byte more or one byte less.
#[test]
fn editing_any_byte_of_an_example_is_caught() {
    for (name, frame) in examples() {
        let right = encode(&frame);
        assert_eq!(check(&frame, &right), Ok(()), "example {name}");
        for at in 0..right.len() {
            for flip in [0x01, 0x80] {
                let mut edited = right.clone();
                edited[at] ^= flip;
                assert!(
                    check(&frame, &edited).is_err(),
                    "example {name}: changing byte {at} went unnoticed"
                );
            }
        }
        let mut longer = right.clone();
        longer.push(0);
        assert!(
            check(&frame, &longer).is_err(),
            "example {name}: extra byte"
        );
        assert!(
            check(&frame, &right[..right.len() - 1]).is_err(),
            "example {name}: missing byte"
        );
    }
}

/// Every request API at every version, every API's (successful) response, every push
/// and an error response have an example in the document: a new API, version or push
/// fails this test until the document shows it.
#[test]
fn every_message_and_version_has_an_example() {
    let mut requests = BTreeSet::new();
    let mut responses = BTreeSet::new();
    let mut pushes = BTreeSet::new();
    let mut errors = 0;
    for (name, shown) in doc_blocks() {
        let frame = Frame::decode(&shown[LENGTH_PREFIX_SIZE..])
            .unwrap_or_else(|e| panic!("example {name} does not decode: {e}"));
        let header = frame.header();
        match frame.body {
            Body::Request(_) => {
                requests.insert((header.api_key, header.api_version));
            }
            Body::Response(Response::Error(_)) => errors += 1,
            Body::Response(_) => {
                responses.insert(header.api_key);
            }
            Body::Push(_) => {
                pushes.insert(header.api_key);
            }
            Body::Unsupported(_) => panic!("example {name} is not a frame this build knows"),
        }
        assert_eq!(
            header.kind == FrameKind::Push,
            header.correlation_id == 0,
            "example {name}: pushes, and only pushes, have correlation id 0"
        );
    }
    let mut missing = Vec::new();
    for key in ApiKey::ALL {
        for version in 0..=max_request_version(key) {
            if !requests.contains(&(key as u16, version)) {
                missing.push(format!("{key:?} request v{version}"));
            }
        }
        if !responses.contains(&(key as u16)) {
            missing.push(format!("{key:?} response"));
        }
    }
    for key in PushKey::ALL {
        if !pushes.contains(&(key as u16)) {
            missing.push(format!("{key:?} push"));
        }
    }
    if errors == 0 {
        missing.push("an error response".to_owned());
    }
    assert!(
        missing.is_empty(),
        "docs/PROTOCOL.md has no example of: {}",
        missing.join(", ")
    );
}
