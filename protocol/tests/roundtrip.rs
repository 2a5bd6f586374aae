//! Property tests: every message survives an encode/decode round trip, however the bytes
//! are split on the way, and no input whatsoever panics the decoder or makes it reserve
//! more than one maximum-size frame.

use bytes::BytesMut;
use proptest::prelude::*;
use rollcall_protocol::{
    max_request_version, ApiKey, ApiVersionRange, ApiVersionsRequest, ApiVersionsResponse, Arrival,
    ArrivalKind, AssignmentPush, AuthenticateRequest, AuthenticateResponse, Body, Codec,
    CommitOffsetsRequest, CommitOffsetsResponse, CommittedOffset, CoordinatorListing,
    DescribeGroupRequest, DescribeGroupResponse, DetectionSummary, ErrorCode, ErrorResponse,
    ExpelBasis, ExpelReason, ExpelledPush, FetchOffsetsRequest, FetchOffsetsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, Frame, FrameError, FrameKind, GroupDetection,
    GroupListing, GroupState, Header, HeartbeatRequest, HeartbeatResponse, HeartbeatResult,
    HeartbeatsRequest, HeartbeatsResponse, JoinRequest, JoinResponse, LeaveMode, LeaveRequest,
    ListCoordinatorsRequest, ListCoordinatorsResponse, ListGroupsRequest, ListGroupsResponse,
    Liveness, MemberDescription, MemberDetection, OffsetCommit, OffsetCursor, Page,
    PartitionResult, Push, PushKey, RelinquishRequest, Request, Response, RevokePush, ShutdownPush,
    TailCount, TopicPartitions, TopicSubscription, TraceGroupRequest, TraceGroupResponse,
    CURRENT_VERSION, LENGTH_PREFIX_SIZE,
};
use tokio_util::codec::{Decoder, Encoder};

/// A small frame limit for the robustness properties, so random lengths often land
/// on both sides of it.
const SMALL_MAX: usize = 512;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Short strings drawn from all of Unicode, so multi-byte UTF-8 is exercised.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        4 => "[a-z0-9._-]{1,12}",
        2 => prop::collection::vec(any::<char>(), 1..8).prop_map(String::from_iter),
    ]
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    prop::option::of(text())
}

fn page<C: std::fmt::Debug + Clone>(
    cursor: impl Strategy<Value = C>,
) -> impl Strategy<Value = Page<C>> {
    (prop::option::of(cursor), any::<u32>()).prop_map(|(after, limit)| Page { after, limit })
}

fn small_vec<T: std::fmt::Debug>(
    element: impl Strategy<Value = T>,
) -> impl Strategy<Value = Vec<T>> {
    prop::collection::vec(element, 0..4)
}

fn topic_partitions() -> impl Strategy<Value = TopicPartitions> {
    (text(), small_vec(any::<u32>()))
        .prop_map(|(topic, partitions)| TopicPartitions { topic, partitions })
}

fn version_range() -> impl Strategy<Value = ApiVersionRange> {
    (any::<u16>(), any::<u16>(), any::<u16>()).prop_map(|(api_key, min_version, max_version)| {
        ApiVersionRange {
            api_key,
            min_version,
            max_version,
        }
    })
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop::sample::select(ErrorCode::ALL)
}

fn failure_code() -> impl Strategy<Value = ErrorCode> {
    error_code().prop_filter("an error, not success", |c| *c != ErrorCode::None)
}

fn group_state() -> impl Strategy<Value = GroupState> {
    prop_oneof![
        Just(GroupState::Empty),
        Just(GroupState::Reconciling),
        Just(GroupState::Stable),
    ]
}

fn liveness() -> impl Strategy<Value = Liveness> {
    prop_oneof![Just(Liveness::Alive), Just(Liveness::Suspect)]
}

