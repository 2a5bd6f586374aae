//! The operator's messages and the versioned fields they came with: Join version 3
//! (placement), Heartbeat and Heartbeats version 1 (loads), Drain, AlterGroupConfig and
//! DescribeGroup version 4. Each round-trips; malformed, oversized and unknown-version
//! input is refused or skipped; and a request without the new fields is sent exactly as
//! before.

use bytes::{BufMut, BytesMut};
use rollcall_protocol::{
    AlterGroupConfigRequest, AlterGroupConfigResponse, ApiKey, Body, DecodeError,
    DescribeGroupRequest, DescribeGroupResponse, DetectionSummary, DrainRequest, DrainResponse,
    Frame, FrameError, GroupDetection, GroupOperator, GroupSettings, GroupState, HeartbeatRequest,
    HeartbeatsRequest, JoinPlacement, JoinRequest, Liveness, MemberDescription, MemberDetection,
    MemberOperator, Page, PartitionLoad, Request, Reservation, Response, TopicRacks,
    TopicSubscription, DEFAULT_MAX_FRAME_SIZE,
};

fn encode(frame: &Frame) -> Vec<u8> {
    let mut buf = BytesMut::new();
    frame
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .expect("encodes");
    buf.to_vec()
}

/// Encodes, checks the header's version, and decodes back.
fn round_trip(frame: Frame, version: u16) {
    let bytes = encode(&frame);
    assert_eq!(
        u16::from_be_bytes([bytes[7], bytes[8]]),
        version,
        "{frame:?}"
    );
    assert_eq!(Frame::decode(&bytes[4..]).expect("decodes"), frame);
}

fn join() -> JoinRequest {
    JoinRequest {
        group: "g".into(),
        member_id: None,
        instance_id: Some("host-1".into()),
        client_id: "c".into(),
        join_token: 7,
        subscription: vec![TopicSubscription {
            topic: "t".into(),
            partitions: 2,
        }],
        session_timeout_ms: 10_000,
        progress_timeout_ms: 60_000,
        rebalance_timeout_ms: 30_000,
        lease_timeout_ms: 0,
        detector: String::new(),
        placement: None,
    }
}

fn placement() -> Box<JoinPlacement> {
    Box::new(JoinPlacement {
        label: "host-1".into(),
        rack: "eu-1a".into(),
        capacity: 4,
        topic_racks: vec![TopicRacks {
            topic: "t".into(),
            racks: vec!["eu-1a".into(), String::new()],
        }],
    })
}

fn beat(loads: Vec<PartitionLoad>) -> HeartbeatRequest {
    HeartbeatRequest {
        group: "g".into(),
        member_id: "m".into(),
        generation: 3,
        sequence: 9,
        progress: 1,
        acked_revocations: Vec::new(),
        loads,
    }
}

fn load(p: u32, load: f64) -> PartitionLoad {
    PartitionLoad {
        topic: "t".into(),
        partition: p,
        load,
    }
}

#[test]
fn join_carries_a_placement_at_version_3_and_nothing_new_below() {
    round_trip(Frame::request(1, Request::Join(join())), 0);
    let v2 = JoinRequest {
        detector: "fixed".into(),
        ..join()
    };
    round_trip(Frame::request(1, Request::Join(v2.clone())), 2);
    let v3 = JoinRequest {
        placement: Some(placement()),
        ..v2.clone()
    };
    round_trip(Frame::request(1, Request::Join(v3.clone())), 3);
    // Version 3 is version 2's body and the placement after it.
    let (old, new) = (
        encode(&Frame::request(1, Request::Join(v2))),
        encode(&Frame::request(1, Request::Join(v3))),
    );
    assert_eq!(old[9..], new[9..old.len()]);
    // A default placement still goes at version 3 (the member said so).
    round_trip(
        Frame::request(
            1,
            Request::Join(JoinRequest {
                placement: Some(Box::default()),
                ..join()
            }),
        ),
        3,
    );
}