fn expel_reason() -> impl Strategy<Value = ExpelReason> {
    prop_oneof![
        Just(ExpelReason::SessionExpired),
        Just(ExpelReason::ProgressExpired),
        Just(ExpelReason::RebalanceTimeout),
        Just(ExpelReason::Fenced),
        Just(ExpelReason::Left),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    let api_versions =
        (text(), small_vec(version_range())).prop_map(|(client_software, versions)| {
            Request::ApiVersions(ApiVersionsRequest {
                client_software,
                versions,
            })
        });
    let placement = prop::option::of(
        (
            text(),
            text(),
            any::<u32>(),
            small_vec((text(), small_vec(text()))),
        )
            .prop_map(|(label, rack, capacity, racks)| {
                Box::new(rollcall_protocol::JoinPlacement {
                    label,
                    rack,
                    capacity,
                    topic_racks: racks
                        .into_iter()
                        .map(|(topic, racks)| rollcall_protocol::TopicRacks { topic, racks })
                        .collect(),
                })
            }),
    );
    let join = (
        (text(), opt_text(), opt_text(), text(), any::<u64>()),
        small_vec((text(), any::<u32>())),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        text(),
        placement,
    )
        .prop_map(
            |(
                (group, member_id, instance_id, client_id, join_token),
                subscription,
                (session_timeout_ms, progress_timeout_ms, rebalance_timeout_ms, lease_timeout_ms),
                detector,
                placement,
            )| {
                Request::Join(JoinRequest {
                    placement,
                    group,
                    member_id,
                    instance_id,
                    client_id,
                    join_token,
                    subscription: subscription
                        .into_iter()
                        .map(|(topic, partitions)| TopicSubscription { topic, partitions })
                        .collect(),
                    session_timeout_ms,
                    progress_timeout_ms,
                    rebalance_timeout_ms,
                    lease_timeout_ms,
                    detector,
                })
            },
        );
    let heartbeat = heartbeat_request().prop_map(Request::Heartbeat);
    // Any number of beats encodes and decodes; 1 to MAX_BEATS is the coordinator's rule.
    let heartbeats = small_vec(heartbeat_request())
        .prop_map(|beats| Request::Heartbeats(HeartbeatsRequest { beats }));
    let mode = prop_oneof![
        Just(LeaveMode::Released),
        Just(LeaveMode::Unconfirmed),
        Just(LeaveMode::StandDown),
    ];
    let leave = (text(), text(), mode).prop_map(|(group, member_id, mode)| {
        Request::Leave(LeaveRequest {
            group,
            member_id,
            mode,
        })
    });
    let offset_commit = (text(), any::<u32>(), any::<i64>(), text()).prop_map(
        |(topic, partition, offset, metadata)| OffsetCommit {
            topic,
            partition,
            offset,
            metadata,
        },
    );
    let commit = (text(), opt_text(), any::<u32>(), small_vec(offset_commit)).prop_map(
        |(group, member_id, generation, offsets)| {
            Request::CommitOffsets(CommitOffsetsRequest {
                group,
                member_id,
                generation,
                offsets,
            })
        },
    );
    let cursor =
        (text(), any::<u32>()).prop_map(|(topic, partition)| OffsetCursor { topic, partition });
    let fetch = (text(), small_vec(text()), prop::option::of(page(cursor))).prop_map(
        |(group, topics, page)| {
            Request::FetchOffsets(FetchOffsetsRequest {
                group,
                topics,
                page,
            })
        },
    );
    // A page is asked for at version 2, which always has the detection details.
    // Version 3 (the summary) is version 2's body: a summary comes with a page.
    let describe = (
        text(),
        any::<bool>(),
        prop::option::of(page(text())),
        any::<bool>(),
    )
        .prop_map(|(group, detection, page, summary)| {
            Request::DescribeGroup(DescribeGroupRequest {
                operator: false,
                group,
                detection: detection || page.is_some(),
                summary: summary && page.is_some(),
                page,
            })
        });
    let list = prop::option::of(page(text()))
        .prop_map(|page| Request::ListGroups(ListGroupsRequest { page }));
    let relinquish = (text(), text())
        .prop_map(|(group, member_id)| Request::Relinquish(RelinquishRequest { group, member_id }));
    let trace = (text(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
        |(group, epoch, cursor, events)| {
            Request::TraceGroup(TraceGroupRequest {
                group,
                epoch,
                cursor,
                events,
            })
        },
    );
    let authenticate = (text(), text()).prop_map(|(mechanism, payload)| {
        Request::Authenticate(AuthenticateRequest { mechanism, payload })
    });
    let find = text().prop_map(|group| Request::FindCoordinator(FindCoordinatorRequest { group }));
    let coordinators = Just(Request::ListCoordinators(ListCoordinatorsRequest));
    let drain =
        (text(), text(), text(), any::<bool>()).prop_map(|(group, member_id, label, drained)| {
            Request::Drain(rollcall_protocol::DrainRequest {
                group,
                member_id,
                label,
                drained,
            })
        });
    let alter = (
        text(),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u8>()),
        prop::option::of(any::<u16>()),
        prop::option::of(any::<u16>()),
    )
        .prop_map(|(group, a, b, c, d, e, f)| {
            Request::AlterGroupConfig(rollcall_protocol::AlterGroupConfigRequest {
                group,
                departure_delay_ms: a,
                max_revoking: b,
                max_revoking_per_member: c,
                balance: d,
                churn_budget_permille: e,
                imbalance_permille: f,
            })
        });
    prop_oneof![
        drain,
        alter,
        api_versions,
        authenticate,
        find,
        coordinators,
        join,
        heartbeat,
        leave,
        commit,
        fetch,
        list,
        describe,
        relinquish,
        heartbeats,
        trace,
    ]
}

fn heartbeat_request() -> impl Strategy<Value = HeartbeatRequest> {
    (
        text(),
        text(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        small_vec(topic_partitions()),
        prop_oneof![
            Just(Vec::new()),
            small_vec(
                (text(), any::<u32>(), any::<f64>()).prop_map(|(topic, partition, load)| {
                    rollcall_protocol::PartitionLoad {
                        topic,
                        partition,
                        load,
                    }
                })
            ),
        ],
    )
        .prop_map(
            |(group, member_id, generation, sequence, progress, acked_revocations, loads)| {
                HeartbeatRequest {
                    loads,
                    group: group.into(),
                    member_id: member_id.into(),
                    generation,
                    sequence,
                    progress,
                    acked_revocations,
                }
            },
        )
}

/// A result of either shape: success with its fields, or an error with its message.
/// Any combination encodes; these are the two the coordinator sends.
fn heartbeat_result() -> impl Strategy<Value = HeartbeatResult> {
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(generation, session_timeout_ms)| {
            HeartbeatResult {
                code: ErrorCode::None,
                generation,
                session_timeout_ms,
                message: String::new(),
            }
        }),
        (failure_code(), text()).prop_map(|(code, message)| HeartbeatResult {
            code,
            generation: 0,
            session_timeout_ms: 0,
            message,
        }),
        (error_code(), any::<u32>(), any::<u32>(), text()).prop_map(
            |(code, generation, session_timeout_ms, message)| HeartbeatResult {
                code,
                generation,
                session_timeout_ms,
                message,
            }
        ),
    ]
}

fn member_description() -> impl Strategy<Value = MemberDescription> {
    (
        (
            text(),
            opt_text(),
            text(),
            liveness(),
            any::<u64>(),
            any::<u64>(),
        ),
        small_vec(topic_partitions()),
        small_vec(topic_partitions()),
        small_vec(topic_partitions()),
    )
        .prop_map(
            |(
                (
                    member_id,
                    instance_id,
                    client_id,
                    liveness,
                    since_heartbeat_ms,
                    since_progress_ms,
                ),
                owned,
                pending_revoke,
                pending_grant,
            )| MemberDescription {
                operator: None,
                member_id,
                instance_id,
                client_id,
                liveness,
                since_heartbeat_ms,
                since_progress_ms,
                owned,
                pending_revoke,
                pending_grant,
                detection: None,
            },
        )
}

fn expel_basis() -> impl Strategy<Value = ExpelBasis> {
    (0u8..4).prop_map(|v| ExpelBasis::from_u8(v).unwrap())
}

fn detection_summary() -> impl Strategy<Value = DetectionSummary> {
    (
        (any::<u64>(), any::<u64>(), any::<u64>()),
        (any::<u32>(), any::<u32>(), any::<u32>()),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<i32>(),
            any::<u32>(),
        ),
        (any::<u64>(), any::<u64>()),
        small_vec((any::<u32>(), any::<u64>())),
    )
        .prop_map(
            |(
                (pooled_gaps, span_ms, clean_gaps),
                (gap_median_ms, gap_longest_ms, longest_centi),
                (tail_gaps, threshold_centi, exceedances, shape_milli, scale_centi),
                (loss_runs, lost_beats),
                tail,
            )| DetectionSummary {
                pooled_gaps,
                span_ms,
                clean_gaps,
                gap_median_ms,
                gap_longest_ms,
                longest_centi,
                tail_gaps,
                threshold_centi,
                exceedances,
                shape_milli,
                scale_centi,
                loss_runs,
                lost_beats,
                tail: tail
                    .into_iter()
                    .map(|(over_centi, gaps)| TailCount { over_centi, gaps })
                    .collect(),
            },
        )
}