#[test]
fn heartbeats_carry_loads_at_version_1_only_when_they_report_some() {
    round_trip(Frame::request(1, Request::Heartbeat(beat(Vec::new()))), 0);
    round_trip(
        Frame::request(
            1,
            Request::Heartbeat(beat(vec![load(0, 12.5), load(1, 0.0)])),
        ),
        1,
    );
    let mixed = HeartbeatsRequest {
        beats: vec![beat(Vec::new()), beat(vec![load(1, 3.0)])],
    };
    round_trip(Frame::request(1, Request::Heartbeats(mixed.clone())), 1);
    round_trip(
        Frame::request(
            1,
            Request::Heartbeats(HeartbeatsRequest {
                beats: vec![beat(Vec::new())],
            }),
        ),
        0,
    );
    // encoded_len is the encoded size at the version sent.
    let lone = beat(vec![load(0, 1.0)]);
    let bytes = encode(&Frame::request(1, Request::Heartbeat(lone.clone())));
    assert_eq!(bytes.len(), 4 + 9 + lone.encoded_len());
    // Batches of beats with loads leave room for every beat's loads array.
    let beats: Vec<HeartbeatRequest> = (0..5).map(|_| beat(vec![load(0, 1.0)])).collect();
    let max = 9 + 4 + 2 * beats[0].encoded_len();
    assert_eq!(HeartbeatsRequest::batch_sizes(&beats, max), [2, 2, 1]);
}

#[test]
fn drain_and_alter_group_config_round_trip() {
    for drain in [
        DrainRequest {
            group: "g".into(),
            member_id: "m-1".into(),
            label: String::new(),
            drained: true,
        },
        DrainRequest {
            group: "g".into(),
            member_id: String::new(),
            label: "host-1".into(),
            drained: false,
        },
    ] {
        round_trip(Frame::request(4, Request::Drain(drain)), 0);
    }
    round_trip(
        Frame::response(
            4,
            Response::Drain(DrainResponse {
                members: vec!["m-1".into(), "m-2".into()],
            }),
        ),
        0,
    );
    let read = AlterGroupConfigRequest {
        group: "g".into(),
        ..Default::default()
    };
    round_trip(
        Frame::request(5, Request::AlterGroupConfig(read.clone())),
        0,
    );
    assert_eq!(
        encode(&Frame::request(5, Request::AlterGroupConfig(read)))[16],
        0
    );
    let some = AlterGroupConfigRequest {
        group: "g".into(),
        max_revoking: Some(200),
        balance: Some(1),
        imbalance_permille: Some(50),
        ..Default::default()
    };
    assert_eq!(some.set_mask(), 0x02 | 0x08 | 0x20);
    round_trip(Frame::request(5, Request::AlterGroupConfig(some)), 0);
    let all = AlterGroupConfigRequest {
        group: "g".into(),
        departure_delay_ms: Some(30_000),
        max_revoking: Some(1),
        max_revoking_per_member: Some(2),
        balance: Some(0),
        churn_budget_permille: Some(100),
        imbalance_permille: Some(1000),
    };
    assert_eq!(all.set_mask(), 0x3f);
    round_trip(Frame::request(5, Request::AlterGroupConfig(all)), 0);
    round_trip(
        Frame::response(
            5,
            Response::AlterGroupConfig(AlterGroupConfigResponse {
                config: GroupSettings {
                    departure_delay_ms: 30_000,
                    max_revoking: 200,
                    max_revoking_per_member: 0,
                    balance: 1,
                    churn_budget_permille: 100,
                    imbalance_permille: 100,
                },
            }),
        ),
        0,
    );
}

fn described_v4() -> DescribeGroupResponse {
    DescribeGroupResponse {
        group: "g".into(),
        state: GroupState::Stable,
        generation: 4,
        assignor: "sticky".into(),
        members: vec![MemberDescription {
            member_id: "m".into(),
            instance_id: None,
            client_id: "c".into(),
            liveness: Liveness::Alive,
            since_heartbeat_ms: 1,
            since_progress_ms: 2,
            owned: Vec::new(),
            pending_revoke: Vec::new(),
            pending_grant: Vec::new(),
            detection: Some(MemberDetection {
                expel_basis: Some(Default::default()),
                ..Default::default()
            }),
            operator: Some(MemberOperator {
                label: "host-1".into(),
                rack: "eu-1a".into(),
                capacity: 2,
                drained: true,
                load: 41.5,
            }),
        }],
        detection: Some(Box::new(GroupDetection {
            detector: "fixed".into(),
            shadow: None,
            summary: Some(DetectionSummary::default()),
        })),
        more: Some(false),
        operator: Some(Box::new(GroupOperator {
            config: GroupSettings {
                departure_delay_ms: 5_000,
                ..Default::default()
            },
            drained_labels: vec!["host-1".into()],
            reservations: vec![Reservation {
                instance_id: "host-2".into(),
                member_id: "host-2#7".into(),
                partitions: 3,
                remaining_ms: 4_000,
            }],
        })),
    }
}