fn member_detection() -> impl Strategy<Value = MemberDetection> {
    (
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (any::<u64>(), any::<u64>()),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(
            |(
                (in_state_ms, phi_centi, suspect_after_ms, expel_after_ms, gaps),
                (beats_lost, beats_late),
                (gap_p50_ms, gap_p99_ms, gap_p999_ms, gap_max_ms),
            )| MemberDetection {
                in_state_ms,
                phi_centi,
                suspect_after_ms,
                expel_after_ms,
                gaps,
                beats_lost,
                beats_late,
                gap_p50_ms,
                gap_p99_ms,
                gap_p999_ms,
                gap_max_ms,
                expel_basis: None,
            },
        )
}

fn response() -> impl Strategy<Value = Response> {
    let api_versions =
        (small_vec(version_range()), any::<u32>()).prop_map(|(versions, max_frame_size)| {
            Response::ApiVersions(ApiVersionsResponse {
                versions,
                max_frame_size,
            })
        });
    let join = (text(), any::<u32>(), any::<u32>()).prop_map(
        |(member_id, generation, heartbeat_interval_ms)| {
            Response::Join(JoinResponse {
                member_id,
                generation,
                heartbeat_interval_ms,
            })
        },
    );
    let heartbeat = (any::<u32>(), any::<u32>()).prop_map(|(generation, session_timeout_ms)| {
        Response::Heartbeat(HeartbeatResponse {
            generation,
            session_timeout_ms,
        })
    });
    let partition_result =
        (text(), any::<u32>(), error_code()).prop_map(|(topic, partition, error)| {
            PartitionResult {
                topic,
                partition,
                error,
            }
        });
    let commit = small_vec(partition_result)
        .prop_map(|results| Response::CommitOffsets(CommitOffsetsResponse { results }));
    let committed = (text(), any::<u32>(), any::<i64>(), text()).prop_map(
        |(topic, partition, offset, metadata)| CommittedOffset {
            topic,
            partition,
            offset,
            metadata,
        },
    );
    let fetch = (small_vec(committed), prop::option::of(any::<bool>()))
        .prop_map(|(offsets, more)| Response::FetchOffsets(FetchOffsetsResponse { offsets, more }));
    let listing = (text(), group_state(), any::<u32>(), any::<u32>()).prop_map(
        |(group, state, generation, members)| GroupListing {
            group,
            state,
            generation,
            members,
        },
    );
    let list = (small_vec(listing), prop::option::of(any::<bool>()))
        .prop_map(|(groups, more)| Response::ListGroups(ListGroupsResponse { groups, more }));
    let describe = (
        text(),
        group_state(),
        any::<u32>(),
        text(),
        prop::collection::vec((member_description(), member_detection()), 0..3),
        prop::option::of((text(), prop::option::of(text()))),
        prop::option::of(any::<bool>()),
        (prop::option::of(detection_summary()), expel_basis()),
    )
        .prop_map(
            |(group, state, generation, assignor, members, detection, more, (summary, basis))| {
                // A page (versions 2 and 3) always has the detection details.
                let detection = match (detection, more) {
                    (None, Some(_)) => Some((String::new(), None)),
                    (detection, _) => detection,
                };
                // Only a page carries the summary (version 3).
                let summary = summary.filter(|_| more.is_some() && detection.is_some());
                // At versions 1 to 3 every member carries its detection, and at 3 its
                // expel basis; at 0 none does.
                let members = members
                    .into_iter()
                    .map(|(mut m, mut d)| {
                        d.expel_basis = summary.is_some().then_some(basis);
                        m.detection = detection.is_some().then_some(d);
                        m
                    })
                    .collect();
                Response::DescribeGroup(DescribeGroupResponse {
                    operator: None,
                    group,
                    state,
                    generation,
                    assignor,
                    members,
                    detection: detection.map(|(detector, shadow)| {
                        Box::new(GroupDetection {
                            detector,
                            shadow,
                            summary,
                        })
                    }),
                    more,
                })
            },
        );
    let heartbeats = small_vec(heartbeat_result())
        .prop_map(|results| Response::Heartbeats(HeartbeatsResponse { results }));
    prop_oneof![
        api_versions,
        join,
        heartbeat,
        Just(Response::Leave),
        commit,
        fetch,
        list,
        describe,
        Just(Response::Relinquish),
        heartbeats,
        trace_response(),
        (text(), any::<bool>(), text()).prop_map(|(payload, complete, principal)| {
            Response::Authenticate(AuthenticateResponse {
                payload,
                complete,
                principal,
            })
        }),
        text().prop_map(|addr| Response::FindCoordinator(FindCoordinatorResponse { addr })),
        small_vec(text())
            .prop_map(|members| { Response::Drain(rollcall_protocol::DrainResponse { members }) }),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u8>(),
            any::<u16>(),
            any::<u16>()
        )
            .prop_map(|(a, b, c, d, e, f)| {
                Response::AlterGroupConfig(rollcall_protocol::AlterGroupConfigResponse {
                    config: rollcall_protocol::GroupSettings {
                        departure_delay_ms: a,
                        max_revoking: b,
                        max_revoking_per_member: c,
                        balance: d,
                        churn_budget_permille: e,
                        imbalance_permille: f,
                    },
                })
            }),
        small_vec((text(), text())).prop_map(|listed| {
            Response::ListCoordinators(ListCoordinatorsResponse {
                coordinators: listed
                    .into_iter()
                    .map(|(id, addr)| CoordinatorListing { id, addr })
                    .collect(),
            })
        }),
        error_response(),
    ]
}

/// A page of a trace: at version 1 any entries; at version 0 heartbeats alone, with no
/// sequence number or duration (what the version carries).
fn trace_response() -> impl Strategy<Value = Response> {
    let arrival = (
        text(),
        any::<u64>(),
        any::<u64>(),
        prop::sample::select(&ArrivalKind::ALL[..]),
        any::<u64>(),
    );
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        small_vec(arrival),
        any::<bool>(),
    )
        .prop_map(|(epoch, cursor, dropped, arrivals, events)| {
            Response::TraceGroup(TraceGroupResponse {
                epoch,
                cursor,
                dropped,
                arrivals: arrivals
                    .into_iter()
                    .map(
                        |(member_id, at_us, sequence, kind, value_us)| match events {
                            true => Arrival {
                                member_id,
                                at_us,
                                sequence,
                                kind,
                                value_us,
                            },
                            false => Arrival {
                                member_id,
                                at_us,
                                ..Arrival::default()
                            },
                        },
                    )
                    .collect(),
                events,
            })
        })
}

/// Error answers, for known API keys and for keys this build does not know (the answer
/// to an unknown request), which must decode all the same.
fn error_response() -> impl Strategy<Value = Response> {
    let api_key = prop_oneof![
        3 => prop::sample::select(&ApiKey::ALL[..]).prop_map(|k| k as u16),
        1 => any::<u16>(),
    ];
    (api_key, failure_code(), text(), small_vec(version_range())).prop_map(
        |(api_key, code, message, supported)| {
            Response::Error(ErrorResponse {
                api_key,
                code,
                message,
                supported,
            })
        },
    )
}

fn push() -> impl Strategy<Value = Push> {
    let assignment = (text(), text(), any::<u32>(), small_vec(topic_partitions())).prop_map(
        |(group, member_id, generation, partitions)| {
            Push::Assignment(AssignmentPush {
                group,
                member_id,
                generation,
                partitions,
            })
        },
    );
    let revoke = (text(), text(), any::<u32>(), small_vec(topic_partitions())).prop_map(
        |(group, member_id, generation, partitions)| {
            Push::Revoke(RevokePush {
                group,
                member_id,
                generation,
                partitions,
            })
        },
    );
    let expelled =
        (text(), text(), expel_reason(), text()).prop_map(|(group, member_id, reason, message)| {
            Push::Expelled(ExpelledPush {
                group,
                member_id,
                reason,
                message,
            })
        });
    let shutdown = text().prop_map(|message| Push::Shutdown(ShutdownPush { message }));
    prop_oneof![assignment, revoke, expelled, shutdown]
}