#[test]
fn describe_group_version_4_round_trips_and_its_size_is_exact() {
    let request = DescribeGroupRequest {
        group: "g".into(),
        detection: true,
        page: Some(Page {
            after: None,
            limit: 10,
        }),
        summary: true,
        operator: true,
    };
    round_trip(
        Frame::request(6, Request::DescribeGroup(request.clone())),
        4,
    );
    // Without a page the flag changes nothing (as summary).
    let bare = DescribeGroupRequest {
        page: None,
        ..request
    };
    let bytes = encode(&Frame::request(6, Request::DescribeGroup(bare)));
    assert_eq!(u16::from_be_bytes([bytes[7], bytes[8]]), 1);
    let answer = described_v4();
    let len = answer.encoded_len();
    let frame = Frame::response(6, Response::DescribeGroup(answer));
    assert_eq!(encode(&frame).len(), 4 + 9 + len);
    round_trip(frame, 4);
}

/// Every proper prefix of a message's body is refused (never a panic).
fn truncations_are_refused(frame: &Frame) {
    let bytes = encode(frame);
    for cut in 13..bytes.len() {
        let result = Frame::decode(&bytes[4..cut]);
        assert!(
            matches!(result, Err(FrameError::Malformed { .. })),
            "{frame:?} cut at {cut}: {result:?}"
        );
    }
}

#[test]
fn truncated_malformed_and_oversized_input_is_refused() {
    let frames = [
        Frame::request(
            1,
            Request::Join(JoinRequest {
                placement: Some(placement()),
                ..join()
            }),
        ),
        Frame::request(1, Request::Heartbeat(beat(vec![load(0, 1.0)]))),
        Frame::request(
            1,
            Request::Drain(DrainRequest {
                group: "g".into(),
                member_id: "m".into(),
                label: String::new(),
                drained: true,
            }),
        ),
        Frame::request(
            1,
            Request::AlterGroupConfig(AlterGroupConfigRequest {
                group: "g".into(),
                departure_delay_ms: Some(1),
                imbalance_permille: Some(2),
                ..Default::default()
            }),
        ),
        Frame::response(1, Response::DescribeGroup(described_v4())),
    ];
    for frame in &frames {
        truncations_are_refused(frame);
    }
    // A drained flag that is not a boolean.
    let mut bytes = encode(&frames[2]);
    *bytes.last_mut().expect("a body") = 2;
    assert!(matches!(
        Frame::decode(&bytes[4..]),
        Err(FrameError::Malformed {
            source: DecodeError::Invalid {
                what: "drained",
                ..
            },
            ..
        })
    ));
    // A setting bit nobody defined.
    let mut body = BytesMut::new();
    body.put_u16(1);
    body.put_slice(b"g");
    body.put_u8(0x40);
    let frame = raw(ApiKey::AlterGroupConfig as u16, 0, &body);
    assert!(matches!(
        Frame::decode(&frame),
        Err(FrameError::Malformed {
            source: DecodeError::Invalid { what: "set", .. },
            ..
        })
    ));
    // An array count past what the frame holds is refused before any allocation.
    let mut body = BytesMut::new();
    body.put_u16(1);
    body.put_slice(b"g");
    body.put_u16(1);
    body.put_slice(b"m");
    body.put_u32(1);
    body.put_u64(1);
    body.put_u64(1);
    body.put_u32(0); // no acknowledgements
    body.put_u32(u32::MAX); // loads
    let frame = raw(ApiKey::Heartbeat as u16, 1, &body);
    assert!(matches!(
        Frame::decode(&frame),
        Err(FrameError::Malformed {
            source: DecodeError::Truncated { what: "loads" },
            ..
        })
    ));
}

/// A request frame's bytes after the length prefix.
fn raw(key: u16, version: u16, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&9u32.to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn versions_past_the_newest_are_skipped() {
    for (key, version) in [
        (ApiKey::Join, 4),
        (ApiKey::Heartbeat, 2),
        (ApiKey::Heartbeats, 2),
        (ApiKey::DescribeGroup, 5),
        (ApiKey::Drain, 1),
        (ApiKey::AlterGroupConfig, 1),
    ] {
        let frame = Frame::decode(&raw(key as u16, version, &[1, 2, 3])).expect("skipped");
        assert!(
            matches!(frame.body, Body::Unsupported(h) if h.api_version == version),
            "{key:?} v{version}"
        );
    }
}