/// A header this build does not decode: a known kind with an unknown key or version.
/// Its frame carries an empty body, which is never a readable error answer.
fn unsupported_header() -> impl Strategy<Value = Header> {
    let kind = prop_oneof![
        Just(FrameKind::Request),
        Just(FrameKind::Response),
        Just(FrameKind::Push),
    ];
    (kind, any::<u16>(), any::<u16>(), any::<u32>()).prop_filter_map(
        "a key and version this build knows",
        |(kind, api_key, api_version, correlation_id)| {
            let max_version = match kind {
                FrameKind::Request => ApiKey::from_u16(api_key).map(max_request_version),
                FrameKind::Response => ApiKey::from_u16(api_key).map(|_| CURRENT_VERSION),
                FrameKind::Push => PushKey::from_u16(api_key).map(|_| CURRENT_VERSION),
            };
            max_version
                .is_none_or(|max| api_version > max)
                .then_some(Header {
                    kind,
                    api_key,
                    api_version,
                    correlation_id,
                })
        },
    )
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        4 => (any::<u32>(), request()).prop_map(|(id, r)| Frame::request(id, r)),
        4 => (any::<u32>(), response()).prop_map(|(id, r)| Frame::response(id, r)),
        2 => push().prop_map(Frame::push),
        1 => unsupported_header().prop_map(|h| Frame {
            correlation_id: h.correlation_id,
            body: Body::Unsupported(h),
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn encode(frame: &Frame) -> BytesMut {
    let mut buf = BytesMut::new();
    frame
        .encode(&mut buf, usize::MAX)
        .expect("generated frames fit");
    buf
}

/// Feeds `bytes` to a codec in chunks of the given sizes (cycled), decoding after each
/// chunk as a transport would. Returns the frames, the first error, and the bytes left.
fn feed(
    codec: &mut Codec,
    bytes: &[u8],
    chunks: &[usize],
) -> (Vec<Frame>, Option<FrameError>, BytesMut) {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut sizes = chunks.iter().copied().cycle();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = sizes.next().unwrap_or(rest.len()).clamp(1, rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            let cap_before = buf.capacity();
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => {
                    assert_capacity_bounded(&buf, cap_before, codec.max_frame_size());
                    break;
                }
                Err(e) => return (frames, Some(e), buf),
            }
        }
    }
    (frames, None, buf)
}

/// Waiting for more bytes, the decoder grows the buffer to one whole frame at most.
fn assert_capacity_bounded(buf: &BytesMut, cap_before: usize, max_frame_size: usize) {
    let bound = cap_before.max(max_frame_size.saturating_add(LENGTH_PREFIX_SIZE));
    assert!(
        buf.capacity() <= bound,
        "capacity {} exceeds {bound}",
        buf.capacity()
    );
}

/// Decodes everything the codec will take from `bytes` (all at once), checking that each
/// decoded frame re-encodes to bytes that decode to the same frame.
fn decode_all_checked(max_frame_size: usize, bytes: &[u8]) {
    let mut codec = Codec::new(max_frame_size);
    let mut buf = BytesMut::from(bytes);
    loop {
        let cap_before = buf.capacity();
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => assert_reencodes(&frame),
            Ok(None) => {
                assert_capacity_bounded(&buf, cap_before, max_frame_size);
                break;
            }
            Err(_) => break,
        }
    }
    // Frame::decode over the whole input, as if it were one frame's bytes.
    if let Ok(frame) = Frame::decode(bytes) {
        assert_reencodes(&frame);
    }
}

fn assert_reencodes(frame: &Frame) {
    let bytes = encode(frame);
    let again = Frame::decode(&bytes[LENGTH_PREFIX_SIZE..]).expect("re-encoded frame decodes");
    assert_eq!(&again, frame);
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn frame_encode_then_decode_is_identity(frame in frame()) {
        let bytes = encode(&frame);
        let declared = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        prop_assert_eq!(declared, bytes.len() - LENGTH_PREFIX_SIZE);
        // The sizes paged answers are cut by are the encoder's.
        let body = declared - rollcall_protocol::HEADER_SIZE;
        match &frame.body {
            Body::Response(Response::ListGroups(r)) => prop_assert_eq!(r.encoded_len(), body),
            Body::Response(Response::FetchOffsets(r)) => prop_assert_eq!(r.encoded_len(), body),
            Body::Response(Response::DescribeGroup(r)) => prop_assert_eq!(r.encoded_len(), body),
            Body::Response(Response::TraceGroup(r)) => {
                let version = u16::from(r.events);
                let entries: usize = r.arrivals.iter().map(|a| a.encoded_size(version)).sum();
                prop_assert_eq!(2 + 3 * 8 + 4 + entries, body);
            }
            _ => {}
        }
        let decoded = Frame::decode(&bytes[LENGTH_PREFIX_SIZE..]);
        prop_assert_eq!(decoded.ok(), Some(frame.clone()));

        // Exactly at the limit it encodes; one byte under, it does not.
        let mut buf = BytesMut::from(&b"prior"[..]);
        prop_assert!(frame.encode(&mut buf, declared).is_ok());
        prop_assert_eq!(&buf[5..], &bytes[..]);
        let mut buf = BytesMut::from(&b"prior"[..]);
        prop_assert!(frame.encode(&mut buf, declared - 1).is_err());
        prop_assert_eq!(&buf[..], b"prior");
    }

    #[test]
    fn codec_round_trips_frames_fed_in_chunks(
        frames in prop::collection::vec(frame(), 1..5),
        chunks in prop::collection::vec(1usize..64, 1..8),
    ) {
        let mut codec = Codec::default();
        let mut wire = BytesMut::new();
        for frame in &frames {
            codec.encode(frame, &mut wire).expect("encodes");
        }
        let (decoded, error, rest) = feed(&mut codec, &wire, &chunks);
        prop_assert!(error.is_none(), "unexpected error {:?}", error);
        prop_assert_eq!(decoded, frames);
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        decode_all_checked(SMALL_MAX, &bytes);
        decode_all_checked(usize::MAX, &bytes);
    }

    #[test]
    fn truncated_frames_never_panic(frame in frame(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&frame);
        let cut = cut.index(bytes.len());
        // With the original prefix the codec waits for the rest of the frame...
        let mut codec = Codec::default();
        let mut buf = BytesMut::from(&bytes[..cut]);
        prop_assert!(matches!(codec.decode(&mut buf), Ok(None)));
        // ...and a prefix patched to the shorter length is an error or a different frame.
        if cut >= LENGTH_PREFIX_SIZE {
            let mut patched = bytes[..cut].to_vec();
            let len = (cut - LENGTH_PREFIX_SIZE) as u32;
            patched[..LENGTH_PREFIX_SIZE].copy_from_slice(&len.to_be_bytes());
            decode_all_checked(DEFAULT_MAX, &patched);
            decode_all_checked(SMALL_MAX, &patched);
        }
    }

    #[test]
    fn mutated_frames_never_panic(
        frames in prop::collection::vec(frame(), 1..3),
        mutations in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        chunks in prop::collection::vec(1usize..32, 1..4),
    ) {
        let mut wire = Vec::new();
        for frame in &frames {
            wire.extend_from_slice(&encode(frame));
        }
        for (at, flip) in mutations {
            let i = at.index(wire.len());
            wire[i] ^= flip;
        }
        decode_all_checked(DEFAULT_MAX, &wire);
        decode_all_checked(SMALL_MAX, &wire);
        let (frames, _, _) = feed(&mut Codec::new(SMALL_MAX), &wire, &chunks);
        for frame in &frames {
            assert_reencodes(frame);
        }
    }

    #[test]
    fn oversized_length_prefixes_are_refused_without_reserving(
        excess in 1u32..=u32::MAX - SMALL_MAX as u32,
        tail in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let declared = SMALL_MAX as u32 + excess;
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&declared.to_be_bytes());
        buf.extend_from_slice(&tail);
        let cap_before = buf.capacity();
        let result = Codec::new(SMALL_MAX).decode(&mut buf);
        let refused = matches!(
            result,
            Err(FrameError::TooLarge { declared: d, max: SMALL_MAX }) if d == declared as usize
        );
        prop_assert!(refused);
        prop_assert_eq!(buf.capacity(), cap_before);
    }

    #[test]
    fn a_partial_frame_reserves_at_most_one_frame(
        declared in 9u32..=SMALL_MAX as u32,
        have in 0usize..SMALL_MAX,
    ) {
        let total = LENGTH_PREFIX_SIZE + declared as usize;
        let have = have % total;
        let mut bytes = vec![0u8; have.max(LENGTH_PREFIX_SIZE)];
        bytes[..LENGTH_PREFIX_SIZE].copy_from_slice(&declared.to_be_bytes());
        bytes.truncate(have);
        let mut buf = BytesMut::from(&bytes[..]);
        prop_assert!(matches!(Codec::new(SMALL_MAX).decode(&mut buf), Ok(None)));
        prop_assert!(buf.capacity() <= total.max(have));
        prop_assert_eq!(&buf[..], &bytes[..]);
    }
}

const DEFAULT_MAX: usize = rollcall_protocol::DEFAULT_MAX_FRAME_SIZE;
